"""Your parts run the model: `--mine` puts the exercises you solved into Qwen3.5.

    python main.py 9 --mine              chapter 9 generates with your RMSNorm, MLP, delta rule ...
    QWEN_MINE=1, or in a notebook:       from practice.mine import use_mine; use_mine()

Why: the exercises are graded in isolation; here the same functions replace the course's in the
whole model, on the same input, and the largest logit difference from the all-course model says
how close your parts are (a few 1e-6 in fp32 when they are right: only the order of the sums differs).

Which solutions count: each mapped exercise's file in the practice folder (the judge's: practice/,
or $QWEN_PRACTICE_DIR) is graded first, by the judge itself (practice/_judge/grading.py, its
sandbox, on this checkpoint's tensors). Only a file that passes every case is loaded, as the judge's
sandbox loads it (runner.load_module: the file, compiled and run as a module), here in this process;
a failing or unfinished one is named and skipped, and the course's part runs in its place.

Checked at every call, the prompt's and each decode step's (`_Guard`): your function gets copies of
its inputs, never the model's own weights, cache or activations (230 may change its inputs: it
changes copies); the course's reference solution of the exercise runs on the same inputs, and a
result farther from it than the exercise's tolerance (the loosest the judge's cases of that function
hold at that dtype), or a raise, refuses the exercise in one line from that call on: that call takes
the reference's result, and the course's own part is put back. Only a file loaded in this process
could still reach the model some other way (gc, module globals): the check sees its effect only
where it changes its own part's result.

How a part is swapped: on this model instance only, never the classes: a module's `forward` (or
one method) set on the instance, so `del` puts the course's back (`Mine.remove`), and a model
without --mine runs exactly the course's code, at its speed. Where the course's method only calls
the exercise's function, the course's own method runs with the learner's function in place of that
name (`_with_names`): no second copy of the forward. `PARTS` is the one list of exercise -> part.
"""
import math
import os
import sys
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from qwen.lang import QwenError, T, tr

ENV = "QWEN_MINE"


def use_mine(on=True):
    """In a notebook: the chapters that build the model (8, 9) use your solved parts from now on."""
    if on:
        os.environ[ENV] = "1"
    else:
        os.environ.pop(ENV, None)


def wanted(args=None):
    """--mine on the command line, or QWEN_MINE=1 (use_mine() in a notebook)."""
    from engine.hub import env_flag
    return bool(getattr(args, "mine", False)) or env_flag(ENV)


# --------------------------------------------------------------------------------------------
# Putting a part in
# --------------------------------------------------------------------------------------------

def _with_names(method, **names):
    """The course's own function `method`, reading `names` (e.g. l2norm=yours) instead of its module's."""
    scope = dict(method.__globals__, **names)
    return types.FunctionType(method.__code__, scope, method.__name__, method.__defaults__, method.__closure__)


def _set(swaps, module, attr, fn):
    """module.attr = fn(module, ...) on this instance, remembered so that remove() undoes it."""
    swaps.append((module, attr, attr in vars(module), vars(module).get(attr)))
    setattr(module, attr, types.MethodType(fn, module))


def _raised(e):
    """What the learner's code raised, in one line: 'ValueError: its first line' (200 characters at most)."""
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _unset(swaps):
    """Undo _set's swaps, the last first: each module's own attribute back, or none where it had none."""
    for module, attr, had, old in reversed(swaps):
        if had:
            setattr(module, attr, old)
        else:
            delattr(module, attr)


def _modules(model, cls):
    return [m for m in model.modules() if type(m) is cls]


def _embedding(model, mine, swaps):
    E = model.embed_tokens
    _set(swaps, E, "forward", lambda self, ids: mine["embed"](torch.as_tensor(ids), self.weight))
    if not model.cfg.tie_word_embeddings:
        return tr("203 tied_logits: this checkpoint's output layer is its own lm_head, not the embedding table: "
                  "the course's", "203 tied_logits：这个检查点的输出层是独立的 lm_head，不是嵌入表：用课程的")
    _set(swaps, model, "logits", lambda self, h: mine["tied_logits"](h, self.output_weight))


def _norms(model, mine, swaps):
    from qwen.norm import GatedRMSNorm, RMSNorm
    for m in _modules(model, RMSNorm):
        _set(swaps, m, "forward", lambda self, x: mine["rms_norm"](x, self.weight, self.eps))
    for m in _modules(model, GatedRMSNorm):
        _set(swaps, m, "forward", lambda self, x, gate: mine["gated_rms_norm"](x, gate, self.weight, self.eps))


def _l2norm(model, mine, swaps):
    from qwen.deltanet import GatedDeltaNet

    def l2norm(x, dim=-1, eps=1e-6):                          # the course calls it on the last dimension
        return mine["l2norm"](x, eps)
    rule_inputs = _with_names(GatedDeltaNet.rule_inputs, l2norm=l2norm)
    for m in _modules(model, GatedDeltaNet):
        _set(swaps, m, "rule_inputs", rule_inputs)


def _rope(model, mine, swaps):
    """rope_frequencies fills the model's inv_freq; apply_rope rotates q and k at 1-D (text) positions.
    The learner's apply_rope takes positions, the course's cos and sin: the positions the rotary
    embedding was last asked for are kept, and the 3-D positions of an image use the course's."""
    from qwen.attention import Attention, apply_rope as course_rope
    rotary = model.rotary
    inv_freq = mine["rope_frequencies"](model.cfg.head_dim, rotary.rotary_dim / model.cfg.head_dim, rotary.theta)
    inv_freq = torch.as_tensor(inv_freq, dtype=torch.float32)
    if inv_freq.shape != rotary.inv_freq.shape:
        return tr("207 rope_frequencies gave shape {a}, the model needs {b}: the course's RoPE",
                  "207 rope_frequencies 给出的形状是 {a}，模型需要 {b}：用课程的 RoPE",
                  a=tuple(inv_freq.shape), b=tuple(rotary.inv_freq.shape))
    swaps.append((rotary, "inv_freq", True, rotary.inv_freq))
    rotary.inv_freq = inv_freq
    seen = {}
    course_forward = type(rotary).forward

    def forward(self, positions):
        seen["positions"] = positions if positions.dim() == 1 else None
        return course_forward(self, positions)
    _set(swaps, rotary, "forward", forward)

    def apply_rope(x, cos, sin):
        positions = seen.get("positions")
        if positions is None or cos.dim() != 2 or positions.shape[0] != cos.shape[0]:
            return course_rope(x, cos, sin)                        # an image's 3-D positions
        return mine["apply_rope"](x, positions.to(x.device), rotary.inv_freq.to(x.device))
    attention_forward = _with_names(Attention.forward, apply_rope=apply_rope)
    for m in _modules(model, Attention):                           # 209's forward rotates with model._mine_rope,
        _set(swaps, m, "_course_forward" if "forward" in vars(m) else "forward", attention_forward)   # and decodes
    swaps.append((model, "_mine_rope", False, None))                                                # with this one
    model._mine_rope = apply_rope


def _mlp(model, mine, swaps):
    from qwen.mlp import MLP

    def forward(self, x):
        h = x.to(self.gate_proj.weight.dtype)
        return mine["swiglu_mlp"](h, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight).to(x.dtype)
    for m in _modules(model, MLP):
        _set(swaps, m, "forward", forward)


def _attention(model, mine, swaps):
    """Yours reads the whole prompt at once (no cache in the exercise): the prompt pass. A decode step
    with a cache (the keys of earlier calls) runs the course's attention."""
    from qwen.attention import Attention

    def forward(self, x, cos, sin, cache=None):
        past = 0 if cache is None or cache.k is None else cache.k.shape[2]
        course = vars(self).get("_course_forward") or type(self).forward.__get__(self)
        if past:
            return course(x, cos, sin, cache)
        B, T, _ = x.shape
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        h = x.to(self.q_proj.weight.dtype)
        q, gate = self.q_proj(h).view(B, T, H, 2, D).unbind(3)    # (B, T, H, D) each
        q = self.q_norm(q).transpose(1, 2)                        # (B, H, T, D)
        k = self.k_norm(self.k_proj(h).view(B, T, KV, D)).transpose(1, 2)
        v = self.v_proj(h).view(B, T, KV, D).transpose(1, 2)
        rope = getattr(model, "_mine_rope", None) or _course_rope()
        q, k = rope(q, cos, sin).float(), rope(k, cos, sin).float()
        v = v.float()
        if cache is not None:
            cache.update(k, v)
        out = mine["gated_attention"](q, k, v, gate.reshape(B, T, H * D).float(), self.o_proj.weight.float())
        return out.to(x.dtype)                                    # (B, T, hidden)
    for m in _modules(model, Attention):
        _set(swaps, m, "forward", forward)
    return tr("209 gated_attention has no cache: yours reads the prompt, the course's each token after it",
              "209 gated_attention 没有缓存：提示词由你的来读，之后的每个词元用课程的")


def _course_rope():
    from qwen.rope import apply_rope
    return apply_rope


def _delta_rule(model, mine, swaps):
    """Yours, one token at a time, for the prompt too (the course reads a prompt 64 tokens at a time)."""
    from qwen.deltanet import GatedDeltaNet

    def rule(q, k, v, g, beta, state=None, states=None, chunk=None):
        q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
        B, H, T, dk = k.shape
        S = k.new_zeros(B, H, dk, v.shape[-1]) if state is None else state.float().expand(B, H, -1, -1).clone()
        out = v.new_empty(v.shape)                                 # (B, H, T, dv); S: a copy, the cache's is kept
        for t in range(T):                                         # as it is even if yours writes into its input
            S = mine["delta_rule_step"](S, k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t])
            out[:, :, t] = mine["read_state"](S, q[:, :, t])
            if states is not None:
                states[t] = S                                      # (the trail's slot for token t)
        return out, S if T else S.clone()
    forward = _with_names(GatedDeltaNet.forward, delta_rule_recurrent=rule, delta_rule_chunked=rule)
    for m in _modules(model, GatedDeltaNet):
        _set(swaps, m, "forward", forward)


def _conv(model, mine, swaps):
    from qwen.deltanet import GatedDeltaNet

    def causal_conv(self, qkv, cache=None):
        K = self.kernel
        past = None if cache is None else cache.conv                                 # (B, C, K-1) or None
        left = qkv.new_zeros(qkv.shape[0], K - 1, qkv.shape[2]) if past is None else past.transpose(1, 2).to(qkv.dtype)
        y = mine["causal_conv1d"](qkv, self.conv1d.weight[:, 0], left)               # (B, T, C)
        if cache is not None:
            window = torch.cat([left, qkv], 1).transpose(1, 2)                        # (B, C, K-1+T)
            cache.conv = window[:, :, window.shape[-1] - (K - 1):].clone()
            if cache.trail is not None:
                cache.trail.window = window
        return F.silu(y)
    for m in _modules(model, GatedDeltaNet):
        _set(swaps, m, "causal_conv", causal_conv)


def _decay(model, mine, swaps):
    from qwen.deltanet import GatedDeltaNet

    def beta_and_decay(self, x):
        beta = mine["write_strength"](self.in_proj_b(x))                              # (B, T, nv)
        g = mine["log_decay"](self.in_proj_a(x), self.A_log, self.dt_bias)
        return beta.float().transpose(1, 2), g.float().transpose(1, 2)                # (B, nv, T)
    for m in _modules(model, GatedDeltaNet):
        _set(swaps, m, "beta_and_decay", beta_and_decay)


def _layer(model, mine, swaps):
    """The exercise's mixer is a stand-in matrix: given zeros it adds nothing, and the rest of the
    learner's layer, x + mlp(norm2(x)), is each layer's second half."""
    from qwen.model import DecoderLayer
    hidden = model.cfg.hidden_size
    zeros = {}

    def forward(self, x, cos, sin, cache=None):
        x = x + self.mix(self.input_layernorm(x), cos, sin, cache)                    # the course's mixer
        mlp, norm = self.mlp, self.post_attention_layernorm
        key = (x.dtype, x.device)
        if key not in zeros:
            zeros[key] = (torch.zeros(hidden, dtype=x.dtype, device=x.device),
                          torch.zeros(hidden, hidden, dtype=x.dtype, device=x.device))
        none, nothing = zeros[key]
        w = [t.to(x.dtype) for t in (norm.weight, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)]
        return mine["decoder_layer"](x, none, w[0], norm.eps, nothing, *w[1:])
    for m in _modules(model, DecoderLayer):
        _set(swaps, m, "forward", forward)
    return tr("230 decoder_layer's mixer is a stand-in matrix: yours wires each layer's second half, "
              "x + mlp(norm(x)); the course's the mixer", "230 decoder_layer 的 mixer 是一个替身矩阵：每层的后半"
              "（x + mlp(norm(x))）由你的来连，mixer 用课程的")


@dataclass(frozen=True)
class Part:
    """One exercise's place in the model: what it is called, and the function that puts it there
    (model, {name: learner's function}, swaps) -> None, or one line on where it does not fit."""
    name: tuple                        # (en, zh)
    install: object


# exercise -> part, in the order they are put in (209 before 207: 207's RoPE goes into 209's forward).
# A new exercise that is a part of the model adds one line here.
PARTS = {
    "203": Part(("embedding and tied logits", "嵌入和共享输出层"), _embedding),
    "204": Part(("RMSNorm", "RMSNorm"), _norms),
    "205": Part(("l2norm", "l2norm"), _l2norm),
    "209": Part(("attention", "注意力"), _attention),
    "207": Part(("RoPE", "RoPE"), _rope),
    "208": Part(("MLP", "MLP"), _mlp),
    "220": Part(("delta rule", "delta 规则"), _delta_rule),
    "221": Part(("causal conv", "因果卷积"), _conv),
    "222": Part(("decay and beta", "衰减和 beta"), _decay),
    "230": Part(("decoder layer", "解码层"), _layer),
}

# exercises of the model that --mine cannot put in as written, and why (one line each)
NOT_PARTS = {
    "231": ("231 greedy step: it ends in an argmax over a stand-in output layer, so decoding keeps the course's "
            "attention step", "231 贪心一步：它以替身输出层上的 argmax 结束，所以解码仍用课程的注意力步骤"),
    "232": ("232 top-p: sampling is not a part of the model (and is shared by every model in the process): sampled "
            "replies use the course's", "232 top-p：采样不是模型的部件（而且同一进程里的所有模型共用它）：采样的回复用课程的"),
}


# --------------------------------------------------------------------------------------------
# Which of your solutions pass
# --------------------------------------------------------------------------------------------

@dataclass
class Solutions:
    passed: dict                       # exercise id -> {function name: function}
    failed: list                       # [(exercise id, one line)]
    folder: str                        # where the judge looks for the learner's files


def _judge():
    from practice import judge
    return judge


def solutions(model_path, ids=None):
    """Grade your file of each exercise in PARTS (or `ids`) with the judge; load the ones that pass.

    A file that is missing, or still the starter, is not graded (not started)."""
    judge = _judge()
    from practice._judge import grading, runner
    from practice._judge.exercises import BY_ID
    passed, failed = {}, []
    for ex_id in (ids or PARTS):
        ex = BY_ID[ex_id]
        path = judge.WORK / ex.filename
        if not path.is_file() or _same_bytes(path, ex.starter):
            continue
        graded = _read(path)
        try:
            result = judge.grade(ex, path, model_path)
        except (judge.UsageError, grading.ModelProblem) as e:               # a bad QWEN_JUDGE_* or checkpoint
            raise QwenError("--mine: {e}", "--mine：{e}", e=e) from None
        if result["status"] != "pass":
            failed.append((ex_id, _why(result)))
            continue
        if _read(path) == graded:                                           # only the code that was graded runs
            functions = _load(runner, path, ex.functions)
            if _read(path) == graded:
                passed[ex_id] = functions
                continue
        failed.append((ex_id, T("{f} changed while it was being graded: run --mine again once it is saved",
                                "{f} 在评测期间被改动了：保存好之后再运行一次 --mine", f=ex.filename)))
    return Solutions(passed, failed, judge.shown(judge.WORK))


def _read(path):
    """The file's bytes (None where it cannot be read): what was graded must be what is loaded."""
    from practice._judge.files import read_regular
    try:
        return read_regular(path)
    except OSError:
        return None


def _same_bytes(a, b):
    from practice._judge.files import read_regular
    try:
        return read_regular(a) == read_regular(b)
    except OSError:
        return False


def _why(result):
    if result["status"] == "todo":
        return T("not finished", "还没写完")
    if result.get("error"):
        return result["error"]["message"]
    bad = [c for c in result["cases"] if not c["ok"]]
    why = T("{n} case(s) fail", "{n} 个用例没通过", n=len(bad)) + (T(": {c}", "：{c}", c=bad[0]["name"]) if bad else "")
    named = next((c["diagnosis"]["says"] for c in bad if c.get("diagnosis")), None)      # the judge's named mistake
    return why + (T("; {m}", "；{m}", m=named) if named else "")


def _load(runner, path, functions):
    """The file, loaded as the judge's sandbox loads it (then sys.path as it was)."""
    saved = list(sys.path)
    try:
        space = runner.load_module(path)
    finally:
        sys.path[:] = saved
    return {name: space[name] for name in functions}


# --------------------------------------------------------------------------------------------
# The model with your parts
# --------------------------------------------------------------------------------------------

class Mine:
    """The learner's passing parts, put into one model instance (remove() puts the course's back).

    Each of your functions runs through a guard (`_Guard`) at every call, the prompt's and each
    decode step's: it gets copies of its inputs (never a handle on the model's weights, its cache
    or the activations), the course's reference solution of the exercise runs on the same inputs,
    and a result farther from it than the exercise's tolerance (or a raise) refuses the exercise
    from that call on: one line says so, that call gets the reference's result, and the course's
    own part is put back for the calls after it. `references`: {exercise id: {name: function}} to
    compare with instead of the course's solutions (tests)."""

    def __init__(self, model, found, references=None):
        self.model, self.found, self.swaps, self.notes, self.used = model, found, [], [], []
        self.refused = {}                                     # exercise id -> the one line that said why
        self._installing = False
        ids = [i for i in PARTS if i in found.passed]
        references = references or _references(ids)
        tolerances = _tolerances(model.path, ids) if ids else {}
        self.guards = {i: {name: _Guard(self, i, name, fn, references[i][name], tolerances.get(i, {}).get(name, {}))
                           for name, fn in found.passed[i].items() if name in references[i]} for i in ids}
        self._install()

    def _install(self):
        """Put in every exercise not refused; again without one that is refused while going in (207's
        frequencies are computed there)."""
        while True:
            refused = set(self.refused)
            self.notes, self.used, self._installing = [], [], True
            mine = {}
            for ex_id, guards in self.guards.items():
                if ex_id not in self.refused:
                    mine.update(guards)
            try:
                for ex_id, part in PARTS.items():
                    if ex_id not in self.guards or ex_id in self.refused:
                        continue
                    note = part.install(self.model, mine, self.swaps)
                    self.used.append(ex_id)
                    if note:
                        self.notes.append(note)
            finally:
                self._installing = False
            if set(self.refused) == refused:
                return
            self.remove()

    def refuse(self, ex_id, why):
        """Your part of `ex_id` is out from here on, in one line; the course's part is put back."""
        from engine.cli import say
        if ex_id in self.refused:
            return
        self.refused[ex_id] = why
        say("  --mine: {i} {name} passes the judge but {why}: refused from here on, the course's part runs",
            "  --mine：{i} {name} 通过了评测，但{why}：从这里起不再使用，运行课程的部件",
            i=ex_id, name=tr(*PARTS[ex_id].name), why=why)
        if not self._installing:
            self.remove()
            self._install()

    def remove(self):
        _unset(self.swaps)
        self.swaps = []

    def names(self):
        return tr(", ", "、").join(f"{i} {tr(*PARTS[i].name)}" for i in sorted(self.used))

    def course_names(self):
        """The model's parts that are the course's: not solved, failing, or refused."""
        return tr(", ", "、").join(f"{i} {tr(*PARTS[i].name)}" for i in sorted(PARTS) if i not in self.used)


class _Guard:
    """One of your functions as the model calls it: on copies of the inputs, checked against the
    course's reference on the same inputs at every call (see Mine)."""

    def __init__(self, mine, ex_id, name, learner, reference, tolerances):
        self.mine, self.ex_id, self.name = mine, ex_id, name
        self.learner, self.reference, self.tolerances = learner, reference, tolerances
        self.calls = 0
        self.private = {}          # id(model's parameter) -> (it, its version, your copy, the copy's version)

    def __call__(self, *args, **kw):
        expected = self.reference(*args, **kw)                    # the course's, on the model's own inputs
        if self.ex_id in self.mine.refused:
            return expected
        self.calls += 1
        try:
            got = _copies(self.learner(*self._copies(args), **self._copies(kw)))   # the model keeps a copy of yours:
        except Exception as e:                                           # noqa: BLE001 - learner code
            return self._refused(expected, args, T("raised in the model ({e})", "在模型里出错（{e}）", e=_raised(e)))
        problem = _differs(expected, got, self.tolerances)               # your function holds no handle on it
        if problem:
            return self._refused(expected, args, problem)
        return got

    def _copies(self, value):
        """Copies of the inputs. A weight (an nn.Parameter) is copied once and the copy handed over again
        while neither it nor the copy has changed (their version counters): a decode step does not copy
        the embedding table or every layer's MLP again; the cost is one copy of those weights in memory."""
        if isinstance(value, torch.nn.Parameter) and not value.is_inference():
            held = self.private.get(id(value))
            if held is None or held[1] != value._version or held[2]._version != held[3]:
                with torch.inference_mode(False):                    # a copy that counts its versions
                    copy = value.detach().clone()
                held = self.private[id(value)] = (value, value._version, copy, copy._version)
            return held[2]
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(self._copies(v) for v in value)
        if type(value) is dict:
            return {k: self._copies(v) for k, v in value.items()}
        return _copies(value)

    def _refused(self, expected, args, why):
        shape = next((list(a.shape) for a in args if isinstance(a, torch.Tensor)), None)
        where = T("call {n} of {f}", "{f} 的第 {n} 次调用", n=self.calls, f=self.name) + \
            (T(", first input {s}", "（第一个输入 {s}）", s=shape) if shape is not None else "")
        self.mine.refuse(self.ex_id, T("{why} at {where}", "在 {where}时{why}", why=why, where=where))
        return expected


def _copies(value):
    """The value with every tensor in it copied (same dtype, shape and strides where dense)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_copies(v) for v in value)
    if type(value) is dict:
        return {k: _copies(v) for k, v in value.items()}
    return value


def _differs(expected, got, tolerances):
    """None when `got` is within the exercise's tolerance of the course's `expected`, else one phrase."""
    from practice._judge.compare import Mismatch, check_value, dtype_name
    tensors = [t for t in (got if isinstance(got, (tuple, list)) else [got]) if isinstance(t, torch.Tensor)]
    if any(type(t) is not torch.Tensor for t in tensors):
        return T("returned a {t}, not a plain tensor", "返回了 {t}，不是普通张量",
                 t=type(next(t for t in tensors if type(t) is not torch.Tensor)).__name__)
    first = next((t for t in (expected if isinstance(expected, (tuple, list)) else [expected])
                  if isinstance(t, torch.Tensor)), None)
    tol = None if first is None else tolerances.get(dtype_name(first.dtype)) or _unseen_dtype_tol(first)
    if _within(expected, got, tol):                                  # the usual case, in one pass
        return None
    try:
        check_value(expected, got, tol=tol)
    except Mismatch as m:
        d = m.detail
        gap = T(": max |difference| {a:.2g}, tolerance {t}", "：最大 |差| {a:.2g}，容差 {t}",
                a=d["max_abs"], t=d["tolerance"]) if "max_abs" in d else ""
        return T("differs from the course's reference in the model ({s}{g})", "在模型里与课程的参考解不同（{s}{g}）",
                 s=m.summary, g=gap)
    return None


def _within(expected, got, tol):
    """True when both are tensors of one shape and dtype within an atol/rtol `tol` (the judge's own
    comparison, compare.check_value, decides everything else and words what differs)."""
    if not (isinstance(expected, torch.Tensor) and type(got) is torch.Tensor and tol is not None
            and tol.ulps is None and not tol.exact_share and expected.is_floating_point()
            and got.shape == expected.shape and got.dtype == expected.dtype):
        return False
    return bool(torch.isclose(got, expected, rtol=tol.rtol, atol=tol.atol, equal_nan=True).all())


def _unseen_dtype_tol(t):
    """A dtype the exercise's cases never grade (bf16 with ch09 --dtype bfloat16): 8 of its rounding
    steps, relative to the result's largest value (only a gross difference is refused there)."""
    from practice._judge.exercises import Tol
    if not t.is_floating_point():
        return None
    eps = torch.finfo(t.dtype).eps
    scale = t.detach().abs().max().item() if t.numel() else 0.0
    return Tol(8 * eps * scale if math.isfinite(scale) else 0.0, 8 * eps)


_REFERENCES = {}
_TOLERANCES = {}


def _references(ids):
    """{exercise id: {function name: the course's reference solution}} (practice/_judge/solutions)."""
    from practice._judge import runner
    from practice._judge.exercises import BY_ID
    for i in ids:
        if i not in _REFERENCES:
            _REFERENCES[i] = _load(runner, BY_ID[i].solution, BY_ID[i].functions)
    return {i: _REFERENCES[i] for i in ids}


def _tolerances(model_path, ids):
    """{exercise id: {function: {dtype name: Tol}}}: the loosest tolerance the judge's cases of that
    function hold at each result dtype, on this checkpoint (the cases are built as the judge builds them)."""
    import tempfile
    from practice._judge import grading
    from practice._judge.compare import dtype_name, tolerance_for
    from practice._judge.exercises import BY_ID, Tol
    key = str(model_path)
    missing = [i for i in ids if (key, i) not in _TOLERANCES]
    if missing:
        with tempfile.TemporaryDirectory() as scratch:
            ctx = grading.context(model_path, scratch)
            for i in missing:
                found = {}
                for case in BY_ID[i].cases(ctx):
                    e = case.expected
                    first = next((t for t in (e if isinstance(e, (tuple, list)) else [e]) if isinstance(t, torch.Tensor)),
                                 None)
                    if first is None:
                        continue
                    tol = tolerance_for(first, case.tol)
                    d = found.setdefault(case.function, {})
                    was = d.get(dtype_name(first.dtype))
                    d[dtype_name(first.dtype)] = tol if was is None else Tol(
                        max(was.atol, tol.atol), max(was.rtol, tol.rtol),
                        None if was.ulps is None and tol.ulps is None else max(was.ulps or 0, tol.ulps or 0),
                        min(was.exact_share, tol.exact_share))
                _TOLERANCES[key, i] = found
    return {i: _TOLERANCES[key, i] for i in ids}


def put_in(model, probe_ids, model_path=None):
    """--mine: grade, put the passing parts in `model`, and say so: which parts are yours, which the
    course's, the largest logit difference from the course's parts on `probe_ids`. Returns the Mine
    (its parts stay in the model, checked at every call), or None when none is yours (the course's
    parts run)."""
    from engine.cli import say
    ids = torch.as_tensor(probe_ids).reshape(1, -1)
    course_logits = model(ids)                            # (1, seq, vocab): before your files run here (their
    _references(list(PARTS))                              # top level may change torch or the course's modules),
    _tolerances(model.path, list(PARTS))                  # as are the references and tolerances checked against
    found = solutions(model_path or model.path)
    for ex_id, why in found.failed:
        say("  --mine: {i} does not pass the judge ({why}): skipped, the course's part runs",
            "  --mine：{i} 没有通过评测（{why}）：跳过，运行课程的部件", i=ex_id, why=why)
    if not found.passed:
        _say_none(found)
        return None
    mine, mine_logits = _probe(model, found, ids)
    if mine is None or not mine.used:
        if mine is not None:
            mine.remove()
        say("  --mine: none of your parts runs in the model: the course's parts run",
            "  --mine：你的部件没有一个在模型里运行：运行课程的部件")
        return None
    mine.difference = (mine_logits - course_logits).abs().max().item()
    say("  --mine: yours: {names}; the course's: {others}", "  --mine：你的：{names}；课程的：{others}",
        names=mine.names(), others=mine.course_names() or tr("none", "无"))
    for note in mine.notes + [tr(*NOT_PARTS[i]) for i in NOT_PARTS if i in _started(found)]:
        say("  --mine: {note}", "  --mine：{note}", note=note)
    say("  --mine: largest |logit difference| from the course's parts on the same {t} tokens: {d:.1e}",
        "  --mine：同样 {t} 个词元上，与课程部件的 logits 最大差：{d:.1e}", t=ids.shape[1], d=mine.difference)
    return mine


def _say_none(found):
    """No model part of yours passes: say so, and name the exercises that pass but are not model parts."""
    from engine.cli import say
    others = _passed_elsewhere()
    if not others:
        say("  --mine: none of your exercises in {d} passes yet (python practice/judge.py): the course's parts run",
            "  --mine：{d} 里你的练习还没有一个通过（python practice/judge.py）：运行课程的部件", d=found.folder)
        return
    say("  --mine: none of the model's parts --mine puts in ({parts}) passes yet in {d}; {others} pass, but they are "
        "not parts of the model: the course's parts run",
        "  --mine：{d} 里 --mine 放进模型的部件（{parts}）还没有一个通过；{others} 通过了，但它们不是模型的部件："
        "运行课程的部件", parts=tr(", ", "、").join(sorted(PARTS)), d=found.folder, others=others)


def _passed_elsewhere():
    """Your exercises outside PARTS that the judge recorded as passed, their file unchanged since:
    '240 Smart resize, 250 ...' (empty when none)."""
    judge = _judge()
    from practice._judge import progress
    rows = judge.list_rows(progress.load())
    return tr(", ", "、").join(f"{r['id']} {r['title']}" for r in rows if r["status"] == "pass" and r["id"] not in PARTS)


def _run(model, ids):
    """The logits on ids, after the paths generation takes: the prompt into a cache, then one cached
    decode step (one token: a shape the prompt pass alone never tries)."""
    cache = model.new_cache()
    model(ids[:, :-1], cache=cache)                                      # (1, seq-1, vocab)
    model(ids[:, -1:], cache=cache)                                      # (1, 1, vocab): a decode step
    return model(ids)                                                    # (1, seq, vocab)


def _probe(model, found, ids):
    """(Mine, its logits on ids). Your function that raises or differs in the model is refused by its
    guard (Mine); what may still raise here is the course's code around a part: then each part is
    tried alone, and the ones that raise are named and left out."""
    from engine.cli import say
    mine = Mine(model, found)
    try:
        return mine, _run(model, ids)
    except Exception:                                                    # noqa: BLE001 - learner code
        mine.remove()
    for ex_id in list(found.passed):
        alone = Mine(model, Solutions({ex_id: found.passed[ex_id]}, [], found.folder))
        try:
            _run(model, ids)
        except Exception as e:                                           # noqa: BLE001 - learner code
            say("  --mine: {i} passes the judge but raised in the model ({e}): skipped, the course's part runs",
                "  --mine：{i} 通过了评测，但在模型里出错（{e}）：跳过，运行课程的部件",
                i=ex_id, e=_raised(e))
            del found.passed[ex_id]
        finally:
            alone.remove()
    if not found.passed:
        return None, None
    mine = Mine(model, found)
    return mine, _run(model, ids)


def _started(found):
    judge = _judge()
    from practice._judge.exercises import BY_ID
    return [i for i in NOT_PARTS if (judge.WORK / BY_ID[i].filename).is_file()]


# --------------------------------------------------------------------------------------------
# A training step with your loss and RMSNorm backward (chapter 14)
# --------------------------------------------------------------------------------------------

# exercise -> what it computes in a training step: the loss on the logits, and every RMSNorm's backward
TRAINING = {"270": ("the loss", "损失"), "271": ("RMSNorm's backward", "RMSNorm 的反向传播")}
TRAINING_TOL = 1e-4                     # relative: right parts differ from the course's by float rounding only


class _YourBackward(torch.autograd.Function):
    """The course's RMSNorm forward; its backward is your rms_norm_backward (271), given copies."""

    @staticmethod
    def forward(ctx, x, weight, norm, backward):
        ctx.save_for_backward(x, weight)
        ctx.norm, ctx.backward = norm, backward
        return type(norm).forward(norm, x)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x, grad_w = ctx.backward(x.clone(), weight.clone(), ctx.norm.eps, grad_out.clone())
        return grad_x, grad_w, None, None


def _gradients(model, ids, labels, loss_fn, backward=None):
    """(loss, {name: gradient}) of one backward pass; with `backward`, every RMSNorm (qwen.norm's, the
    residual stream's and attention's q/k norms) differentiates through it."""
    from qwen.norm import RMSNorm
    swaps = []
    if backward is not None:
        for norm in _modules(model, RMSNorm):
            _set(swaps, norm, "forward", lambda self, x: _YourBackward.apply(x, self.weight, self, backward))
    model.zero_grad(set_to_none=True)
    try:
        loss = loss_fn(model(ids), labels)
        loss.backward()
    finally:
        _unset(swaps)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def training_step(model, ids, labels, model_path=None):
    """--mine in chapter 14: grade 270 and 271, then one backward pass of `model` on (ids, labels) with
    your loss and RMSNorm backward where they pass, against the course's. Says which are yours and the
    largest differences (the loss, and any parameter's gradient relative to its largest entry).
    Returns that gradient difference, or None when none of yours runs."""
    from engine.cli import say
    from qwen.train import next_token_loss
    found = solutions(model_path or model.path, ids=list(TRAINING))
    for ex_id, why in found.failed:
        say("  --mine: {i} does not pass the judge ({why}): skipped, the course's part runs",
            "  --mine：{i} 没有通过评测（{why}）：跳过，运行课程的部件", i=ex_id, why=why)
    if not found.passed:
        say("  --mine: neither 270 nor 271 passes yet in {d} (python practice/judge.py 270): the course's parts run",
            "  --mine：{d} 里 270 和 271 都还没有通过（python practice/judge.py 270）：运行课程的部件", d=found.folder)
        return None
    loss_fn = found.passed.get("270", {}).get("next_token_loss", next_token_loss)
    backward = found.passed.get("271", {}).get("rms_norm_backward")
    course_loss, course = _gradients(model, ids, labels, next_token_loss)
    try:
        loss, yours = _gradients(model, ids, labels, loss_fn, backward)
        if yours.keys() != course.keys() or any(yours[n].shape != g.shape for n, g in course.items()):
            raise ValueError(tr("a gradient is missing or has another shape", "有梯度缺失或形状不对"))
    except (Exception, SystemExit) as e:                                  # noqa: BLE001 - learner code
        say("  --mine: your parts pass the judge but raised in the training step ({e}): the course's parts run",
            "  --mine：你的部件通过了评测，但在训练步里出错（{e}）：运行课程的部件",
            e=_raised(e))
        return None
    gaps = torch.stack([(yours[n] - g).abs().max() / g.abs().max().clamp_min(1e-30) for n, g in course.items()])
    gap = gaps.max().item() if torch.isfinite(gaps).all() else math.nan        # a NaN anywhere is said, not hidden
    names = tr(", ", "、").join(f"{i} {tr(*TRAINING[i])}" for i in TRAINING if i in found.passed)
    say("  --mine: yours: {names}; one backward pass on the batch above: loss {a:.6f}, the course's {b:.6f}",
        "  --mine：你的：{names}；在上面的批次上做一次反向传播：损失 {a:.6f}，课程的 {b:.6f}",
        names=names, a=loss, b=course_loss)
    say("  --mine: largest difference in any of the {n} parameters' gradients, relative to its largest entry: {d:.1e}",
        "  --mine：{n} 个参数的梯度中，相对其最大元素的最大差：{d:.1e}", n=len(course), d=gap)
    if not (gap <= TRAINING_TOL and abs(loss - course_loss) <= TRAINING_TOL * abs(course_loss)):
        say("  --mine: that is more than float rounding ({t:.0e}): your parts pass the judge's cases but not this "
            "model's; try them on its sizes (python practice/judge.py 270, 271)",
            "  --mine：这超出了浮点舍入（{t:.0e}）：你的部件通过了评测的用例，却没通过这个模型；请在它的尺寸上再试"
            "（python practice/judge.py 270、271）", t=TRAINING_TOL)
    return gap
