"""Chapter 16: LoRA by hand against PEFT on transformers' Qwen3_5ForCausalLM.

Step 0 is the base model exactly; only the adapters learn; an adapter saved here loads in PEFT and one
PEFT saved loads here, with the same logits; merging changes no logit and gives back a checkpoint in the
real format; a wrong adapter is refused in one line that names the file or key, and the model is kept.
"""
import pytest
import torch

from qwen.config import Config
from qwen.lang import QwenError
from qwen.lora import DEFAULT_TARGETS, LoRALinear, adapters, add_lora, load_adapter, merge, save_adapter, trainable
from qwen.model import Qwen35, load_model
from qwen.pretrain import init_weights, small_config
from qwen.train import next_token_loss

pytestmark = pytest.mark.timeout(120)
V = 512
RAW = small_config(V, hidden_size=32, layers=4, heads=4, head_dim=8, intermediate_size=64)
IDS = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(3))


def _ours(raw=RAW, seed=0):
    return init_weights(Qwen35(Config.from_dict(raw)), seed=seed).eval()


def _theirs(model):
    """transformers' Qwen3_5ForCausalLM holding our model's very weights."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3_5TextConfig(**{k: v for k, v in RAW.items() if k != "architectures"})
    ref = transformers.Qwen3_5ForCausalLM(cfg).eval()
    ref.config._attn_implementation = "eager"
    ref.model.load_state_dict(model.state_dict())                      # strict: every name matches
    return ref


@torch.no_grad()
def _randomize(named, seed=1):
    """Every lora_B (and lora_A, new values) random: the adapter then changes every logit."""
    g = torch.Generator().manual_seed(seed)
    for name, p in named:
        if "lora_" in name:
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(model, snapshot):
    state = model.state_dict()
    return state.keys() == snapshot.keys() and all(torch.equal(state[k], v) for k, v in snapshot.items())


def test_step_zero_is_the_base_model_and_only_the_adapters_train():
    model = _ours()
    with torch.no_grad():
        base = model(IDS)
    add_lora(model, r=8, alpha=16)
    with torch.no_grad():
        assert torch.equal(model(IDS), base)                            # B = 0: exactly the base
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    wrapped = adapters(model)
    assert {n.rsplit(".", 1)[-1] for n in wrapped} == set(DEFAULT_TARGETS)
    assert len(wrapped) == 3 * 6 + 1 * 7               # 3 DeltaNet layers (3 + the MLP's 3), 1 attention (4 + 3)
    want = sum(8 * (m.in_features + m.out_features) for m in wrapped.values())
    assert trainable(model) == (want, sum(p.numel() for p in model.parameters()))
    for m in wrapped.values():
        assert m.lora_A.weight.abs().sum() > 0 and m.lora_A.weight.abs().max() <= (1 / m.in_features) ** 0.5
        assert not m.lora_B.weight.any() and m.scaling == 2.0


def test_a_bf16_base_stays_bf16_with_fp32_adapters():
    model = _ours().to(torch.bfloat16)
    with torch.no_grad():
        base = model(IDS)
    add_lora(model, r=4, alpha=4, targets=("q_proj", "in_proj_qkv", "down_proj"))
    for m in adapters(model).values():
        assert m.weight.dtype == torch.bfloat16 and not m.weight.requires_grad
        assert m.lora_A.weight.dtype == m.lora_B.weight.dtype == torch.float32
    with torch.no_grad():
        assert torch.equal(model(IDS), base)


def test_one_backward_fills_only_the_adapters_gradients():
    model = add_lora(_ours(), r=4, alpha=8)
    _randomize(model.named_parameters())
    next_token_loss(model(IDS), IDS).backward()
    for name, p in model.named_parameters():
        if ".lora_" in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None and not p.requires_grad, name


def test_our_adapter_loads_in_peft_with_our_logits(tmp_path):
    peft = pytest.importorskip("peft")
    model = add_lora(_ours(), r=4, alpha=8)
    _randomize(model.named_parameters())
    ref = _theirs(_ours())
    with torch.no_grad():
        mine, base = model(IDS), ref(input_ids=IDS).logits
    assert (mine - base).abs().max() > 1e-2                               # the adapter matters
    save_adapter(model, tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    theirs = peft.PeftModel.from_pretrained(ref, str(tmp_path / "ours")).eval()
    with torch.no_grad():
        assert (theirs(input_ids=IDS).logits - mine).abs().max() <= 1e-5
    # the same key names PEFT itself writes for these targets
    peft.get_peft_model(_theirs(_ours()), peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(DEFAULT_TARGETS),
                                                         task_type="CAUSAL_LM")).save_pretrained(str(tmp_path / "peft"))
    from safetensors import safe_open
    keys = [safe_open(str(tmp_path / f / "adapter_model.safetensors"), "pt").keys() for f in ("ours", "peft")]
    assert sorted(keys[0]) == sorted(keys[1])


def test_a_peft_adapter_loads_here_with_its_logits(tmp_path):
    peft = pytest.importorskip("peft")
    model = _ours()
    targets = ["q_proj", "v_proj", "in_proj_qkv", "out_proj", "up_proj"]
    theirs = peft.get_peft_model(_theirs(model), peft.LoraConfig(r=6, lora_alpha=12, target_modules=targets,
                                                                 lora_dropout=0.0, task_type="CAUSAL_LM"))
    _randomize(theirs.named_parameters(), seed=2)
    theirs.save_pretrained(str(tmp_path / "peft"))
    load_adapter(model, tmp_path / "peft")
    assert {n.rsplit(".", 1)[-1] for n in adapters(model)} == set(targets)
    assert all(m.r == 6 and m.scaling == 2.0 for m in adapters(model).values())
    with torch.no_grad():
        assert (model(IDS) - theirs.eval()(input_ids=IDS).logits).abs().max() <= 1e-5


def test_our_adapter_round_trips_into_a_fresh_model(tmp_path):
    model = add_lora(_ours(), r=3, alpha=5, targets=("k_proj", "in_proj_z", "gate_proj"))
    _randomize(model.named_parameters())
    save_adapter(model, tmp_path)
    fresh = load_adapter(_ours(), tmp_path)
    with torch.no_grad():
        assert torch.equal(fresh(IDS), model(IDS))
    again = add_lora(_ours(), r=3, alpha=5, targets=("k_proj", "in_proj_z", "gate_proj"))
    load_adapter(again, tmp_path)                                         # into adapters already there
    with torch.no_grad():
        assert torch.equal(again(IDS), model(IDS))


def test_merge_keeps_the_logits_and_gives_back_a_real_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    from engine import training
    names = list(_ours().state_dict())
    model = add_lora(_ours(), r=4, alpha=8)
    _randomize(model.named_parameters())
    with torch.no_grad():
        unmerged = model(IDS)
        merged = merge(model)(IDS)
    assert (merged - unmerged).abs().max() <= 1e-5
    assert list(model.state_dict()) == names and not adapters(model)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    folder = training.export(model, RAW, tmp_path / "merged", dtype=torch.float32)
    ref = transformers.Qwen3_5ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ref.config._attn_implementation = "eager"
    with torch.no_grad():
        assert (ref(input_ids=IDS).logits - merged).abs().max() <= 1e-5
        assert torch.equal(load_model(folder)(IDS), merged)


def test_merge_adds_in_fp32_and_rounds_once_to_the_base_dtype():
    model = add_lora(_ours().to(torch.bfloat16), r=4, alpha=8, targets=("o_proj",))
    _randomize(model.named_parameters())
    (name, m), = adapters(model).items()
    want = (m.weight.float() + 2.0 * m.lora_B.weight @ m.lora_A.weight).to(torch.bfloat16)
    merge(model)
    assert torch.equal(model.get_submodule(name).weight, want)


def _refused(model, folder, *words):
    before = _snapshot(model)
    with pytest.raises(QwenError) as e:
        load_adapter(model, folder)
    text = str(e.value)
    assert "\n" not in text and "\n" not in e.value.zh and e.value.zh != e.value.en
    assert all(w in text for w in words), text
    assert _same(model, before)                                           # nothing of the model changed
    return text


def test_a_wrong_adapter_is_refused_in_one_line_and_the_model_kept(tmp_path):
    from safetensors.torch import load_file, save_file
    model = add_lora(_ours(), r=4, alpha=8)
    _randomize(model.named_parameters())
    save_adapter(model, tmp_path / "good")
    file = tmp_path / "good" / "adapter_model.safetensors"
    tensors = load_file(file)
    key = "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"

    _refused(add_lora(_ours(), r=8, alpha=16), tmp_path / "good", "rank", "layers.")     # another rank
    _refused(_ours(), tmp_path / "nowhere", "adapter_config.json")                        # missing file
    other = add_lora(_ours(small_config(V, hidden_size=48, layers=4, heads=4, head_dim=8, intermediate_size=64)))
    save_adapter(other, tmp_path / "other")
    _refused(_ours(), tmp_path / "other", "shape", "adapter_model.safetensors", "layers.0.")   # another model

    for name, change in [("missing", lambda t: t.pop(key)),
                         ("extra", lambda t: t.update({key.replace("layers.3", "layers.7"): t[key].clone()}))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_bytes((tmp_path / "good" / "adapter_config.json").read_bytes())
        changed = dict(tensors)
        change(changed)
        save_file(changed, tmp_path / name / "adapter_model.safetensors", metadata={"format": "pt"})
        text = _refused(_ours(), tmp_path / name, "layers.")
        assert ("layers.3.self_attn.q_proj" if name == "missing" else "layers.7.") in text

    raw = file.read_bytes()
    file.write_bytes(raw[:len(raw) - 100])                                # truncated
    _refused(_ours(), tmp_path / "good", "adapter_model.safetensors", "truncated")
    file.unlink()                                                         # missing weights
    _refused(_ours(), tmp_path / "good", "adapter_model.safetensors")
    save_file(tensors, file, metadata={"format": "pt"})
    config = tmp_path / "good" / "adapter_config.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"use_dora": false', '"use_dora": true'),
                      encoding="utf-8")
    _refused(_ours(), tmp_path / "good", "use_dora")                      # a variant not computed here
    config.write_text("{not json", encoding="utf-8")
    _refused(_ours(), tmp_path / "good", "adapter_config.json")


def test_bad_arguments_are_refused_in_one_line():
    model = _ours()
    for kwargs, word in [({"r": 0}, "r must"), ({"alpha": -1}, "alpha"), ({"targets": ("q_prj",)}, "q_prj"),
                         ({"targets": "q_proj"}, "list")]:
        with pytest.raises(QwenError, match=word):
            add_lora(model, **kwargs)
    assert not adapters(model) and all(p.requires_grad for p in model.parameters())
    add_lora(model, r=2, alpha=2, targets=("up_proj",))
    with pytest.raises(QwenError, match="already has"):
        add_lora(model, targets=("up_proj",))
    with pytest.raises(QwenError, match="no LoRA adapter"):
        save_adapter(_ours(), "unused")


def _add_refused(model, *words, **kwargs):
    before = _snapshot(model)
    with pytest.raises(QwenError) as e:
        add_lora(model, **kwargs)
    assert "\n" not in e.value.en and "\n" not in e.value.zh and e.value.zh != e.value.en
    assert all(w in e.value.en for w in words), e.value.en
    assert _same(model, before) and not adapters(model) and all(p.requires_grad for p in model.parameters())


def test_a_non_finite_alpha_a_rank_too_high_and_bad_targets_are_refused_in_one_line():
    model = _ours()
    for alpha in (float("nan"), float("inf"), float("-inf")):
        _add_refused(model, "finite", repr(alpha), alpha=alpha)
    _add_refused(model, "r=32", "not a low rank", r=32)                   # hidden size 32: full rank at most
    _add_refused(model, "r=4", "in_proj_a (4 x 32)", "below 4", r=4, targets=("in_proj_a",))   # 4 outputs
    for targets in ([None], [], (), ["q_proj", "q_proj"], ["q_proj", ""], {"q_proj"}):
        _add_refused(model, "targets", "non-empty list of different", targets=targets)
    add_lora(model, r=3, alpha=2, targets=["in_proj_a", "o_proj"])            # a list works as well as a tuple
    assert {n.rsplit(".", 1)[-1] for n in adapters(model)} == {"in_proj_a", "o_proj"}


def test_an_adapter_config_with_a_bad_alpha_or_rank_is_refused_and_the_model_kept(tmp_path):
    import json
    model = add_lora(_ours(), r=4, alpha=8)
    save_adapter(model, tmp_path)
    config = tmp_path / "adapter_config.json"
    good = json.loads(config.read_text(encoding="utf-8"))
    for key, value, words in [("lora_alpha", float("nan"), ("finite", "nan")),
                              ("lora_alpha", float("inf"), ("finite", "inf")),
                              ("lora_alpha", float("-inf"), ("finite",)), ("r", 4096, ("r=4096", "low rank"))]:
        config.write_text(json.dumps({**good, key: value}), encoding="utf-8")    # NaN, Infinity: json writes them
        _refused(_ours(), tmp_path, *words)
        _refused(add_lora(_ours(), r=4, alpha=8), tmp_path, *words[:1])


def _save_refused(model, folder, *words):
    with pytest.raises(QwenError) as e:
        save_adapter(model, folder)
    assert "\n" not in e.value.en and "\n" not in e.value.zh and e.value.zh != e.value.en
    assert all(w in e.value.en for w in words), e.value.en


def test_save_adapter_refuses_a_file_where_its_folder_is_and_keeps_the_old_pair(tmp_path, monkeypatch):
    model = add_lora(_ours(), r=4, alpha=8)
    _randomize(model.named_parameters())
    file = tmp_path / "a-file"
    file.write_text("mine", encoding="utf-8")
    _save_refused(model, file, str(file), "is a file")                    # the folder is a file
    _save_refused(model, file / "adapter", str(file), "is a file")        # a parent is a file
    assert file.read_text(encoding="utf-8") == "mine"
    (tmp_path / "odd" / "adapter_config.json").mkdir(parents=True)      # a folder where a file is written
    _save_refused(model, tmp_path / "odd", "adapter_config.json", "is a folder")
    assert sorted(p.name for p in (tmp_path / "odd").iterdir()) == ["adapter_config.json"]

    save_adapter(model, tmp_path / "good")
    old = {p.name: p.read_bytes() for p in (tmp_path / "good").iterdir()}

    def fails(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr("qwen.lora.json.dump", fails)                     # the weights written, the config not
    with torch.no_grad():
        for m in adapters(model).values():
            m.lora_B.weight.add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_adapter(model, tmp_path / "good")
    assert {p.name: p.read_bytes() for p in (tmp_path / "good").iterdir()} == old   # the old pair, no temporaries
