"""The vision tower (qwen/vision.py) against transformers' Qwen3_5VisionModel, on a checkpoint
transformers wrote with a vision_config; its shape rules against the real checkpoint; loading.

The tower here has 2 blocks, width 32, 2 heads (head_dim 16: 4 rotary frequencies per axis) and
a 4 x 4 position table, so the grids below (6 x 8, 4 x 4, 6 x 10) exercise the interpolation
(stretching and the identity), the merge-block order and attention kept inside each image.
Every parameter (LayerNorms and biases included) is redrawn, seeded, before saving."""
import json

import pytest
import torch
import torch.nn.functional as F

from conftest import MANIFEST
from hf_layers import TEXT
from engine.checkpoint import open_weights
from engine.shapes import vision_shapes
from qwen.config import Config, VisionConfig
from qwen.lang import QwenError
from qwen.model import load_model
from engine.tiny import TINY_VISION_CONFIG, tiny_config, tiny_tensors

transformers = pytest.importorskip("transformers")

VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=TEXT["hidden_size"],
              patch_size=4, num_position_embeddings=16, temporal_patch_size=2, spatial_merge_size=2)
ONE_IMAGE = [[1, 6, 8]]
TWO_IMAGES = [[1, 4, 4], [1, 6, 10]]                 # different sizes, one sequence


@pytest.fixture(scope="module")
def tower_checkpoint(tmp_path_factory):
    """(folder, transformers' fp32 model) of a multimodal checkpoint with a 2-block tower."""
    config = transformers.Qwen3_5Config(text_config=TEXT, vision_config=VISION)
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1 / p[0].numel() ** 0.5 if p.dim() > 1 else 0.3    # matrices by their fan-in; biases, norms
            centre = 1.0 if p.dim() == 1 and "visual" in name and "norm" in name and name.endswith("weight") else 0.0
            p.copy_(centre + torch.randn(p.shape, generator=g) * scale)   # LayerNorm weights around 1
    folder = tmp_path_factory.mktemp("tower")
    model.save_pretrained(folder)
    return folder, model


def _pixels(grid, seed=0):
    patches = sum(t * h * w for t, h, w in grid)
    return torch.randn(patches, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(seed))


def _reference(model, pixels, grid):
    out = model.model.get_image_features(pixels, torch.tensor(grid)).pooler_output
    return torch.cat(out)


def _relative(got, ref):
    return ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def test_shape_rules_reproduce_the_real_vision_tower():
    """The 153 model.visual.* tensors of Qwen3.5-0.8B: names, shapes and dtypes, all of them."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    real = {k: (tuple(v["shape"]), v["dtype"]) for k, v in manifest["tensors"].items() if k.startswith("model.visual.")}
    cfg = Config.from_dict(manifest["config"])
    vcfg = VisionConfig.from_config(cfg)
    assert (vcfg.depth, vcfg.hidden_size, vcfg.num_heads, vcfg.grid_side, vcfg.patch_values) == (12, 768, 12, 48, 1536)
    shapes = {k: (tuple(s), d) for k, (s, d) in vision_shapes(vcfg, cfg.hidden_size).items()}
    assert len(real) == 153 and shapes == real


def test_vision_config_only_in_the_nested_layout():
    assert VisionConfig.from_config(Config.from_dict(tiny_config("text"))) is None
    assert VisionConfig.from_config(tiny_config()).num_position_embeddings == 16
    bad = tiny_config()
    bad["vision_config"] = dict(TINY_VISION_CONFIG, num_position_embeddings=15)
    with pytest.raises(QwenError, match=r"vision_config.num_position_embeddings.*a square number.*15"):
        VisionConfig.from_config(Config.from_dict(bad, source="x/config.json"))


def test_tiny_checkpoint_has_the_whole_tower_in_the_real_format(tiny_path):
    vcfg = VisionConfig.from_config(tiny_config())
    expected = vision_shapes(vcfg, tiny_config()["text_config"]["hidden_size"])
    tensors = tiny_tensors()
    tower = {k: (tuple(t.shape), "BF16" if t.dtype == torch.bfloat16 else str(t.dtype))
             for k, t in tensors.items() if k.startswith("model.visual.")}
    assert tower == {k: (tuple(s), d) for k, (s, d) in expected.items()}
    model = load_model(tiny_path)
    out = model.visual(_pixels([[1, 4, 4]])[:, :vcfg.patch_values], [[1, 4, 4]])
    assert out.shape == (4, model.cfg.hidden_size) and torch.isfinite(out).all()


@pytest.mark.parametrize("grid", [ONE_IMAGE, TWO_IMAGES], ids=["one-image", "two-images"])
@torch.inference_mode()
def test_tower_equals_transformers_in_fp32(tower_checkpoint, grid):
    folder, model = tower_checkpoint
    ours = load_model(folder)
    pixels = _pixels(grid)
    ref = _reference(model, pixels, grid)
    got = ours.visual(pixels, grid)
    assert got.dtype == torch.float32 and got.shape == ref.shape == (sum(t * h * w for t, h, w in grid) // 4, 64)
    assert _relative(got, ref) < 1e-5, _relative(got, ref)
    assert ref.abs().max() > 0.1


@torch.inference_mode()
def test_tower_in_bf16_as_transformers_computes_it(tower_checkpoint):
    """Both load the fp32 checkpoint in bf16 (transformers: from_pretrained(dtype=bfloat16), its
    default sdpa attention). Measured: identical, 0 difference, for one and for two images."""
    folder, _ = tower_checkpoint
    ours = load_model(folder, dtype=torch.bfloat16)
    ref_model = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(str(folder), dtype=torch.bfloat16).eval()
    for grid in (ONE_IMAGE, TWO_IMAGES):
        pixels = _pixels(grid, seed=1)
        got, ref = ours.visual(pixels, grid), _reference(ref_model, pixels, grid)
        assert got.dtype == ref.dtype == torch.bfloat16
        assert torch.equal(got, ref), _relative(got, ref)


@torch.inference_mode()
def test_images_do_not_see_each_other(tower_checkpoint):
    """Two images in one sequence give what each gives alone: attention stays inside an image."""
    ours = load_model(tower_checkpoint[0]).visual
    pixels = _pixels(TWO_IMAGES)
    both = ours(pixels, TWO_IMAGES)
    first, second = ours(pixels[:16], TWO_IMAGES[:1]), ours(pixels[16:], TWO_IMAGES[1:])
    assert torch.allclose(both, torch.cat([first, second]), atol=1e-6)
    weights = []
    ours(pixels, TWO_IMAGES, attentions=weights)
    assert [tuple(w.shape) for w in weights] == [(2, 16, 16), (2, 60, 60)] * 2           # blocks x images
    assert torch.allclose(weights[1].sum(-1), torch.ones(2, 60))


@torch.inference_mode()
def test_patch_embedding_matmul_equals_the_conv3d(tower_checkpoint):
    """A Conv3d with stride = kernel over patch-sized volumes is one matmul with the flattened kernel."""
    patch_embed = load_model(tower_checkpoint[0]).visual.patch_embed
    pixels = _pixels(ONE_IMAGE)
    w, b = patch_embed.proj.weight, patch_embed.proj.bias                # (32, 3, 2, 4, 4), (32,)
    conv = F.conv3d(pixels.view(-1, 3, 2, 4, 4), w, b, stride=(2, 4, 4)).flatten(1)   # (48, 32, 1, 1, 1)
    assert _relative(patch_embed(pixels), conv) < 1e-6 and conv.abs().max() > 0.1
    assert torch.allclose(patch_embed.conv3d(pixels), conv)


def _rewrite(folder, change):
    from safetensors.torch import load_file, save_file
    file = folder / "model.safetensors"
    tensors = load_file(file)
    change(tensors)
    save_file(tensors, file, metadata={"format": "pt"})
    return folder


def _copy(folder, to):
    import shutil
    return shutil.copytree(folder, to)


def test_loading_errors_name_the_key_and_both_shapes(tower_checkpoint, tmp_path):
    key = "model.visual.blocks.1.attn.qkv.bias"
    wrong = _rewrite(_copy(tower_checkpoint[0], tmp_path / "wrong"), lambda t: t.update({key: torch.zeros(95)}))
    with pytest.raises(QwenError, match=r"model\.visual\.blocks\.1\.attn\.qkv\.bias.*\[96\].*\[95\]"):   # key, both shapes
        load_model(wrong)
    with pytest.raises(QwenError, match=r"model\.visual\.blocks\.1\.attn\.qkv\.bias.*\[96\].*\[95\]"):   # the engine's check
        open_weights(wrong)
    missing = _rewrite(_copy(tower_checkpoint[0], tmp_path / "missing"), lambda t: t.pop("model.visual.merger.norm.bias"))
    with pytest.raises(QwenError, match=r"model\.visual\.merger\.norm\.bias"):
        load_model(missing)
    extra = _rewrite(_copy(tower_checkpoint[0], tmp_path / "extra"),
                     lambda t: t.update({"model.visual.blocks.2.norm1.weight": torch.ones(32)}))
    with pytest.raises(QwenError, match=r"Unexpected key model\.visual\.blocks\.2\.norm1\.weight"):
        load_model(extra)


def test_a_checkpoint_without_the_tower_still_loads(tower_checkpoint, tmp_path):
    from helpers import write_transformers_checkpoint
    assert load_model(write_transformers_checkpoint(tmp_path / "text", layout="text")).visual is None
    stripped = _rewrite(_copy(tower_checkpoint[0], tmp_path / "stripped"),
                        lambda t: [t.pop(k) for k in [k for k in t if k.startswith("model.visual.")]])
    model = load_model(stripped)                                          # a vision_config, no tower tensors
    assert model.visual is None and model(torch.tensor([[1, 2, 3]])).shape == (1, 3, TEXT["vocab_size"])
    text_only = load_model(tower_checkpoint[0], vision=False)                 # asked not to read it
    assert text_only.visual is None and not any(k.startswith("visual.") for k in text_only.state_dict())


def test_pixel_values_that_do_not_fit_the_grid_are_one_line(tiny_path):
    visual = load_model(tiny_path).visual
    with pytest.raises(QwenError, match=r"pixel_values has shape \(15, 96\), but grid_thw \[\(1, 4, 4\)\] needs \(16, 96\)"):
        visual(torch.zeros(15, 96), [[1, 4, 4]])
    with pytest.raises(QwenError, match=r"grid_thw \(1, 3, 4\).*multiples of 2"):
        visual(torch.zeros(12, 96), [[1, 3, 4]])
