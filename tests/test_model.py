"""The whole model against transformers' Qwen3.5, on checkpoints transformers wrote.

Layouts: a flat text-only export in fp32 with an untied lm_head, the released multimodal layout
(tied), and the multimodal layout in bf16 (tied). Norm weights, dt_bias and A_log are redrawn
before the comparison so that a swapped or forgotten norm shows (transformers initializes the
zero-centred norms to 0, the one value where `w` and `1 + w` mix-ups can hide)."""
import pytest
import torch

from helpers import write_transformers_checkpoint
from qwen.generate import generate_ids
from qwen.lang import QwenError
from qwen.model import DecoderLayer, Qwen35, load_model

transformers = pytest.importorskip("transformers")

LAYOUTS = {
    "text-fp32-untied": dict(layout="text", dtype=torch.float32, tied=False),
    "multimodal-fp32-tied": dict(layout="multimodal", dtype=torch.float32, tied=True),
    "multimodal-bf16-tied": dict(layout="multimodal", dtype=torch.bfloat16, tied=True),
}


def _redraw(folder, extra_scale=0.3, drop=None):
    """Give every norm weight, dt_bias and A_log non-trivial values (seeded), in place."""
    from safetensors.torch import load_file, save_file
    file = folder / "model.safetensors"
    tensors = load_file(file)
    g = torch.Generator().manual_seed(1)
    for name, t in sorted(tensors.items()):
        if "norm" in name or name.endswith(("dt_bias", "A_log")):
            tensors[name] = (t.float() + extra_scale * torch.randn(t.shape, generator=g)).to(t.dtype)
    for name in drop or ():
        tensors.pop(name)
    save_file(tensors, file, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module", params=list(LAYOUTS))
def checkpoint(request, tmp_path_factory):
    spec = LAYOUTS[request.param]
    folder = write_transformers_checkpoint(tmp_path_factory.mktemp(request.param), **spec)
    return _redraw(folder), spec


def _reference(folder, layout, dtype=torch.float32):
    cls = transformers.Qwen3_5ForCausalLM if layout == "text" else transformers.Qwen3_5ForConditionalGeneration
    return cls.from_pretrained(str(folder), dtype=dtype).eval()


def _ids(n, vocab=512, seed=0):
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def test_logits_equal_transformers(checkpoint):
    folder, spec = checkpoint
    ids = _ids(32)
    ours = load_model(folder)
    ref = _reference(folder, spec["layout"])(input_ids=ids).logits.float()
    got = ours(ids)
    assert got.dtype == torch.float32 and got.shape == ref.shape == (1, 32, 512)
    assert (got - ref).abs().max().item() < 1e-4, (got - ref).abs().max().item()
    assert ref.abs().max() > 0.1                                         # a comparison of real numbers


@torch.inference_mode()
def test_greedy_generation_equals_transformers(checkpoint):
    folder, spec = checkpoint
    ids = _ids(8, seed=1)
    ours = list(generate_ids(load_model(folder), ids[0].tolist(), max_new_tokens=32))
    ref = _reference(folder, spec["layout"]).generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    assert ours == ref[0, 8:].tolist()


@torch.inference_mode()
def test_bf16_compute_stays_close_to_transformers_in_bf16(tmp_path):
    folder = _redraw(write_transformers_checkpoint(tmp_path, layout="multimodal", dtype=torch.bfloat16, tied=True))
    ids = _ids(32)
    ours = load_model(folder, dtype=torch.bfloat16)
    assert ours.embed_tokens.weight.dtype == torch.bfloat16 and ours.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    got = ours(ids)
    ref = _reference(folder, "multimodal", torch.bfloat16)(input_ids=ids).logits.float()
    exact = load_model(folder)(ids)                                      # fp32 compute on the same weights
    assert (got - ref).abs().max() <= 2 * (ref - exact).abs().max() + 1e-3   # as close as transformers' own bf16


@torch.inference_mode()
def test_cached_decoding_equals_recomputing(checkpoint):
    folder, _ = checkpoint
    model = load_model(folder)
    ids = _ids(40, seed=2)
    full = model(ids)                                                    # (1, 40, vocab), no cache
    cache = model.new_cache()
    pieces = [model(ids[:, :13], cache=cache), model(ids[:, 13:30], cache=cache)]   # prefill in two calls
    pieces += [model(ids[:, t:t + 1], cache=cache) for t in range(30, 40)]           # then one at a time
    assert cache.length == 40
    assert (torch.cat(pieces, dim=1) - full).abs().max().item() < 1e-5
    last = model(ids[:, :25], cache=model.new_cache(), last=True)
    assert last.shape == (1, 1, 512) and (last[0, 0] - full[0, 24]).abs().max() < 1e-5


def test_cache_holds_what_each_layer_needs(checkpoint):
    folder, _ = checkpoint
    model = load_model(folder)
    cache = model.new_cache()
    model(_ids(7), cache=cache)
    cfg = model.cfg
    for layer, c in zip(model.layers, cache.layers):
        if layer.kind == "full_attention":
            assert c.k.shape == c.v.shape == (1, cfg.num_key_value_heads, 7, cfg.head_dim) and c.state is None
        else:
            conv = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
            assert c.conv.shape == (1, conv, cfg.linear_conv_kernel_dim - 1) and c.k is None
            assert c.state.shape == (1, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                     cfg.linear_value_head_dim) and c.state.dtype == torch.float32
    assert cache.nbytes == sum(c.nbytes for c in cache.layers) > 0


def test_decoder_layer_is_pre_norm():
    """x + mixer(norm1(x)), then + mlp(norm2(x)): with both sublayers replaced by known functions."""
    from qwen.config import Config
    from engine.tiny import tiny_config
    cfg = Config.from_dict(tiny_config(), source="tiny")
    layer = DecoderLayer(cfg, 0)
    layer.mix = lambda h, cos, sin, cache=None: 2 * h

    class PlusOne(torch.nn.Module):
        def forward(self, h):
            return h + 1
    layer.mlp = PlusOne()
    with torch.no_grad():
        layer.input_layernorm.weight.fill_(0.5)
        layer.post_attention_layernorm.weight.fill_(-0.25)
    x = torch.randn(1, 3, cfg.hidden_size)
    rms = lambda v, w: v / v.pow(2).mean(-1, keepdim=True).add(cfg.rms_norm_eps).sqrt() * (1 + w)   # noqa: E731
    y = x + 2 * rms(x, 0.5)
    assert torch.allclose(layer(x, None, None), y + rms(y, -0.25) + 1, atol=1e-6)


def test_loading_is_strict_reads_the_vision_tower_and_the_whole_mtp_head(tmp_path, monkeypatch):
    from qwen import model as model_module
    from engine.shapes import mtp_shapes
    from qwen.config import Config
    plain = write_transformers_checkpoint(tmp_path / "plain", layout="multimodal", tied=True)
    head = {n: torch.zeros(shape) for n, (shape, _) in mtp_shapes(Config.load(plain)).items()}
    folder = write_transformers_checkpoint(tmp_path / "mm", layout="multimodal", tied=True, extra=head)
    read = []
    original = model_module._Converted.__getitem__
    monkeypatch.setattr(model_module._Converted, "__getitem__", lambda self, n: read.append(n) or original(self, n))
    model = load_model(folder)
    tower = sorted(n for n in read if n.startswith("model.visual."))              # every one of them, once
    assert tower and tower == sorted("model.visual." + k for k in model.visual.state_dict())
    assert not [n for n in read if n.startswith("mtp.")] and model.mtp is None       # chapter 12's: load_head
    assert len(read) == len(set(read)) == sum(1 for _ in model.state_dict() if not _.startswith("rotary"))
    from qwen.mtp import load_head
    assert load_head(model) is model.mtp and sorted("mtp." + k for k in model.mtp.state_dict()) == sorted(head)
    assert load_head(load_model(plain)) is None
    monkeypatch.undo()
    extra = write_transformers_checkpoint(tmp_path / "extra", layout="text",
                                          extra={"model.layers.9.mlp.up_proj.weight": torch.zeros(32, 16)})
    assert load_model(extra).unused == ["layers.9.mlp.up_proj.weight"]         # listed, never read
    missing = _redraw(write_transformers_checkpoint(tmp_path / "missing", layout="text"),
                      drop=["model.layers.1.mlp.down_proj.weight"])
    with pytest.raises(QwenError, match="layers.1.mlp.down_proj.weight"):
        load_model(missing)


def test_meta_build_allocates_nothing_until_loaded():
    from qwen.config import Config
    from engine.tiny import tiny_config
    with torch.device("meta"):
        model = Qwen35(Config.from_dict(tiny_config(), source="tiny"))
    real = [p for p in model.parameters() if not p.is_meta]              # only the 16-number A_log inits
    assert sum(p.nbytes for p in real) < 1024
