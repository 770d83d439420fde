"""Exercises 207-209 (chapters 4-6): RoPE with partial rotation, the SwiGLU MLP, gated causal attention.

Expected values come from the library (qwen/rope.py, qwen/mlp.py, qwen/attention.py), which the
tests check against transformers' Qwen3.5 modules. Inputs: the model's own config numbers and
weights (the real Qwen3.5-0.8B when it is on disk, else the built-in tiny checkpoint), plus
small synthetic shapes chosen so that each known mistake changes the result.
"""
import math

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol


def _torch():
    import torch
    return torch


# ------------------------------------------------------------------------------------------ 207

def _cos_sin(positions, inv_freq):
    torch = _torch()
    angles = positions.float()[:, None] * inv_freq                    # (seq, r / 2), fp32 as the model does
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rope_expected(x, positions, inv_freq):
    from qwen.rope import apply_rope
    return apply_rope(x, *_cos_sin(positions, inv_freq))


def _rope_mistake(turn):
    """A mistaken apply_rope written as turn(a, b, cos, sin) -> rotated pairs (fp32), on the first r entries."""
    def apply(x, positions, inv_freq):
        torch = _torch()
        angles = positions.float()[:, None] * inv_freq
        r = 2 * inv_freq.shape[0]
        rot = turn(x[..., :r].float(), angles.cos(), angles.sin())
        return torch.cat((rot.to(x.dtype), x[..., r:]), dim=-1)
    return apply


def _interleaved(h, cos, sin):
    torch = _torch()
    pairs = h.unflatten(-1, (h.shape[-1] // 2, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)


def _backwards(h, cos, sin):
    torch = _torch()
    a, b = h.chunk(2, dim=-1)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return h * cos + torch.cat((b, -a), dim=-1) * sin


def _rope_in_dtype(x, positions, inv_freq):
    """cos and sin cast to x's dtype and the rotation done in it (bf16 for a bf16 x), as transformers does."""
    torch = _torch()
    cos, sin = (c.to(x.dtype) for c in _cos_sin(positions, inv_freq))
    r = cos.shape[-1]
    a, b = x[..., :r].chunk(2, dim=-1)
    return torch.cat((x[..., :r] * cos + torch.cat((-b, a), dim=-1) * sin, x[..., r:]), dim=-1)


def _rope_half_head(x, positions, inv_freq):
    """Pairs (x_i, x_{i + head_dim / 2}) for i < rotary_dim / 2: rotate-half over the whole head, the
    missing angles padded with cos 1, sin 0, instead of over the first rotary_dim entries."""
    n, h = inv_freq.shape[0], x.shape[-1] // 2
    angles = positions.float()[:, None] * inv_freq                    # (seq, r / 2)
    cos, sin = angles.cos(), angles.sin()
    y = x.float()
    out = y.clone()
    a, b = y[..., :n], y[..., h:h + n]
    out[..., :n], out[..., h:h + n] = a * cos - b * sin, b * cos + a * sin
    return out.to(x.dtype)


def _half_head_frequencies(head_dim, factor, theta):
    """rotary_dim taken as head_dim / 2 whatever the factor (right only when it is 0.5)."""
    torch = _torch()
    r = head_dim // 2
    return 1.0 / (theta ** (torch.arange(0, r, 2, dtype=torch.float32) / r))


def cases_207(ctx):
    torch = _torch()
    from qwen.rope import inverse_frequencies, rope_settings
    cfg = ctx.cfg
    g = ctx.gen(207)
    rotary_dim, theta, _ = rope_settings(cfg)
    factor = rotary_dim / cfg.head_dim
    f_model = inverse_frequencies(rotary_dim, theta)
    f32 = inverse_frequencies(16, 10000.0)                            # head_dim 32, factor 0.5
    f_full = inverse_frequencies(8, 10000.0)                          # factor 1: no pass-through
    D = cfg.head_dim
    x_model = torch.randn(1, cfg.num_attention_heads, 6, D, generator=g)
    x_far = torch.randn(2, 2, 4, D, generator=g)
    x_bf16 = torch.randn(1, 3, 5, 32, generator=g).bfloat16()
    x_nc = torch.randn(1, 2, 32, 7, generator=g).transpose(-1, -2)    # (1, 2, 7, 32), not contiguous
    x_full = torch.randn(2, 1, 3, 8, generator=g)
    p6, far, p5 = torch.arange(6), torch.tensor([0, 1, 2047, 3000]), torch.tensor([3, 9, 27, 81, 99])
    freq = ("f_i = 1 / theta^(2i / rotary_dim), i < rotary_dim / 2, with rotary_dim = int(head_dim * factor)",
            "f_i = 1 / theta^(2i / rotary_dim)，i < rotary_dim / 2，其中 rotary_dim = int(head_dim * factor)")
    rot = ("pair i is (x_i, x_{i + r/2}), turned by position * f_i; entries from r on pass through",
           "第 i 对是 (x_i, x_{i + r/2})，转过 位置 * f_i；第 r 个数之后原样通过")
    L = ctx.label
    f_tol = Tol(1e-7, 1e-6)
    return [
        Case("rope_frequencies", (f"{L} config: head_dim {D}, factor {factor:g}, theta {theta:g}",
                                  f"{ctx.label_of}配置：head_dim {D}，factor {factor:g}，theta {theta:g}"),
             (D, factor, theta), f_model, f_tol, about=freq),
        Case("rope_frequencies", ("head_dim 32, factor 0.5, theta 10000", "head_dim 32，factor 0.5，theta 10000"),
             (32, 0.5, 10000.0), f32, f_tol, about=freq),
        Case("rope_frequencies", ("factor 1.0: every entry rotates", "factor 1.0：所有数都旋转"), (8, 1.0, 10000.0),
             f_full, f_tol, about=freq),
        Case("apply_rope", (f"{L} config, positions 0..5, fp32", f"{ctx.label_of}配置，位置 0..5，fp32"), (x_model, p6, f_model),
             rope_expected(x_model, p6, f_model), about=rot),
        Case("apply_rope", ("head_dim 32, factor 0.5, positions up to 99", "head_dim 32，factor 0.5，位置到 99"),
             (x_nc, torch.arange(3, 10), f32), rope_expected(x_nc, torch.arange(3, 10), f32),
             about=("a non-contiguous x: index the last dimension, do not assume a layout",
                    "不连续的 x：沿最后一维取数，不要假设内存布局")),
        Case("apply_rope", ("bf16 x: fp32 inside, one rounding", "bf16 的 x：内部用 fp32，最后舍入一次"),
             (x_bf16, p5, f32), rope_expected(x_bf16, p5, f32),
             about=("compute in fp32 (x.float()) and cast back once: the bits must match",
                    "在 fp32 中计算（x.float()），最后只转回一次：逐位比较")),
        Case("apply_rope", ("factor 1.0: no pass-through", "factor 1.0：没有原样通过的数"), (x_full, p6[:3], f_full),
             rope_expected(x_full, p6[:3], f_full), about=rot),
        Case("apply_rope", (f"{L} config, positions up to 3000", f"{ctx.label_of}配置，位置到 3000"), (x_far, far, f_model),
             rope_expected(x_far, far, f_model), Tol(1e-3, 0),
             about=("large angles: compute them in fp32 as positions.float() * inv_freq",
                    "大角度：按 positions.float() * inv_freq 在 fp32 中计算")),
    ]


def _all_dims(case, got):
    head_dim = case.args[0]
    return hasattr(got, "shape") and len(got.shape) == 1 and got.shape[0] == head_dim // 2 \
        and case.expected.shape[0] != head_dim // 2


DIAGNOSES_207 = [
    Diagnosis("all_dims", "rope_frequencies",
              ("looks like every entry of the head got a frequency: only rotary_dim = int(head_dim * "
               "partial_rotary_factor) entries rotate, so there are rotary_dim / 2 frequencies",
               "看起来头里的每个数都有了频率：只有 rotary_dim = int(head_dim * partial_rotary_factor) 个数旋转，"
               "所以只有 rotary_dim / 2 个频率"),
              test=_all_dims, hint=0),
    Diagnosis("exponent_head_dim", "rope_frequencies",
              ("looks like the exponent is 2i / head_dim: it is 2i / rotary_dim, so the slowest pair turns at theta^-(r-2)/r",
               "看起来指数用了 2i / head_dim：应当是 2i / rotary_dim，最慢的一对是 theta^-(r-2)/r"),
              mistake=lambda d, factor, theta: 1.0 / (theta ** (_torch().arange(0, int(d * factor), 2,
                                                                                dtype=_torch().float32) / d)),
              hint=0),
    Diagnosis("interleaved", "apply_rope",
              ("looks like neighbours (2i, 2i + 1) were paired: Qwen3.5 pairs entry i with entry i + rotary_dim / 2 "
               "(rotate-half)",
               "看起来把相邻的 (2i, 2i + 1) 配成了一对：Qwen3.5 把第 i 个数和第 i + rotary_dim / 2 个数配对（rotate-half）"),
              mistake=_rope_mistake(_interleaved), hint=2),
    Diagnosis("backwards", "apply_rope",
              ("looks like the rotation goes the other way: rotate_half(x) is [-x2, x1], so a pair (a, b) becomes "
               "(a cos - b sin, b cos + a sin)",
               "看起来旋转方向反了：rotate_half(x) 是 [-x2, x1]，(a, b) 应变成 (a cos - b sin, b cos + a sin)"),
              mistake=_rope_mistake(_backwards), hint=2),
    Diagnosis("rotated_in_bf16", "apply_rope",
              ("looks like the rotation was computed in bf16 (cos and sin cast to x's dtype): compute in fp32 "
               "(x.float()) and round once at the end",
               "看起来旋转是在 bf16 中计算的（cos 和 sin 转成了 x 的类型）：在 fp32 中计算（x.float()），最后只舍入一次"),
              mistake=_rope_in_dtype),
    Diagnosis("half_head_frequencies", "rope_frequencies",
              ("looks like rotary_dim was taken as head_dim / 2: it is int(head_dim * partial_rotary_factor) "
               "(Qwen3.5: a quarter of the head), so there are rotary_dim / 2 frequencies with exponents 2i / rotary_dim",
               "看起来把 rotary_dim 当成了 head_dim / 2：它是 int(head_dim * partial_rotary_factor)（Qwen3.5 是头的四分之一），"
               "所以有 rotary_dim / 2 个频率，指数是 2i / rotary_dim"),
              mistake=_half_head_frequencies, hint=0),
    Diagnosis("half_head_pairs", "apply_rope",
              ("looks like the rotate-half split was made over the whole head: entry i pairs with entry i + rotary_dim / 2 "
               "(r = 2 * len(inv_freq)), not i + head_dim / 2; rotate x[..., :r] and pass x[..., r:] through",
               "看起来 rotate-half 的对半分用在了整个头上：第 i 个数与第 i + rotary_dim / 2 个数配对"
               "（r = 2 * len(inv_freq)），不是 i + head_dim / 2；旋转 x[..., :r]，x[..., r:] 原样通过"),
              mistake=_rope_half_head, hint=2),
]


# ------------------------------------------------------------------------------------------ 208

def mlp_expected(x, wg, wu, wd):
    from qwen.mlp import MLP
    torch = _torch()
    mlp = MLP(wg.shape[1], wg.shape[0])
    mlp.gate_proj.weight.data, mlp.up_proj.weight.data, mlp.down_proj.weight.data = wg, wu, wd
    with torch.no_grad():
        return mlp(x)


def _mlp_mistake(act, on_up=False):
    def mistake(x, wg, wu, wd):
        h = x.float()
        g, u = h @ wg.float().T, h @ wu.float().T
        if on_up:
            g, u = u, g
        return ((act(g) * u) @ wd.float().T).to(x.dtype)
    return mistake


def cases_208(ctx):
    torch = _torch()
    import torch.nn.functional as F
    g = ctx.gen(208)
    H = ctx.cfg.hidden_size
    wg, wu, wd = (ctx.W[f"layers.0.mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))   # bf16, as stored
    x_b = (torch.randn(5, H, generator=g)).bfloat16()
    x_f = torch.randn(2, 3, H, generator=g)
    wf = [w.float() for w in (wg, wu, wd)]
    sg, su, sd = (torch.randn(12, 8, generator=g) * 0.5, torch.randn(12, 8, generator=g) * 0.5,
                  torch.randn(8, 12, generator=g) * 0.3)
    xs = torch.randn(4, 8, generator=g) * 2
    zeros = torch.zeros(1, 2, 8)
    del F
    exp_b = mlp_expected(x_b, wg, wu, wd)
    bf16_tol = Tol(0.02 * exp_b.float().abs().max().item(), 0)
    fp32 = Tol(1e-5, 1e-4)
    about = ("down(silu(x @ gate.T) * (x @ up.T)): silu on the gate projection only",
             "down(silu(x @ gate.T) * (x @ up.T))：silu 只用在 gate 投影上")
    L = ctx.label
    return [
        Case("swiglu_mlp", (f"{L} layer-0 MLP, bf16 as stored", f"{L} 第 0 层 MLP，按存储的 bf16"), (x_b, wg, wu, wd),
             exp_b, bf16_tol, about=about),
        Case("swiglu_mlp", (f"{L} layer-0 MLP in fp32, batch dimensions (2, 3)", f"{L} 第 0 层 MLP 用 fp32，批次维度 (2, 3)"),
             (x_f, *wf), mlp_expected(x_f, *wf), fp32, about=about),
        Case("swiglu_mlp", ("hidden 8, intermediate 12, fp32", "hidden 8，intermediate 12，fp32"), (xs, sg, su, sd),
             mlp_expected(xs, sg, su, sd), fp32, about=about),
        Case("swiglu_mlp", ("all-zero x gives zeros", "全零的 x 得到全零"), (zeros, sg, su, sd),
             mlp_expected(zeros, sg, su, sd), fp32, about=("no bias anywhere: silu(0) * 0 = 0", "没有任何偏置：silu(0) * 0 = 0")),
    ]


def _silu(z):
    return z * _torch().sigmoid(z)


DIAGNOSES_208 = [
    Diagnosis("silu_on_up", "swiglu_mlp",
              ("looks like silu was applied to up(x) instead of gate(x): the gate projection is the one through silu",
               "看起来 silu 用在了 up(x) 上而不是 gate(x) 上：经过 silu 的是 gate 投影"),
              mistake=_mlp_mistake(_silu, on_up=True)),
    Diagnosis("sigmoid", "swiglu_mlp",
              ("looks like sigmoid(gate) was used: silu(z) is z * sigmoid(z)",
               "看起来用了 sigmoid(gate)：silu(z) 是 z * sigmoid(z)"),
              mistake=_mlp_mistake(lambda z: _torch().sigmoid(z))),
    Diagnosis("relu", "swiglu_mlp",
              ("looks like ReLU was used: SwiGLU's gate is silu(z) = z * sigmoid(z), which is smooth and slightly "
               "negative below 0",
               "看起来用了 ReLU：SwiGLU 的门是 silu(z) = z * sigmoid(z)，它是平滑的，在 0 以下略为负"),
              mistake=_mlp_mistake(lambda z: _torch().relu(z))),
    Diagnosis("gelu", "swiglu_mlp",
              ("looks like GELU was used (that is GeGLU): Qwen3.5's MLP is SwiGLU, silu(z) = z * sigmoid(z)",
               "看起来用了 GELU（那是 GeGLU）：Qwen3.5 的 MLP 是 SwiGLU，silu(z) = z * sigmoid(z)"),
              mistake=_mlp_mistake(lambda z: _torch().nn.functional.gelu(z))),
    Diagnosis("silu_of_product", "swiglu_mlp",
              ("looks like silu was applied to the product gate(x) * up(x): only the gate goes through silu, "
               "silu(gate(x)) * up(x), then down",
               "看起来 silu 用在了乘积 gate(x) * up(x) 上：只有 gate 经过 silu，silu(gate(x)) * up(x)，然后 down"),
              mistake=lambda x, wg, wu, wd: (_silu((x.float() @ wg.float().T) * (x.float() @ wu.float().T))
                                             @ wd.float().T).to(x.dtype)),
]


# ------------------------------------------------------------------------------------------ 209

def attention_expected(q, k, v, gate, o_weight):
    from qwen.attention import causal_attention
    B, H, T, D = q.shape
    out = causal_attention(q, k, v, 1.0 / math.sqrt(D)).transpose(1, 2).reshape(B, T, H * D)
    return ((out * _torch().sigmoid(gate)) @ o_weight.T).to(q.dtype)


def _attention_mistake(kv="interleave", mask=True, scale="sqrt", gate_first=True, sigmoid=True, transpose=True,
                       diagonal=1, fill=float("-inf")):
    """The attention with one step done wrong, in fp64, rounded once to q's dtype. diagonal: the first
    masked diagonal (1: later keys; 2: the next token readable; 0: the token itself hidden), filled with `fill`."""
    def mistake(q, k, v, gate, o_weight):
        torch = _torch()
        B, H, T, D = q.shape
        group = H // k.shape[1]
        if kv == "interleave":
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        else:
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        scores = q.double() @ k.double().transpose(-1, -2) / {"sqrt": math.sqrt(D), "head_dim": D, None: 1.0}[scale]
        if mask:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(diagonal), fill)
        out = torch.softmax(scores, -1) @ v.double()                  # (B, H, T, D)
        out = (out.transpose(1, 2) if transpose else out).reshape(B, T, H * D)
        s, o = torch.sigmoid(gate.double()) if sigmoid else gate.double(), o_weight.double()
        return ((out * s) @ o.T if gate_first else (out @ o.T) * s).to(q.dtype)
    return mistake


def cases_209(ctx):
    torch = _torch()
    g = ctx.gen(209)
    cfg = ctx.cfg
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    L = cfg.full_attention_layers[0]
    o_model = ctx.W[f"layers.{L}.self_attn.o_proj.weight"].float()

    def inputs(B, H, KV, T, D, hidden, o=None):
        q = torch.randn(B, H, T, D, generator=g)
        k = torch.randn(B, KV, T, D, generator=g)
        v = torch.randn(B, KV, T, D, generator=g)
        gate = torch.randn(B, T, H * D, generator=g) * 2
        o = o if o is not None else torch.randn(hidden, H * D, generator=g) / math.sqrt(H * D)
        return q, k, v, gate, o

    model = inputs(1, H, KV, 6, D, None, o_model)
    gqa = inputs(2, 8, 2, 9, 8, 64)                                   # 4 queries per kv head; square o_proj
    one = inputs(1, 4, 2, 1, 8, 16)
    mha = inputs(1, 3, 3, 5, 4, 12)
    bf16 = tuple(t.bfloat16() for t in inputs(2, 8, 2, 9, 8, 64))
    tol = Tol(1e-5, 1e-4)
    steps = ("GQA (head h reads kv head h // group), scores / sqrt(head_dim), causal mask, fp32 softmax, @ v, "
             "heads side by side, * sigmoid(gate), then @ o_weight.T",
             "GQA（头 h 读键值头 h // group）、scores / sqrt(head_dim)、因果掩码、fp32 softmax、@ v、各头并排、"
             "* sigmoid(gate)，然后 @ o_weight.T")
    lab = ctx.label
    # General cases first, GQA's own case last: a mistake elsewhere (the heads merged without the
    # transpose) fails a case whose `about` is not the GQA mapping, which that learner got right.
    return [
        Case("gated_attention", ("as many kv heads as query heads (plain multi-head)", "键值头和查询头一样多（普通多头）"),
             mha, attention_expected(*mha), tol, about=steps),
        Case("gated_attention", ("one token: it can only read itself", "一个词元：它只能读它自己"), one,
             attention_expected(*one), tol, about=steps),
        Case("gated_attention", (f"{lab} config: heads {H}, kv heads {KV}, head_dim {D}, layer {L}'s o_proj",
                                 f"{ctx.label_of}配置：头 {H} 个、键值头 {KV} 个、head_dim {D}，第 {L} 层的 o_proj"),
             model, attention_expected(*model), tol, about=steps),
        Case("gated_attention", ("8 heads sharing 2 kv heads, batch 2, 9 tokens", "8 个头共享 2 个键值头，批次 2，9 个词元"),
             gqa, attention_expected(*gqa), tol,
             about=("query heads 0-3 read kv head 0, heads 4-7 kv head 1 (repeat_interleave, not repeat)",
                    "查询头 0-3 读键值头 0，4-7 读键值头 1（repeat_interleave，不是 repeat）")),
        Case("gated_attention", ("bf16 inputs: the result in q's dtype", "bf16 的输入：结果是 q 的类型"), bf16,
             attention_expected(*(t.float() for t in bf16)).bfloat16(), BF16_TOL_209,
             about=("return q's dtype (bf16 here); computing in bf16 or in fp32 and rounding once are both within "
                    "the tolerance", "返回 q 的类型（这里是 bf16）；在 bf16 中计算，或在 fp32 中计算再舍入一次，都在容差之内")),
    ]


# bf16 results: no bit rule. Every correct reading of the statement (the softmax alone in fp32 with the
# rest in bf16, everything in fp32 and one rounding, F.scaled_dot_product_attention in bf16) was measured
# at most 0.0078 (one bf16 step at 1-2) from fp32-then-round-once on these shapes, and only about 40% of
# its values bit for bit equal to it (tests/test_judge_mistakes.py runs the readings).
BF16_TOL_209 = Tol(0.02, 0.02)


def _stayed_fp32(case, got):
    """A result right in value but left in fp32 (or another dtype) for inputs of another dtype."""
    torch = _torch()
    e = case.expected
    return (isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != e.dtype
            and got.shape == e.shape and _close_value(e, got.to(e.dtype), case.tol))


def _close_value(expected, got, tol):
    from practice._judge.compare import close
    return close(expected, got, tol)


def _hides_itself(case, got):
    """The mask also covers the diagonal: filled with -inf, the first token's row is all -inf (NaN);
    filled with a large finite number, that row averages every value, later tokens included."""
    q = case.args[0]
    tol = case.tol
    fills = (float("-inf"), -1e9, float(_torch().finfo(q.dtype).min))
    return any(_close_value(_attention_mistake(diagonal=0, fill=f)(*case.args), got, tol) for f in fills)


DIAGNOSES_209 = [
    Diagnosis("stayed_fp32", "gated_attention",
              ("looks like the result stayed in fp32: return q's dtype (.to(q.dtype) at the end)",
               "看起来结果停留在了 fp32：返回 q 的类型（最后 .to(q.dtype)）"), test=_stayed_fp32),
    Diagnosis("no_transpose", "gated_attention",
              ("looks like the heads were put side by side without the transpose: out is (batch, heads, seq, head_dim), "
               "so out.transpose(1, 2) before .reshape(batch, seq, heads * head_dim), else the rows mix tokens and heads",
               "看起来各头并排之前没有转置：out 的形状是 (batch, heads, seq, head_dim)，要先 out.transpose(1, 2) 再"
               " .reshape(batch, seq, heads * head_dim)，否则每一行混合了不同的词元和头"),
              mistake=_attention_mistake(transpose=False), hint=2),
    Diagnosis("reads_next_token", "gated_attention",
              ("looks like the mask starts one diagonal too late: each token also read the next one; mask the keys "
               "after the query, triu(1) (triu(2) leaves the next token visible)",
               "看起来掩码晚了一条对角线：每个词元还读到了下一个词元；应当遮住查询之后的所有键，用 triu(1)"
               "（triu(2) 会让下一个词元可见）"),
              mistake=_attention_mistake(diagonal=2), hint=1),
    Diagnosis("hides_itself", "gated_attention",
              ("looks like the mask also hides each token itself (triu(0) or tril(-1) instead of triu(1)): the first "
               "token then has nothing to read (NaN); a query reads its own position and the earlier ones",
               "看起来掩码把每个词元自己也遮住了（用了 triu(0) 或 tril(-1)，而不是 triu(1)）：第一个词元就没有可读的了"
               "（NaN）；查询读它自己的位置和之前的位置"),
              test=_hides_itself, hint=1),
    Diagnosis("no_mask", "gated_attention",
              ("looks like there is no causal mask: each token also read the tokens after it; set the scores of later "
               "keys to -inf before the softmax",
               "看起来没有因果掩码：每个词元也读了它之后的词元；softmax 之前把之后的键的分数设为 -inf"),
              mistake=_attention_mistake(mask=False), hint=1),
    Diagnosis("kv_order", "gated_attention",
              ("looks like the kv heads were repeated in the wrong order (0, 1, 0, 1, ...): query head h reads kv head "
               "h // group, so use repeat_interleave",
               "看起来键值头重复的顺序错了（0, 1, 0, 1, ...）：查询头 h 读键值头 h // group，请用 repeat_interleave"),
              mistake=_attention_mistake(kv="repeat"), hint=0),
    Diagnosis("gate_after_o_proj", "gated_attention",
              ("looks like the gate was applied after o_proj: multiply the heads' output by sigmoid(gate) first, "
               "then apply o_weight",
               "看起来门用在了 o_proj 之后：先把各头的输出乘 sigmoid(gate)，再乘 o_weight"),
              mistake=_attention_mistake(gate_first=False), hint=2),
    Diagnosis("no_scale", "gated_attention",
              ("looks like the scores were not divided by sqrt(head_dim)", "看起来分数没有除以 sqrt(head_dim)"),
              mistake=_attention_mistake(scale=None), hint=1),
    Diagnosis("scale_head_dim", "gated_attention",
              ("looks like the scores were divided by head_dim: the scale is 1 / sqrt(head_dim)",
               "看起来分数除以了 head_dim：缩放是 1 / sqrt(head_dim)"),
              mistake=_attention_mistake(scale="head_dim"), hint=1),
    Diagnosis("gate_without_sigmoid", "gated_attention",
              ("looks like the heads' output was multiplied by gate itself: the gate is sigmoid(gate), between 0 and 1",
               "看起来各头的输出直接乘了 gate：门是 sigmoid(gate)，在 0 和 1 之间"),
              mistake=_attention_mistake(sigmoid=False), hint=2),
]


# ------------------------------------------------------------------------------------------ registry

# The chapter that teaches each exercise (the list and the page show it).
TAUGHT_IN = {"207": 4, "208": 5, "209": 6}

EXERCISES = [
    Exercise("207", "rope", ("RoPE with partial rotation", "带部分旋转的 RoPE"), "medium", True,
             ("rope_frequencies", "apply_rope"),
             [("rotary_dim = int(head_dim * partial_rotary_factor); the frequencies are 1 / theta ** (torch.arange(0, "
               "rotary_dim, 2).float() / rotary_dim).",
               "rotary_dim = int(head_dim * partial_rotary_factor)；频率是 1 / theta ** (torch.arange(0, rotary_dim, 2)"
               ".float() / rotary_dim)。"),
              ("angles = positions.float()[:, None] * inv_freq; cos and sin of torch.cat((angles, angles), -1) line up "
               "with the rotate-half layout.",
               "angles = positions.float()[:, None] * inv_freq；torch.cat((angles, angles), -1) 的 cos 和 sin 正好对应"
               " rotate-half 的排列。"),
              ("On the first r entries h: h * cos + cat(-h2, h1) * sin, with h1, h2 the two halves; then cat the "
               "untouched rest back.",
               "对前 r 个数 h：h * cos + cat(-h2, h1) * sin，h1、h2 是前后两半；再把没动的其余部分拼回去。")],
             cases_207, DIAGNOSES_207,
             {"207_all_dims.py": "all_dims", "207_exponent_head_dim.py": "exponent_head_dim",
              "207_interleaved.py": "interleaved", "207_backwards.py": "backwards",
              "207_rotated_in_bf16.py": "rotated_in_bf16", "207_half_head_frequencies.py": "half_head_frequencies",
              "207_half_head_pairs.py": "half_head_pairs"}),
    Exercise("208", "swiglu_mlp", ("The SwiGLU MLP", "SwiGLU MLP"), "easy", True, ("swiglu_mlp",),
             [("Three matmuls without bias: x @ gate_weight.T, x @ up_weight.T, and h @ down_weight.T.",
               "三次没有偏置的矩阵乘法：x @ gate_weight.T、x @ up_weight.T、h @ down_weight.T。"),
              ("h = F.silu(gate) * up: silu goes on the gate projection, and multiplies the up projection elementwise.",
               "h = F.silu(gate) * up：silu 用在 gate 投影上，再与 up 投影逐元素相乘。")],
             cases_208, DIAGNOSES_208,
             {"208_silu_on_up.py": "silu_on_up", "208_sigmoid.py": "sigmoid", "208_relu.py": "relu",
              "208_gelu.py": "gelu", "208_silu_of_product.py": "silu_of_product"},
             may_modify_inputs=True),
    Exercise("209", "gated_attention", ("Causal attention with GQA and the output gate", "带 GQA 和输出门的因果注意力"),
             "medium", True, ("gated_attention",),
             [("k.repeat_interleave(heads // kv_heads, dim=1) gives every query head its kv head (h // group).",
               "k.repeat_interleave(heads // kv_heads, dim=1) 让每个查询头得到它的键值头（h // group）。"),
              ("scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim); masked_fill the upper triangle "
               "(torch.ones(T, T, dtype=torch.bool).triu(1)) with -inf; softmax in fp32 over the last dimension.",
               "scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)；用 -inf 填上三角"
               "（torch.ones(T, T, dtype=torch.bool).triu(1)）；在 fp32 中对最后一维做 softmax。"),
              ("(weights @ v).transpose(1, 2).reshape(B, T, H * D) * torch.sigmoid(gate), and only then @ o_weight.T.",
               "(weights @ v).transpose(1, 2).reshape(B, T, H * D) * torch.sigmoid(gate)，然后才 @ o_weight.T。")],
             cases_209, DIAGNOSES_209,
             {"209_no_mask.py": "no_mask", "209_kv_order.py": "kv_order",
              "209_gate_after_o_proj.py": "gate_after_o_proj", "209_no_scale.py": "no_scale",
              "209_scale_head_dim.py": "scale_head_dim", "209_gate_without_sigmoid.py": "gate_without_sigmoid",
              "209_stayed_fp32.py": "stayed_fp32", "209_no_transpose.py": "no_transpose",
              "209_reads_next_token.py": "reads_next_token", "209_hides_itself.py": "hides_itself"}),
]
