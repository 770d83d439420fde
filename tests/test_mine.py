"""--mine (practice/mine.py): the learner's passing solutions run in the model in place of the course's parts.

The reference solutions, put in as the learner's files, must give the course's logits (prompt and
cached decode steps) and the same greedy tokens; every part must really be in the path (a changed
function changes the logits, remove() gives the course's back bit for bit); a failing solution is
refused and named; none solved says so and runs the course's parts.
"""
import shutil

import pytest
import torch

from practice._judge.exercises import BY_ID
from practice import mine
from qwen.generate import generate_ids

PROMPT = [9419, 11, 1879, 0, 3838, 374, 279, 6722, 315, 9625, 30] * 3    # 33 tokens: more than one conv window


def _practice_dir(folder, files):
    """{exercise id: source file} copied in as the learner's own files (the judge's names)."""
    folder.mkdir(parents=True, exist_ok=True)
    for ex_id, source in files.items():
        shutil.copyfile(source, folder / BY_ID[ex_id].filename)
    return folder


@pytest.fixture(scope="module")
def setting(tiny_path, tmp_path_factory):
    """The judge pointed at a temp practice folder; yields a function that points it at another."""
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


@pytest.fixture(scope="module")
def references():
    """Every mapped exercise's reference solution, loaded as --mine loads a passing file (the grading
    itself, 20 s for all of them, is test_a_failing_solution_is_refused_and_named's: one that passes,
    one that fails)."""
    from practice._judge import runner
    return mine.Solutions({i: mine._load(runner, BY_ID[i].solution, BY_ID[i].functions) for i in mine.PARTS}, [], "")


def _decode_logits(model, prompt, tokens):
    """The prompt's logits, then each cached decode step's (tokens fed back one at a time)."""
    cache = model.new_cache()
    out = [model(torch.tensor([prompt]), cache=cache)]
    for t in tokens:
        out.append(model(torch.tensor([[t]]), cache=cache))
    return out


def test_reference_solutions_as_mine_give_the_course_logits_and_greedy_tokens(model, references):
    assert sorted(references.passed) == sorted(mine.PARTS) and references.failed == []
    with torch.no_grad():
        course_tokens = list(generate_ids(model, PROMPT, max_new_tokens=8))
        course = _decode_logits(model, PROMPT, course_tokens[:-1])
        yours = mine.Mine(model, references)
        try:
            assert sorted(yours.used) == sorted(mine.PARTS)
            mine_tokens = list(generate_ids(model, PROMPT, max_new_tokens=8))
            theirs = _decode_logits(model, PROMPT, course_tokens[:-1])
            assert yours.refused == {} and sorted(yours.used) == sorted(mine.PARTS)    # checked at every call
        finally:
            yours.remove()
    assert mine_tokens == course_tokens
    for a, b in zip(course, theirs):                   # fp32: only the order of sums differs
        assert (a - b).abs().max().item() < 1e-4
    top = [int(x[0, -1].argmax()) for x in theirs]
    assert top == [int(x[0, -1].argmax()) for x in course]


@pytest.mark.parametrize("k", [1, 3])
def test_reference_delta_rule_as_mine_through_speculative_decoding(model, references, k):
    """--mine with --speculative (chapter 9, the chat): the learner's delta rule fills each verify
    pass's trail, token by token (practice/mine.py), so drafts rejected at chosen steps still give the
    plain greedy tokens and a state equal to plain decoding's."""
    from engine.speculative import replaying
    from qwen.mtp import speculative_ids
    with torch.no_grad():
        plain_cache = model.new_cache()
        plain = list(generate_ids(model, PROMPT, max_new_tokens=12, cache=plain_cache))
    wrong = {2, 3, 7}                                                   # drafts rejected there, the rest replayed

    def drafts(out, guesses):
        return [(t + 1) % 1000 if len(out) + j in wrong else t for j, t in enumerate(plain[len(out):len(out) + len(guesses)])]
    yours = mine.Mine(model, mine.Solutions({"220": references.passed["220"]}, [], ""))
    try:
        cache, stats = model.new_cache(), {}
        got = list(speculative_ids(model, PROMPT, k, max_new_tokens=12, cache=cache, guess=replaying(drafts), stats=stats))
    finally:
        yours.remove()
    assert got == plain and 0 < stats["accepted"] < stats["drafted"]
    assert yours.refused == {} and yours.used == ["220"]             # checked at every verify pass too
    for a, b in zip(cache.layers, plain_cache.layers):
        if a.state is not None:
            assert (a.state - b.state).abs().max().item() < 1e-5


def _perturbed(functions):
    """The same functions, their results scaled by 1.01 (a tuple's first item): a part that is
    really in the model's path changes the logits."""
    def wrap(f):
        def g(*args, **kw):
            r = f(*args, **kw)
            return r * 1.01 if torch.is_tensor(r) else (r[0] * 1.01, *r[1:])
        return g
    return {name: wrap(f) for name, f in functions.items()}


@pytest.mark.parametrize("ex_id", list(mine.PARTS))
def test_each_part_is_in_the_models_path_and_remove_gives_the_course_back(model, references, ex_id):
    with torch.no_grad():
        course = _decode_logits(model, PROMPT, [5, 6])
        found = mine.Solutions({ex_id: _perturbed(references.passed[ex_id])}, [], "")
        yours = mine.Mine(model, found, references=found.passed)        # compared with itself: never refused
        try:
            changed = _decode_logits(model, PROMPT, [5, 6])
        finally:
            yours.remove()
        back = _decode_logits(model, PROMPT, [5, 6])
    assert (changed[0] - course[0]).abs().max().item() > 1e-3          # the prompt pass reads yours
    for a, b in zip(course, back):
        assert torch.equal(a, b)
    assert not any(k in vars(m) for m in model.modules() for k in ("forward", "rule_inputs", "causal_conv",
                                                                     "beta_and_decay", "logits", "_course_forward"))


def test_a_failing_solution_is_refused_and_named(setting, tiny_path, model, tmp_path, capsys):
    folder = _practice_dir(tmp_path / "work", {"204": BY_ID["204"].starter.parents[1] / "wrong" / "204_std.py",
                                               "208": BY_ID["208"].solution})
    (folder / BY_ID["220"].filename).write_bytes(BY_ID["220"].starter.read_bytes())    # not started: not graded
    setting(folder)
    with torch.no_grad():
        course = model(torch.tensor([PROMPT]))
        yours = mine.put_in(model, PROMPT, tiny_path)
        try:
            assert yours.used == ["208"]
            assert (model(torch.tensor([PROMPT])) - course).abs().max().item() < 1e-4
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert "--mine: 204 does not pass the judge (" in out and "skipped, the course's part runs" in out
    yours_line = next(line for line in out.splitlines() if "yours: 208 MLP; the course's: " in line)
    assert all(i in yours_line for i in mine.PARTS)                      # the other 9 are named: the course's
    assert "220 does not pass" not in out                                 # the starter: not graded
    assert "largest |logit difference| from the course's parts on the same 33 tokens: " in out


def test_a_file_changed_after_its_grading_is_not_loaded(setting, tiny_path, model, tmp_path, capsys, monkeypatch):
    """Graded, then edited (an editor saving while --mine grades): the edited code is not loaded, since it
    was never checked."""
    import practice.judge as judge
    folder = _practice_dir(tmp_path / "work", {"208": BY_ID["208"].solution})
    setting(folder)
    from helpers import edit_after_grading
    edit_after_grading(monkeypatch, judge, "def swiglu_mlp(x, gate_weight, up_weight, down_weight):\n    return x * 0\n")
    with torch.no_grad():
        assert mine.put_in(model, PROMPT, tiny_path) is None
    out = capsys.readouterr().out
    assert "--mine: 208 does not pass the judge (208_swiglu_mlp.py changed while it was being graded: " in out


def test_the_difference_is_measured_against_the_course_before_your_files_ran(setting, tiny_path, model, tmp_path,
                                                                              capsys):
    """A passing file whose top level changes the course's modules (here: RoPE turned off) would change the
    course's logits too if they were computed after the files are loaded (a difference of ~0): the course's
    logits come first."""
    import qwen.attention
    folder = _practice_dir(tmp_path / "work", {"208": BY_ID["208"].solution})
    file = folder / BY_ID["208"].filename
    file.write_text(file.read_text(encoding="utf-8") + "\nimport qwen.attention\n"
                    "qwen.attention.apply_rope = lambda x, cos, sin: x\n", encoding="utf-8")
    setting(folder)
    course_rope = qwen.attention.apply_rope
    try:
        with torch.no_grad():
            yours = mine.put_in(model, PROMPT, tiny_path)
            yours.remove()
    finally:
        qwen.attention.apply_rope = course_rope
    assert yours.difference > 1e-3, yours.difference


def test_none_solved_says_so_and_runs_the_courses_parts(setting, tiny_path, model, tmp_path, capsys):
    setting(tmp_path / "empty")
    with torch.no_grad():
        before = model(torch.tensor([PROMPT]))
        assert mine.put_in(model, PROMPT, tiny_path) is None
        assert torch.equal(model(torch.tensor([PROMPT])), before)
    out = capsys.readouterr().out
    assert "none of your exercises in" in out and "passes yet (python practice/judge.py): the course's parts run" in out


def test_mine_is_refused_where_no_model_is_built(capsys):
    import main
    with pytest.raises(SystemExit) as stop:
        main.main(["3", "--mine", "--tiny"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]                     # argparse's one line: what takes it
    assert "--mine" in err and all(str(n) in err for n in main.MINE_CHAPTERS)


def test_use_mine_sets_the_notebook_switch(monkeypatch):
    monkeypatch.delenv(mine.ENV, raising=False)
    assert not mine.wanted()
    mine.use_mine()
    assert mine.wanted()
    mine.use_mine(False)
    assert not mine.wanted()


def test_a_passing_part_that_raises_in_the_model_is_named_and_left_out(model, references, capsys, monkeypatch):
    def broken(x, gate_weight, up_weight, down_weight):
        raise ValueError("only 2-D inputs")
    found = mine.Solutions({"204": references.passed["204"], "208": {"swiglu_mlp": broken}}, [], "")
    monkeypatch.setattr(mine, "solutions", lambda path: found)
    with torch.no_grad():
        yours = mine.put_in(model, PROMPT, "unused")
        try:
            assert yours.used == ["204"]
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert "--mine: 208 MLP passes the judge but raised in the model (ValueError: only 2-D inputs)" in out
    assert "yours: 204 RMSNorm; the course's: 203 " in out


def test_a_part_that_raises_only_at_a_cached_decode_step_is_named_and_left_out(model, references, capsys,
                                                                                 monkeypatch):
    """The prompt pass alone never calls the conv with one token and a cache; generation does, so a part
    that raises only there is named and left out instead of stopping generation with a traceback."""
    course_conv = references.passed["221"]["causal_conv1d"]

    def one_token_unwritten(x, weight, past=None):
        if x.shape[1] == 1:
            raise ValueError("one token: not written yet")
        return course_conv(x, weight, past)
    found = mine.Solutions({"204": references.passed["204"], "221": {"causal_conv1d": one_token_unwritten}}, [], "")
    monkeypatch.setattr(mine, "solutions", lambda path: found)
    with torch.no_grad():
        course_tokens = list(generate_ids(model, PROMPT, max_new_tokens=3))
        yours = mine.put_in(model, PROMPT, "unused")
        try:
            assert yours.used == ["204"]
            assert list(generate_ids(model, PROMPT, max_new_tokens=3)) == course_tokens
        finally:
            yours.remove()
    out = capsys.readouterr().out
    assert "--mine: 221 causal conv passes the judge but raised in the model (ValueError: one token: not written yet)" in out


def test_main_hands_mine_to_chapters_8_and_9_only(tiny_path, monkeypatch):
    import main
    seen = []
    monkeypatch.setattr(main, "run_chapter", lambda script: seen.append((script.name, list(main.sys.argv))))
    monkeypatch.setattr(main.sys, "argv", list(main.sys.argv))
    main.main(["9", "--mine", "--tiny"])
    main.main(["8", "--tiny"])
    assert seen[0][0] == "ch09_generate.py" and "--mine" in seen[0][1]
    assert seen[1][0] == "ch08_model.py" and "--mine" not in seen[1][1]


def test_the_mine_lines_in_chinese(setting, tiny_path, model, tmp_path, capsys):
    from helpers import chinese_text_problems
    from qwen.lang import set_lang
    folder = _practice_dir(tmp_path / "work", {"204": BY_ID["204"].starter.parents[1] / "wrong" / "204_std.py",
                                               "209": BY_ID["209"].solution})
    setting(folder)
    set_lang("zh")
    try:
        with torch.no_grad():
            mine.put_in(model, PROMPT, tiny_path).remove()
    finally:
        set_lang("en")
    out = capsys.readouterr().out
    assert "--mine：204 没有通过评测（" in out and "--mine：你的：209 注意力；课程的：203 " in out
    assert "209 gated_attention 没有缓存" in out
    assert chinese_text_problems(out) == []


# ---------------------------------------------------------------- chapter 14: the loss and RMSNorm's backward

def _training_batch(model):
    ids = torch.tensor([PROMPT])
    labels = ids.clone()
    labels[:, :5] = -100
    return ids, labels


@pytest.fixture
def trainable(tiny_path):
    from qwen.model import load_model
    return load_model(tiny_path, vision=False).requires_grad_(True)


def test_your_rms_norm_backward_is_in_every_norms_path(trainable):
    """The reference 271 as the learner's gives the course's gradients; a backward that doubles dx
    changes them: the learner's function is what differentiates every RMSNorm."""
    from practice._judge import runner
    from qwen.train import next_token_loss
    ids, labels = _training_batch(trainable)
    backward = mine._load(runner, BY_ID["271"].solution, BY_ID["271"].functions)["rms_norm_backward"]
    _, course = mine._gradients(trainable, ids, labels, next_token_loss)
    _, yours = mine._gradients(trainable, ids, labels, next_token_loss, backward)
    assert yours.keys() == course.keys() and len(course) == len(list(trainable.parameters()))

    def relative(a, b):
        return max(((a[n] - g).abs().max() / g.abs().max()).item() for n, g in b.items())
    assert relative(yours, course) <= 1e-5

    def doubled(x, weight, eps, grad_out):
        dx, dw = backward(x, weight, eps, grad_out)
        return 2 * dx, dw
    _, wrong = mine._gradients(trainable, ids, labels, next_token_loss, doubled)
    assert relative(wrong, course) > 0.1
    assert "forward" not in vars(trainable.norm)                          # the course's forward is back


def test_chapter_14_mine_grades_and_compares_one_backward_pass(setting, trainable, tiny_path, tmp_path, capsys):
    """The reference 270 and 271 as the learner's files: both yours, gradients within float rounding;
    a wrong 271 (no term through the mean) is refused and named, and 270 alone runs."""
    ids, labels = _training_batch(trainable)
    setting(_practice_dir(tmp_path / "right", {"270": BY_ID["270"].solution, "271": BY_ID["271"].solution}))
    gap = mine.training_step(trainable, ids, labels)
    out = capsys.readouterr().out
    assert gap is not None and gap <= 1e-5 and "270" in out and "271" in out
    wrong = BY_ID["271"].solution.parent.parent / "wrong" / "271_no_mean_term.py"
    setting(_practice_dir(tmp_path / "wrong", {"270": BY_ID["270"].solution, "271": wrong}))
    gap = mine.training_step(trainable, ids, labels)
    out = capsys.readouterr().out
    assert gap is not None and gap <= 1e-5 and "271" in out         # named, and not used: it drops a term


def test_chapter_14_mine_says_when_passing_parts_misbehave_in_the_model(trainable, monkeypatch, capsys):
    """Parts that passed the judge but exit, or change the gradients, in the model: said in one line each,
    the chapter goes on (a SystemExit of theirs does not end it)."""
    from practice._judge import runner
    ids, labels = _training_batch(trainable)
    backward = mine._load(runner, BY_ID["271"].solution, BY_ID["271"].functions)["rms_norm_backward"]

    def leaves(logits, labels, ignore_index=-100):
        raise SystemExit(3)

    def doubled(x, weight, eps, grad_out):
        dx, dw = backward(x, weight, eps, grad_out)
        return 2 * dx, dw
    for parts, verdict in (({"270": {"next_token_loss": leaves}}, None),
                           ({"271": {"rms_norm_backward": doubled}}, "more")):
        monkeypatch.setattr(mine, "solutions", lambda *a, parts=parts, **k: mine.Solutions(parts, [], "here"))
        gap = mine.training_step(trainable, ids, labels)
        out = capsys.readouterr().out
        if verdict is None:
            assert gap is None and "SystemExit" in out
        else:
            assert gap > mine.TRAINING_TOL and f"{mine.TRAINING_TOL:.0e}" in out
