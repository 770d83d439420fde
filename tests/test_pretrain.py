"""Chapter 15's lesson (qwen/pretrain.py) and its run (engine/training.py): training from a random start.

The same start, the same batches and the same AdamW give transformers' Qwen3_5ForCausalLM the same
loss curve for 50 steps (fp32, within 1e-3 relative; another order of batches is told apart); a run
stopped and resumed follows the uninterrupted curve exactly; a saved run that is truncated or of another
model is refused in one line and kept; the exported folder loads in our loader and in transformers with
equal logits."""
import math

import pytest
import torch

from engine import training
from qwen.config import Config
from qwen.lang import QwenError
from qwen.model import Qwen35, load_model
from qwen.pretrain import TokenStream, held_out_loss, init_weights, small_config, train_step, uniform_loss
from qwen.train import AdamW, decay_groups, lr_at

transformers = pytest.importorskip("transformers")
V = 512
RAW = small_config(V, hidden_size=32, layers=4, heads=4, head_dim=8, intermediate_size=64)


def _tokens(n=6000, seed=1):
    """A corpus a model can learn: a few fixed phrases of ids in a random order (not noise)."""
    g = torch.Generator().manual_seed(seed)
    phrases = [torch.randint(0, V, (int(k),), generator=g) for k in torch.randint(5, 12, (40,), generator=g)]
    out = []
    while sum(map(len, out)) < n:
        out.append(phrases[int(torch.randint(0, 40, (1,), generator=g))])
    return torch.cat(out)[:n]


def _ours(seed=0):
    model = init_weights(Qwen35(Config.from_dict(RAW)), seed=seed)
    return model, AdamW(decay_groups(model, 0.1), lr=1e-3)


def _lr(step):
    return lr_at(step, 3e-3, 5, 50, 3e-4)


def _theirs(state):
    cfg = transformers.Qwen3_5TextConfig(**{k: v for k, v in RAW.items() if k != "architectures"})
    ref = transformers.Qwen3_5ForCausalLM(cfg)
    ref.config._attn_implementation = "eager"
    ref.model.load_state_dict(state)                                     # strict: every name matches
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    plain = [p for p in ref.parameters() if p.dim() < 2]
    return ref, torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}])


def _their_curve(ref, opt, stream, steps):
    losses = []
    for step in range(steps):
        ids = stream.next()
        for group in opt.param_groups:
            group["lr"] = _lr(step)
        opt.zero_grad(set_to_none=True)
        loss = ref(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def test_the_start_predicts_every_token_alike():
    model, _ = _ours()
    loss = held_out_loss(model, _tokens(), 32)
    assert abs(loss - uniform_loss(V)) < 0.05, (loss, math.log(V))
    norms = [m.weight for n, m in model.named_modules() if n.endswith("input_layernorm")]
    assert norms and all(torch.equal(w, torch.zeros_like(w)) for w in norms)      # scale 1 + w = 1


def test_fifty_steps_give_transformers_loss_curve():
    tokens = _tokens()
    model, opt = _ours()
    ref, ref_opt = _theirs({k: v.clone() for k, v in model.state_dict().items()})
    stream = TokenStream(tokens, 4, 32, seed=0)
    mine = [train_step(model, opt, stream.next(), _lr(step))[0] for step in range(50)]
    theirs = _their_curve(ref, ref_opt, TokenStream(tokens, 4, 32, seed=0), 50)
    worst = max(abs(a - b) / b for a, b in zip(mine, theirs))
    assert worst <= 1e-3, worst
    assert mine[-1] < mine[0] - 0.5                                      # it learned: the curve falls
    ref2, ref_opt2 = _theirs({k: v.clone() for k, v in _ours()[0].state_dict().items()})
    other = _their_curve(ref2, ref_opt2, TokenStream(tokens, 4, 32, seed=1), 50)   # other batches
    assert max(abs(a - b) / b for a, b in zip(mine, other)) > 1e-3


def test_the_stream_is_repeatable_and_covers_each_epoch():
    tokens = torch.arange(64 * 10)
    a, b = TokenStream(tokens, 3, 64, seed=5), TokenStream(tokens, 3, 64, seed=5)
    rows = torch.cat([a.next() for _ in range(10)])                      # 30 rows: 3 epochs of 10 windows
    assert torch.equal(rows, torch.cat([b.next() for _ in range(10)]))
    for epoch in range(3):
        starts = sorted(int(r[0]) for r in rows[epoch * 10:(epoch + 1) * 10])
        assert starts == list(range(0, 640, 64))                        # every window once an epoch
    assert not torch.equal(rows[:10], rows[10:20])                       # a new order each epoch
    with pytest.raises(QwenError, match="fewer than one batch"):
        TokenStream(torch.arange(100), 4, 32)


def test_a_resumed_run_follows_the_uninterrupted_curve(tmp_path):
    tokens = _tokens()
    torch.manual_seed(3)
    model, opt = _ours()
    straight, stopped = training.run(model, opt, TokenStream(tokens, 4, 32), 20, _lr, quiet=True)
    assert stopped is None and len(straight) == 20

    torch.manual_seed(3)
    model, opt = _ours()
    stream = TokenStream(tokens, 4, 32)
    first, _ = training.run(model, opt, stream, 20, _lr, folder=tmp_path, config=RAW, every=5, quiet=True,
                            step_fn=_stop_after(11))
    assert len(first) == 11                                              # Ctrl-C during step 11
    model, opt = _ours(seed=9)                                           # a fresh process: other values
    stream = TokenStream(tokens, 4, 32)
    start, losses = training.resume(training.load_run(tmp_path, RAW), model, opt, stream)
    assert start == 11
    rest, stopped = training.run(model, opt, stream, 20, _lr, start=start, losses=losses, quiet=True)
    assert stopped is None and rest == straight                         # the same curve, exactly


def _stop_after(n):
    """train_step, with a Ctrl-C arriving while step n is computed."""
    import os
    import signal
    count = []

    def step(*args):
        count.append(1)
        if len(count) == n:
            os.kill(os.getpid(), signal.SIGINT)
        return train_step(*args)
    return step


@pytest.mark.parametrize("every, kept", [(5, 5), (3, 3)])
def test_a_nan_loss_stops_and_keeps_the_last_good_run(tmp_path, every, kept):
    """The loss of step 6 (the weights after 6 updates) is not a number: a save at step 6 holds those very
    weights, so it is rolled back to the one before (kept as run.bad.pt); a save at 5 held weights whose
    loss was finite, and stays."""
    tokens = _tokens()
    model, opt = _ours()
    losses, stopped = training.run(model, opt, TokenStream(tokens, 4, 32), 12, lambda s: 1e-3 if s < 6 else 1e9,
                                   folder=tmp_path, config=RAW, every=every, quiet=True,
                                   step_fn=lambda m, o, ids, lr: (float("nan"), 0.0) if lr > 1 else train_step(m, o, ids, lr))
    assert stopped == 6 and len(losses) == 6
    assert training.load_run(tmp_path, RAW)["step"] == kept
    assert (tmp_path / "run.bad.pt").is_file() == (kept != 5)


def test_a_run_with_missing_or_misfit_parts_is_refused_in_one_line(tmp_path):
    model, opt = _ours()
    stream = TokenStream(_tokens(), 4, 32)
    file = training.save_run(tmp_path, model, opt, stream, 3, [6.0], RAW)
    state = torch.load(file, weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "opt"}, file)
    with pytest.raises(QwenError) as e:
        training.load_run(tmp_path, RAW)
    assert "opt" in str(e.value) and "\n" not in str(e.value)
    state["model"] = {k: v[:1] for k, v in state["model"].items()}        # every tensor cut to another shape
    torch.save(state, file)
    with pytest.raises(QwenError):
        training.resume(training.load_run(tmp_path, RAW), *_ours(), stream)
    with pytest.raises(QwenError) as e:
        training.check_folder(file)                                    # a file is not a run's folder
    assert str(file) in str(e.value)


def test_a_broken_or_foreign_run_is_refused_and_kept(tmp_path):
    model, opt = _ours()
    file = training.save_run(tmp_path, model, opt, TokenStream(_tokens(), 4, 32), 3, [6.0], RAW)
    whole = file.read_bytes()
    with pytest.raises(QwenError, match="another model"):
        training.load_run(tmp_path, {**RAW, "hidden_size": 64})
    file.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(QwenError, match="not a complete training run"):
        training.load_run(tmp_path, RAW)
    assert file.read_bytes() == whole[: len(whole) // 2]                 # nothing overwritten
    torch.save({"step": 1}, file)
    with pytest.raises(QwenError, match="not a training run"):
        training.load_run(tmp_path, RAW)


def test_the_export_loads_here_and_in_transformers_with_equal_logits(tmp_path):
    model, opt = _ours()
    stream = TokenStream(_tokens(), 4, 32)
    for step in range(5):
        train_step(model, opt, stream.next(), 3e-3)
    (tmp_path / "trained").mkdir()
    (tmp_path / "trained" / "notes.txt").write_text("mine", encoding="utf-8")    # a learner's file there
    folder = training.export(model, RAW, tmp_path / "trained", dtype=torch.float32)
    assert (folder / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trained"]             # no temporary left beside it
    ids = _tokens(40, seed=7)[None]
    ours = load_model(folder)
    ref = transformers.Qwen3_5ForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ref.config._attn_implementation = "eager"
    with torch.no_grad():
        mine, theirs, trained = ours(ids), ref(input_ids=ids).logits, model(ids)
    assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-5)
    assert torch.equal(mine, trained)                                    # the very weights it trained


def test_two_processes_under_torchrun_give_the_one_process_curve(tmp_path):
    """DDP over gloo, 2 processes, the same global batch of 8: the curve of one process with 8 rows
    (to float rounding), and not the curve of one process with 4 (each process's own rows alone)."""
    import json
    import subprocess
    import sys

    from conftest import ROOT
    from engine.ddp import curve
    out = tmp_path / "ddp.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "engine.ddp", "--steps", "12", "--losses", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[:3000] + r.stderr[-2000:]     # a rank's own error comes first
    run = json.loads(out.read_text(encoding="utf-8"))
    alone, half = curve(12), curve(12, batch=4)
    assert run["world"] == 2 and len(run["losses"]) == 12
    assert max(abs(a - b) / b for a, b in zip(run["losses"], alone)) <= 1e-5
    assert max(abs(a - b) / b for a, b in zip(run["losses"], half)) > 1e-3


def test_a_new_run_never_rolls_back_into_an_older_runs_save(tmp_path):
    """run.pt moved away to start afresh, an older run.previous.pt left: a NaN at the new run's first save
    must not put the older run back in run.pt (the older save is kept under another name)."""
    model, opt = _ours()
    (tmp_path / training.PREVIOUS).write_bytes(b"an older run")
    training.save_run(tmp_path, model, opt, TokenStream(_tokens(), 4, 32), 3, [6.0], RAW)
    assert training.rollback(tmp_path, 3) is None and not (tmp_path / training.RUN_FILE).exists()
    assert (tmp_path / "run.previous-of-an-older-run.pt").read_bytes() == b"an older run"
