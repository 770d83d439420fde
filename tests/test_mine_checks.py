"""--mine's checks at every call (practice/mine.py: Mine, _Guard), and what its lines name.

Hostile learner files, written to a temp practice folder and graded by the judge as --mine grades
them: each passes the judge, then misbehaves only inside the model (changes the model's weights
through its inputs, differs on the model's shapes, turns bad after some calls or only when
decoding one token). Each must be refused with one line naming its exercise, and the course's
part must run from then on: the course's tokens and logits, the model's weights untouched.
"""
import pytest
import torch

from practice._judge.exercises import BY_ID
from practice import mine
from qwen.generate import generate_ids

PROMPT = [9419, 11, 1879, 0, 3838, 374, 279, 6722, 315, 9625, 30] * 3    # 33 tokens

S204 = BY_ID["204"].solution.read_text(encoding="utf-8")
S208 = BY_ID["208"].solution.read_text(encoding="utf-8")

# 230 allows changing its inputs: this one returns the right layer, then adds 1 to every input
# (the model's own norm and MLP weights, when it is handed them)
HOSTILE_230 = BY_ID["230"].solution.read_text(encoding="utf-8") + '''

_right = decoder_layer


def decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
    out = _right(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight)
    for t in (norm1_weight, norm2_weight, mixer_weight, gate_weight, up_weight, down_weight):
        t += 1
    return out
'''


def _208(condition, header=""):
    """The reference 208, its result times 1.5 when `condition` (an expression of x) holds."""
    return S208 + header + f'''

_right = swiglu_mlp


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    out = _right(x, gate_weight, up_weight, down_weight)
    return out * 1.5 if {condition} else out
'''


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """The judge pointed at a temp practice folder and progress file; yields a function that points
    it at another folder."""
    import practice.judge as judge
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QWEN_PROGRESS", str(tmp_path_factory.mktemp("progress") / "progress.json"))
        mp.setenv("QWEN_JUDGE_TIMEOUT", "20")

        def use(folder):
            mp.setattr(judge, "WORK", folder)
        yield use


@pytest.fixture(scope="module")
def model(tiny_path):
    from qwen.model import load_model
    return load_model(tiny_path, vision=False)


def _folder(path, files):
    """{exercise id: source text} written as the learner's files."""
    path.mkdir(parents=True, exist_ok=True)
    for ex_id, source in files.items():
        (path / BY_ID[ex_id].filename).write_text(source, encoding="utf-8")
    return path


def _refusals(out, ex_id):
    return [line for line in out.splitlines() if f"--mine: {ex_id} " in line and "refused" in line]


def _course(model, tokens):
    """The course's greedy tokens and its logits at the prompt and each cached decode step."""
    tokens = list(generate_ids(model, PROMPT, max_new_tokens=tokens))
    cache = model.new_cache()
    logits = [model(torch.tensor([PROMPT]), cache=cache)]
    for t in tokens[:-1]:
        logits.append(model(torch.tensor([[t]]), cache=cache))
    return tokens, logits


def _yours(model, tokens):
    """Greedy tokens with whatever is in the model, and its logits along the course's tokens."""
    return _course(model, len(tokens))


def _close(a, b, tol=1e-4):
    return all((x - y).abs().max().item() < tol for x, y in zip(a, b))


def test_a_part_that_changes_its_inputs_leaves_the_models_weights_alone(setting, tiny_path, model, tmp_path, capsys):
    """A 230 that adds 1 to its inputs after computing: the model's weights must not move, and
    remove() must give the course's logits back bit for bit."""
    setting(_folder(tmp_path / "work", {"230": HOSTILE_230}))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 6)
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert yours is not None and yours.used == ["230"]
            tokens, logits = _yours(model, course_tokens)
            tokens, logits = _yours(model, course_tokens)                      # again: nothing drifts
        finally:
            yours.remove()
        back = _course(model, 6)[1]
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, weights[k])]
    assert changed == []
    assert tokens == course_tokens and _close(logits, course_logits)
    assert all(torch.equal(a, b) for a, b in zip(back, course_logits))
    assert yours.difference < 1e-4
    assert _refusals(capsys.readouterr().out, "230") == []                  # its results were right: yours ran


def test_a_part_that_differs_in_the_model_is_refused_in_one_line(setting, tiny_path, model, tmp_path, capsys):
    """A 208 right on every judge case (at most 5 rows) but wrong on more rows, as the prompt has:
    refused with one line naming 208, the course's MLP runs, and 204 stays yours."""
    setting(_folder(tmp_path / "work", {"204": S204, "208": _208("x.shape[-2] > 8")}))
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 6)
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert yours.used == ["204"] and "208" in yours.refused
            tokens, logits = _yours(model, course_tokens)
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert len(_refusals(out, "208")) == 1
    assert tokens == course_tokens and _close(logits, course_logits)
    assert yours.difference < 1e-4


def test_a_part_that_turns_bad_after_some_calls_is_refused_from_then_on(setting, tiny_path, model, tmp_path, capsys):
    """A 208 right for its first calls (the judge's 4 and the probe's), wrong from a later decode step on."""
    probe_calls = 3 * model.cfg.num_hidden_layers                          # put_in's probe: 3 passes
    bad_after = probe_calls + 4 * model.cfg.num_hidden_layers              # the 4th decode step after it
    counter = f"\n_calls = [0]\nBAD_AFTER = {bad_after}\n"
    source = _208("_count() > BAD_AFTER", counter + "\n\ndef _count():\n    _calls[0] += 1\n    return _calls[0]\n")
    setting(_folder(tmp_path / "work", {"204": S204, "208": source}))
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 8)
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert sorted(yours.used) == ["204", "208"]                     # right in the probe: yours
            tokens, logits = _yours(model, course_tokens)
            assert yours.used == ["204"] and "208" in yours.refused
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert len(_refusals(out, "208")) == 1
    assert tokens == course_tokens and _close(logits, course_logits)


def test_a_part_wrong_only_when_decoding_one_token_is_refused(setting, tiny_path, model, tmp_path, capsys):
    """A 208 wrong only on (1, 1, hidden), the shape of a decode step, which no judge case has."""
    setting(_folder(tmp_path / "work", {"204": S204, "208": _208("tuple(x.shape[:2]) == (1, 1)")}))
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 6)
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert yours.used == ["204"] and "208" in yours.refused
            tokens, logits = _yours(model, course_tokens)
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert len(_refusals(out, "208")) == 1
    assert tokens == course_tokens and _close(logits, course_logits)


def test_refused_while_decoding_with_no_probe(model):
    """The guard itself, without put_in's probe: Mine on a 208 that is wrong on one token; the
    prompt pass uses yours, the first decode step refuses it."""
    from practice._judge import runner
    right = mine._load(runner, BY_ID["208"].solution, BY_ID["208"].functions)["swiglu_mlp"]

    def one_token_wrong(x, gate_weight, up_weight, down_weight):
        out = right(x, gate_weight, up_weight, down_weight)
        return out * 1.5 if x.shape[-2] == 1 else out
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 4)
        yours = mine.Mine(model, mine.Solutions({"208": {"swiglu_mlp": one_token_wrong}}, [], ""))
        try:
            cache = model.new_cache()
            model(torch.tensor([PROMPT]), cache=cache)
            assert yours.used == ["208"] and yours.refused == {}
            model(torch.tensor([[course_tokens[0]]]), cache=cache)
            assert yours.used == [] and "208" in yours.refused
            tokens, logits = _yours(model, course_tokens)
        finally:
            yours.remove()
    assert tokens == course_tokens and _close(logits, course_logits)


def test_exercises_that_pass_but_are_not_model_parts_are_named(setting, tiny_path, model, tmp_path, capsys):
    """240 and 250 passed (recorded by the judge), no model part: those two are named, and the line
    does not say that none of the exercises passes."""
    import practice.judge as judge
    from practice._judge import progress
    folder = _folder(tmp_path / "work", {i: BY_ID[i].solution.read_text(encoding="utf-8") for i in ("240", "250")})
    setting(folder)
    for i in ("240", "250"):
        ex = BY_ID[i]
        result = judge.grade(ex, folder / ex.filename, tiny_path)
        assert result["status"] == "pass"
        progress.update(judge.record(ex, result, folder / ex.filename))
    with torch.no_grad():
        assert mine.put_in(model, PROMPT, tiny_path) is None
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "--mine: " in line)
    assert "240" in line and "250" in line
    assert "none of your exercises" not in line


def test_a_failing_part_shows_the_judges_named_mistake(setting, tiny_path, model, tmp_path, capsys):
    """A 204 whose RMSNorm scales by w instead of (1 + w): the judge names that mistake; --mine's
    line for 204 says what the judge says."""
    import practice.judge as judge
    wrong = S204.replace("(1.0 + weight.float())", "weight.float()")
    assert wrong != S204
    folder = _folder(tmp_path / "work", {"204": wrong, "208": S208})
    setting(folder)
    result = judge.grade(BY_ID["204"], folder / BY_ID["204"].filename, tiny_path)
    named = [c["diagnosis"]["says"] for c in result["cases"] if not c["ok"] and c.get("diagnosis")]
    assert result["status"] == "fail" and named
    with torch.no_grad():
        yours = mine.put_in(model, PROMPT, tiny_path)
        yours.remove()
    line = next(line for line in capsys.readouterr().out.splitlines() if "--mine: 204 " in line)
    assert named[0] in line


def test_the_refusal_line_in_chinese(model, capsys):
    from helpers import chinese_text_problems
    from qwen.lang import set_lang

    def raises(x, gate_weight, up_weight, down_weight):
        raise ValueError("not yet")
    set_lang("zh")
    try:
        with torch.no_grad():
            yours = mine.Mine(model, mine.Solutions({"208": {"swiglu_mlp": raises}}, [], ""))
            try:
                model(torch.tensor([PROMPT]))
            finally:
                yours.remove()
    finally:
        set_lang("en")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1 and "208" in lines[0] and "swiglu_mlp" in lines[0]
    assert chinese_text_problems(lines[0]) == [], lines[0]


EQUIVALENTS = [(i, f) for i in mine.PARTS for f in BY_ID[i].equivalents()]


@pytest.mark.parametrize("ex_id, file", EQUIVALENTS, ids=[f.stem for _, f in EQUIVALENTS])
def test_other_right_solutions_are_never_refused(tiny_path, ex_id, file):
    """The judge's other correct forms (practice/_judge/equivalent) pass its cases; in the model, at
    every call of a prompt and decode steps, in fp32 and in bf16 (ch09 --dtype), they stay yours."""
    from practice._judge import runner
    from qwen.model import load_model
    functions = mine._load(runner, file, BY_ID[ex_id].functions)
    for dtype in (torch.float32, torch.bfloat16):
        model = load_model(tiny_path, dtype=dtype, vision=False)
        with torch.no_grad():
            yours = mine.Mine(model, mine.Solutions({ex_id: functions}, [], ""))
            try:
                list(generate_ids(model, PROMPT, max_new_tokens=4))
            finally:
                yours.remove()
        assert yours.refused == {} and yours.used == [ex_id], (dtype, yours.refused)


def test_when_every_part_is_refused_the_course_runs_untouched(setting, tiny_path, model, tmp_path, capsys):
    """Only a 208 that is wrong on a decode step: refused in the probe, nothing of yours is left in
    the model (no instance attribute of --mine's), and put_in says so."""
    setting(_folder(tmp_path / "work", {"208": _208("tuple(x.shape[:2]) == (1, 1)")}))
    with torch.no_grad():
        course_tokens, course_logits = _course(model, 4)
        assert mine.put_in(model, PROMPT, tiny_path) is None
        tokens, logits = _yours(model, course_tokens)
    assert tokens == course_tokens and all(torch.equal(a, b) for a, b in zip(logits, course_logits))
    assert not any(k in vars(m) for m in model.modules() for k in ("forward", "rule_inputs", "causal_conv",
                                                                     "beta_and_decay", "logits", "_course_forward"))
    out = capsys.readouterr().out
    assert len(_refusals(out, "208")) == 1 and "yours:" not in out


def test_weights_are_copied_once_not_at_every_decode_step(setting, tiny_path, model, tmp_path):
    """Your parts read copies of the model's weights, made once per weight: a decode step does not copy
    every layer's MLP again. A 208 that keeps every weight it is handed (so no id is reused) and logs it:
    as many distinct weights as the model has MLPs, none of them the model's own."""
    log = tmp_path / "ids.txt"
    setting(_folder(tmp_path / "work", {"208": S208 + f'''

_right, _kept = swiglu_mlp, []


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    _kept.append(gate_weight)
    try:                                          # the judge's sandbox may not write there: only --mine logs
        with open({str(log)!r}, "a", encoding="utf-8") as f:
            f.write(f"{{id(gate_weight)}}\\n")
    except OSError:
        pass
    return _right(x, gate_weight, up_weight, down_weight)
'''}))
    own = {id(p) for p in model.parameters()}
    mlps = sum(1 for name, p in model.named_parameters() if name.endswith("gate_proj.weight") and "mtp" not in name)
    with torch.no_grad():
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert yours.used == ["208"]
            log.write_text("", encoding="utf-8")
            _yours(model, [0] * 5)                    # twice (generating, then the logits) a prompt and 4 steps
        finally:
            yours.remove()
    seen = log.read_text(encoding="utf-8").split()
    assert len(seen) == 2 * 5 * mlps and len(set(seen)) == mlps
    assert not own & {int(i) for i in seen}
