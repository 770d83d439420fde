"""Exercises 220-222 (chapter 7, Gated DeltaNet): one step of the gated delta rule, the causal
depthwise convolution with its left padding, the decay and beta from the raw parameters.

Expected values come from float64 formulas written here (and, for the rule, from qwen/deltanet.py
on inputs made by the checkpoint's own first linear-attention layer): the real Qwen3.5-0.8B when
it is on disk, else the built-in tiny checkpoint.
"""
from practice._judge.exercises import Case, Diagnosis, Exercise, Tol


def _torch():
    import torch
    return torch


def _layer(ctx):
    """The checkpoint's first linear-attention layer, loaded strictly, and its index."""
    from qwen.deltanet import GatedDeltaNet
    from qwen.weights import load
    i = ctx.cfg.linear_attention_layers[0]
    return load(GatedDeltaNet(ctx.cfg), ctx.W, f"layers.{i}.linear_attn."), i


# ------------------------------------------------------------------------------------------ 220

def step64(S, k, v, g, beta):
    """One step of the gated delta rule in float64, written out (the judge's own formula)."""
    S, k, v, g, beta = (t.double() for t in (S, k, v, g, beta))
    S = S * g.exp()[..., None, None]                                  # forget
    read = (k[..., None] * S).sum(-2)                                 # k^T S: (batch, heads, dv)
    return (S + k[..., None] * (beta[..., None] * (v - read))[..., None, :]).float()


def read64(S, q):
    return (q.double()[..., None] * S.double()).sum(-2).float()      # S^T q


def cases_220(ctx):
    torch = _torch()
    from qwen.norm import l2norm
    gen = ctx.gen(220)
    B, H, dk, dv = 2, 3, 8, 4

    def unit(*shape):
        return l2norm(torch.randn(*shape, generator=gen))

    S = torch.randn(B, H, dk, dv, generator=gen)
    k, v = unit(B, H, dk), torch.randn(B, H, dv, generator=gen)
    g, beta = -torch.rand(B, H, generator=gen), torch.rand(B, H, generator=gen) * 0.8 + 0.1
    zero, one = torch.zeros(B, H), torch.ones(B, H)
    # a token as the checkpoint's layer makes it: q, k, v, g, beta from its own projections
    layer, i = _layer(ctx)
    with torch.no_grad():
        x = torch.randn(1, 3, ctx.cfg.hidden_size, generator=gen).to(layer.in_proj_qkv.weight.dtype)
        q_r, k_r, v_r, g_r, b_r = layer.rule_inputs(x)               # (1, heads, 3, ...)
        from qwen.deltanet import delta_rule_recurrent
        _, S_r = delta_rule_recurrent(q_r[:, :, :2], k_r[:, :, :2], v_r[:, :, :2], g_r[:, :, :2], b_r[:, :, :2])
    real = (S_r, k_r[:, :, 2], v_r[:, :, 2].float(), g_r[:, :, 2], b_r[:, :, 2])
    _, S_lib = delta_rule_recurrent(q_r[:, :, 2:], k_r[:, :, 2:], v_r[:, :, 2:], g_r[:, :, 2:], b_r[:, :, 2:], S_r)
    order = ("decay first (S * exp(g)), then read k^T S from the decayed state, then add k (beta * error)^T",
             "先衰减（S * exp(g)），再从衰减后的状态读 k^T S，最后加上 k (beta * 误差)^T")
    sq = torch.randn(B, H, dk, dk, generator=gen)
    q, q_sq = torch.randn(B, H, dk, generator=gen), torch.randn(B, H, dk, generator=gen)
    return [
        Case("delta_rule_step", ("random state, unit key, g in [-1, 0], beta in (0.1, 0.9)",
                                 "随机状态、单位长度的键，g 在 [-1, 0]，beta 在 (0.1, 0.9)"),
             (S, k, v, g, beta), step64(S, k, v, g, beta), about=order),
        Case("delta_rule_step", ("g = 0, beta = 1: afterwards reading k gives exactly v",
                                 "g = 0、beta = 1：写完后读 k 正好得到 v"),
             (S, k, v, zero, one), step64(S, k, v, zero, one),
             about=("with no decay and beta = 1 the whole error is written", "没有衰减且 beta = 1 时，整个误差都写进去")),
        Case("delta_rule_step", ("beta = 0: only the decay acts", "beta = 0：只有衰减起作用"),
             (S, k, v, g, zero), step64(S, k, v, g, zero),
             about=("nothing is written; S is only multiplied by exp(g)", "什么也不写；S 只乘以 exp(g)")),
        Case("delta_rule_step", ("g = -30: the old state is forgotten before the read",
                                 "g = -30：读之前旧状态就被忘掉了"),
             (S, k, v, torch.full((B, H), -30.0), beta), step64(S, k, v, torch.full((B, H), -30.0), beta),
             about=("the read must use the decayed state", "读必须用衰减后的状态")),
        Case("delta_rule_step", (f"{ctx.label}: the third token of layer {i}, from the state of the first two",
                                 f"{ctx.label}：第 {i} 层的第 3 个词元，从前两个词元的状态出发"),
             real, S_lib, Tol(1e-5, 1e-4),
             about=("k, v, g, beta as the layer makes them; expected from qwen/deltanet.py",
                    "k、v、g、beta 都由这一层算出；期望值来自 qwen/deltanet.py")),
        Case("read_state", ("a square state (dk = dv): S^T q, not S q", "方形的状态（dk = dv）：S^T q，不是 S q"),
             (sq, q_sq), read64(sq, q_sq),
             about=("keys index the rows of S, values its columns", "键对应 S 的行，值对应它的列")),
        Case("read_state", ("q (batch, heads, dk) reads S (batch, heads, dk, dv): S^T q, shape (batch, heads, dv)",
                            "q（batch, heads, dk）读 S（batch, heads, dk, dv）：S^T q，形状 (batch, heads, dv)"),
             (S, q), read64(S, q), about=("sum over the key dimension dk", "沿键的维度 dk 求和")),
    ]


def _read_first(S, k, v, g, beta):
    torch = _torch()
    error = beta[..., None] * (v - (k[..., None] * S).sum(-2))       # read from the state before the decay
    return S * torch.exp(g)[..., None, None] + k[..., None] * error[..., None, :]


def _after(S, k, v, g, beta):
    torch = _torch()
    S = S + k[..., None] * (beta[..., None] * (v - (k[..., None] * S).sum(-2)))[..., None, :]
    return S * torch.exp(g)[..., None, None]


def _decay_without_exp(S, k, v, g, beta):
    S = S * g[..., None, None]                                        # g <= 0: flips and scales S
    return S + k[..., None] * (beta[..., None] * (v - (k[..., None] * S).sum(-2)))[..., None, :]


def _beta_on_prediction(S, k, v, g, beta):
    S, k, v, g, beta = (t.double() for t in (S, k, v, g, beta))
    S = S * g.exp()[..., None, None]
    error = v - beta[..., None] * (k[..., None] * S).sum(-2)
    return (S + k[..., None] * error[..., None, :]).float()


MISTAKES_220 = {                   # two mistakes that give the same state once the old one is forgotten (g = -30)
    "no_beta": lambda S, k, v, g, beta: step64(S, k, v, g, _torch().ones_like(beta)),
    "beta_on_prediction": _beta_on_prediction,
}


def _only_220(name, case, got):
    """The result is this mistake's, and the other's differs on this case (else neither is named)."""
    mine = MISTAKES_220[name](*case.args)
    return _close(mine, got, case.tol) and all(
        other == name or not _close(m(*case.args), mine, case.tol) for other, m in MISTAKES_220.items())


DIAGNOSES_220 = [
    Diagnosis("decay_after_write", "delta_rule_step",
              ("looks like the decay was applied after the write: multiply S by exp(g) first, then read and write",
               "看起来衰减放在了写入之后：应当先把 S 乘以 exp(g)，再读、再写"), mistake=_after, hint=0),
    Diagnosis("read_before_decay", "delta_rule_step",
              ("looks like k^T S was read from the state before the decay: decay S first, then read the prediction from it",
               "看起来 k^T S 是从衰减之前的状态读的：应当先衰减 S，再从它读出预测"), mistake=_read_first, hint=1),
    Diagnosis("decay_without_exp", "delta_rule_step",
              ("looks like S was multiplied by g itself: g is the log of the decay, the factor is exp(g) (in (0, 1])",
               "看起来 S 乘的是 g 本身：g 是衰减的对数，衰减因子是 exp(g)（在 (0, 1] 之间）"),
              mistake=_decay_without_exp, hint=0),
    Diagnosis("no_beta", "delta_rule_step",
              ("looks like beta is missing: the error written is beta * (v - k^T S)",
               "看起来漏了 beta：写入的误差是 beta * (v - k^T S)"),
              test=lambda case, got: _only_220("no_beta", case, got)),
    Diagnosis("beta_on_prediction", "delta_rule_step",
              ("looks like beta multiplied the prediction, v - beta * k^T S: it multiplies the whole error, "
               "beta * (v - k^T S), how much of the correction is written",
               "看起来 beta 乘在了预测上，v - beta * k^T S：它乘的是整个误差 beta * (v - k^T S)，即写入多少修正"),
              test=lambda case, got: _only_220("beta_on_prediction", case, got), hint=2),
    Diagnosis("no_delta", "delta_rule_step",
              ("looks like plain linear attention: you added k (beta v)^T; the delta rule writes the error v - k^T S",
               "看起来是普通的线性注意力：你加的是 k (beta v)^T；delta 规则写入的是误差 v - k^T S"),
              mistake=lambda S, k, v, g, beta: S * g.exp()[..., None, None] + k[..., None] * (beta[..., None] * v)[..., None, :]),
    Diagnosis("read_transposed", "read_state",
              ("looks like S q instead of S^T q: q meets the key dimension (the rows of S)",
               "看起来算成了 S q 而不是 S^T q：q 对应键的维度（S 的行）"),
              mistake=lambda S, q: (S * q[..., None, :]).sum(-1)),
]


# ------------------------------------------------------------------------------------------ 221

def conv64(x, weight, past=None):
    """y[t] = sum_j weight[:, j] * xp[t + j], xp = (past or K-1 zeros) then x, in float64."""
    torch = _torch()
    K = weight.shape[-1]
    B, T, C = x.shape
    left = torch.zeros(B, K - 1, C, dtype=torch.float64) if past is None else past.double()
    xp = torch.cat([left, x.double()], 1)                            # (B, K-1+T, C)
    w = weight.double()
    return sum(w[:, j] * xp[:, j:j + T] for j in range(K)).to(x.dtype)


def cases_221(ctx):
    torch = _torch()
    gen = ctx.gen(221)
    layer, i = _layer(ctx)
    w_real = layer.conv1d.weight.detach()[:, 0].float()              # (channels, 4): q, k and v channels
    C = w_real.shape[0]
    w4 = torch.randn(6, 4, generator=gen)
    x = torch.randn(2, 10, 6, generator=gen)
    short = torch.randn(1, 2, 6, generator=gen)
    past = torch.randn(2, 3, 6, generator=gen)
    one = torch.randn(2, 1, 6, generator=gen)
    w2 = torch.randn(5, 2, generator=gen)
    x2 = torch.randn(3, 6, 5, generator=gen)
    nc = torch.randn(2, 6, 9, generator=gen).transpose(1, 2)         # (2, 9, 6), not contiguous
    xr = torch.randn(1, 7, C, generator=gen)
    left = ("the window ends at the current token: pad kernel-1 zeros on the left, none on the right",
            "窗口以当前词元结束：左边补 kernel-1 个零，右边不补")
    return [
        Case("causal_conv1d", ("10 tokens, 6 channels, kernel 4", "10 个词元、6 个通道、卷积核 4"), (x, w4),
             conv64(x, w4), about=left),
        Case("causal_conv1d", (f"{ctx.label}: layer {i}'s conv weights ({C} channels), 7 tokens",
                               f"{ctx.label}：第 {i} 层的卷积权重（{C} 个通道），7 个词元"), (xr, w_real),
             conv64(xr, w_real), about=left),
        Case("causal_conv1d", ("2 tokens, shorter than the kernel", "2 个词元，比卷积核还短"), (short, w4),
             conv64(short, w4), about=("the first tokens see zeros on their left", "最前面的词元左边看到的是零")),
        Case("causal_conv1d", ("with the 3 inputs before x given (past)", "给出 x 之前的 3 个输入（past）"), (x, w4, past),
             conv64(x, w4, past), about=("past replaces the zeros on the left", "past 代替左边的零")),
        Case("causal_conv1d", ("one new token and past: one step of generation", "一个新词元加 past：生成的一步"),
             (one, w4, past), conv64(one, w4, past),
             about=("the output for the new token mixes the 3 past inputs and itself", "新词元的输出混合了 3 个过去的输入和它自己")),
        Case("causal_conv1d", ("kernel 2", "卷积核为 2"), (x2, w2), conv64(x2, w2),
             about=("use weight.shape[-1], not 4", "用 weight.shape[-1]，不要写死 4")),
        Case("causal_conv1d", ("non-contiguous x", "不连续的 x"), (nc, w4), conv64(nc, w4),
             about=("a transposed view of shape (batch, seq, channels)", "形状为 (batch, seq, channels) 的转置视图")),
    ]


def _conv_padded(x, weight, lpad, rpad):
    torch = _torch()
    K = weight.shape[-1]
    B, T, C = x.shape
    xp = torch.cat([torch.zeros(B, lpad, C), x.float(), torch.zeros(B, rpad, C)], 1)
    return sum(weight.float()[:, j] * xp[:, j:j + T] for j in range(K)).to(x.dtype)


def _conv_late(x, weight, past=None):
    """kernel zeros on the left instead of kernel-1 (the window ends at the token before); with past given,
    the past rows are used as they should be."""
    if past is not None:
        return conv64(x, weight, past)
    return _conv_padded(x, weight, weight.shape[-1], 0)


def _conv_silu(x, weight, past=None):
    torch = _torch()
    y = conv64(x, weight, past).double()
    return (y * torch.sigmoid(y)).to(x.dtype)


DIAGNOSES_221 = [
    Diagnosis("one_token_late", "causal_conv1d",
              ("looks like kernel zeros were put on the left instead of kernel-1 (off by one): each output is then "
               "one token late, its window ends at the token before; the last tap weight[:, -1] meets token t itself",
               "看起来左边补了 kernel 个零而不是 kernel-1 个（差一）：每个输出就晚了一个词元，窗口在前一个词元结束；"
               "最后一个抽头 weight[:, -1] 应当对应词元 t 自己"),
              mistake=_conv_late, hint=1),
    Diagnosis("silu_applied", "causal_conv1d",
              ("looks like silu was applied to the convolution's output: this function is the convolution alone "
               "(the layer applies silu after it)",
               "看起来对卷积的输出做了 silu：这个函数只做卷积（这一层之后才做 silu）"),
              mistake=_conv_silu),
    Diagnosis("past_reversed", "causal_conv1d",
              ("looks like past was used in reverse order: past[:, 0] is the oldest input, past[:, -1] the one just "
               "before x, so torch.cat([past, x], 1) as it is",
               "看起来 past 的顺序反了：past[:, 0] 是最早的输入，past[:, -1] 是紧挨着 x 之前的那个，"
               "所以直接 torch.cat([past, x], 1)"),
              mistake=lambda x, weight, past=None: conv64(x, weight, None if past is None else past.flip(1)), hint=1),
    Diagnosis("right_padding", "causal_conv1d",
              ("looks like the zeros were padded on the right: each output then sees later tokens; pad kernel-1 on the left",
               "看起来零补在了右边：这样每个输出会看到后面的词元；应当在左边补 kernel-1 个零"),
              mistake=lambda x, weight, past=None: _conv_padded(x, weight, 0, weight.shape[-1] - 1), hint=1),
    Diagnosis("centred", "causal_conv1d",
              ("looks like 'same' padding (zeros on both sides): the window must end at the current token",
               "看起来用了 'same' 填充（两边都补零）：窗口必须以当前词元结束"),
              mistake=lambda x, weight, past=None: _conv_padded(x, weight, (weight.shape[-1] - 1) // 2,
                                                                 weight.shape[-1] // 2), hint=1),
    Diagnosis("flipped_kernel", "causal_conv1d",
              ("looks like the kernel is reversed: weight[:, -1] multiplies the current token, weight[:, 0] the oldest",
               "看起来卷积核反了：weight[:, -1] 乘当前词元，weight[:, 0] 乘最早的那个"),
              mistake=lambda x, weight, past=None: conv64(x, weight.flip(-1), past), hint=2),
    Diagnosis("ignores_past", "causal_conv1d",
              ("looks like past was ignored: when it is given, it takes the place of the zeros on the left",
               "看起来忽略了 past：给出 past 时，它代替左边的零"),
              test=lambda case, got: len(case.args) > 2 and _close(conv64(case.args[0], case.args[1]), got), hint=1),
]


def _close(expected, got, tol=None):
    from practice._judge.compare import close
    return close(expected, got, tol)


# ------------------------------------------------------------------------------------------ 222

def decay64(a, A_log, dt_bias):
    torch = _torch()
    x = a.double() + dt_bias.double()
    softplus = torch.where(x > 20, x, torch.log1p(torch.exp(x.clamp(max=20))))
    return (-torch.exp(A_log.double()) * softplus).float()


def cases_222(ctx):
    torch = _torch()
    gen = ctx.gen(222)
    layer, i = _layer(ctx)
    nv = ctx.cfg.linear_num_value_heads
    with torch.no_grad():
        x = torch.randn(2, 5, ctx.cfg.hidden_size, generator=gen).to(layer.in_proj_a.weight.dtype)
        a_r, b_r = layer.in_proj_a(x), layer.in_proj_b(x)            # (2, 5, heads), in the weights' dtype
    A_log, dt_bias = layer.A_log.detach(), layer.dt_bias.detach()    # fp32 and bf16 in the real checkpoint
    a = torch.randn(3, 4, 6, generator=gen) * 3
    A6, dt6 = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    big, small = torch.full((1, 2, 6), 15.0) + torch.rand(1, 2, 6, generator=gen), torch.full((1, 2, 6), -15.0)
    b = torch.randn(4, 6, generator=gen) * 3
    L = ctx.label
    formula = ("g = -exp(A_log) * softplus(a + dt_bias), in fp32", "g = -exp(A_log) * softplus(a + dt_bias)，在 fp32 中计算")
    return [
        Case("log_decay", (f"{L}: layer {i}'s A_log and dt_bias, a = in_proj_a(x)",
                           f"{L}：第 {i} 层的 A_log 和 dt_bias，a = in_proj_a(x)"),
             (a_r, A_log, dt_bias), decay64(a_r, A_log, dt_bias),
             about=("a and dt_bias come in the weights' dtype: upcast before adding", "a 和 dt_bias 是权重的类型：先升到 fp32 再相加")),
        Case("log_decay", ("random a, A_log, dt_bias (6 heads)", "随机的 a、A_log、dt_bias（6 个头）"), (a, A6, dt6),
             decay64(a, A6, dt6), about=formula),
        Case("log_decay", ("a + dt_bias around 15: softplus(x) is about x", "a + dt_bias 约为 15：softplus(x) 约等于 x"),
             (big, A6, torch.zeros(6)), decay64(big, A6, torch.zeros(6)), about=formula),
        Case("log_decay", ("a = -15: almost no decay (g near 0, still negative)", "a = -15：几乎不衰减（g 接近 0，但仍是负的）"),
             (small, A6, dt6), decay64(small, A6, dt6), Tol(1e-9, 1e-4),
             about=("softplus of a very negative number is tiny but positive", "非常负的数的 softplus 很小，但是正的")),
        Case("write_strength", (f"{L}: b = in_proj_b(x) of layer {i}", f"{L}：第 {i} 层的 b = in_proj_b(x)"), (b_r,),
             torch.sigmoid(b_r.double()).float(), Tol(0, 4e-3),
             about=("beta = sigmoid(b), returned in fp32 (rounding to b's dtype first is within the tolerance)",
                    "beta = sigmoid(b)，以 fp32 返回（先舍入到 b 的类型也在容差之内）")),
        Case("write_strength", ("random fp32 b, including large magnitudes", "随机的 fp32 b，包括很大的值"), (b,),
             torch.sigmoid(b.double()).float(), about=("beta lies in (0, 1)", "beta 在 (0, 1) 之间")),
    ]


def _naive_softplus(a, A_log, dt_bias):
    torch = _torch()
    x = a.float() + dt_bias.float()
    return -A_log.float().exp() * torch.log(1 + torch.exp(x))      # 1 + exp(x) rounds away exp(x)'s digits


def _bf16_softplus(case, got):
    """a + dt_bias and softplus in the inputs' own dtype. Only a mistake where that dtype is below fp32:
    on fp32 inputs it is the right formula, and its atol (1e-7) would match any small wrong g there
    (the a = -15 case's g is about -6e-8), naming bf16 for a learner who did upcast."""
    torch = _torch()
    a, A_log, dt_bias = case.args
    if torch.promote_types(a.dtype, dt_bias.dtype) == torch.float32:
        return False
    mistake = -A_log.float().exp() * torch.nn.functional.softplus(a + dt_bias).float()
    return _close(mistake, got, Tol(1e-7, 1e-6))


def _bf16_add(case, got):
    """a + dt_bias in the inputs' own dtype (below fp32), the softplus in fp32: on fp32 inputs that is right."""
    torch = _torch()
    a, A_log, dt_bias = case.args
    if torch.promote_types(a.dtype, dt_bias.dtype) == torch.float32:
        return False
    mistake = -A_log.float().exp() * torch.nn.functional.softplus((a + dt_bias).float())
    return _close(mistake, got, Tol(1e-7, 1e-6)) and not _bf16_softplus(case, got)


def _dt_bias_outside(a, A_log, dt_bias):
    torch = _torch()
    x = a.double()
    softplus = torch.where(x > 20, x, torch.log1p(torch.exp(x.clamp(max=20))))
    return (-torch.exp(A_log.double()) * (softplus + dt_bias.double())).float()


DIAGNOSES_222 = [
    Diagnosis("returns_factor", "log_decay",
              ("looks like the decay factor exp(g) was returned: log_decay returns g itself, "
               "-exp(A_log) * softplus(a + dt_bias) (negative); the state is multiplied by exp(g) later",
               "看起来返回的是衰减因子 exp(g)：log_decay 返回 g 本身，即 -exp(A_log) * softplus(a + dt_bias)"
               "（负数）；状态之后才乘以 exp(g)"),
              mistake=lambda a, A_log, dt_bias: decay64(a, A_log, dt_bias).double().exp().float(), hint=1),
    Diagnosis("dt_bias_outside", "log_decay",
              ("looks like dt_bias was added outside the softplus: it goes inside, softplus(a + dt_bias)",
               "看起来 dt_bias 加在了 softplus 外面：它应当在里面，softplus(a + dt_bias)"),
              mistake=_dt_bias_outside, hint=1),
    Diagnosis("no_minus", "log_decay",
              ("looks like the minus sign is missing: g must be negative so that exp(g) < 1 shrinks the state",
               "看起来漏了负号：g 必须是负的，exp(g) < 1 才会让状态变小"),
              mistake=lambda a, A_log, dt_bias: -decay64(a, A_log, dt_bias)),
    Diagnosis("no_dt_bias", "log_decay",
              ("looks like dt_bias was left out: softplus(a + dt_bias)", "看起来漏了 dt_bias：应当是 softplus(a + dt_bias)"),
              mistake=lambda a, A_log, dt_bias: decay64(a, A_log, _torch().zeros_like(dt_bias))),
    Diagnosis("no_exp", "log_decay",
              ("looks like A_log was used as it is: the rate is exp(A_log) (A_log is its logarithm)",
               "看起来直接用了 A_log：速率是 exp(A_log)（A_log 是它的对数）"),
              mistake=lambda a, A_log, dt_bias: (-A_log.double() * (-decay64(a, _torch().zeros_like(A_log), dt_bias)
                                                                    ).double()).float()),
    Diagnosis("naive_softplus", "log_decay",
              ("looks like softplus was written as log(1 + exp(x)): for very negative x, 1 + exp(x) in fp32 keeps few "
               "of exp(x)'s digits (none below x = -17); use F.softplus(x) or torch.log1p(torch.exp(x))",
               "看起来 softplus 写成了 log(1 + exp(x))：x 很负时，fp32 的 1 + exp(x) 只留下 exp(x) 的几位有效数字"
               "（x < -17 时一位也不剩）；请用 F.softplus(x) 或 torch.log1p(torch.exp(x))"),
              mistake=_naive_softplus),
    Diagnosis("bf16_softplus", "log_decay",
              ("looks like a + dt_bias and softplus were computed in bf16: upcast a and dt_bias to fp32 first",
               "看起来 a + dt_bias 和 softplus 是在 bf16 中算的：先把 a 和 dt_bias 升到 fp32"),
              test=_bf16_softplus),
    Diagnosis("bf16_add", "log_decay",
              ("looks like a + dt_bias was added in bf16 and only then upcast ((a + dt_bias).float()): the sum is "
               "rounded to bf16 first; upcast a and dt_bias before adding, a.float() + dt_bias.float()",
               "看起来 a + dt_bias 是在 bf16 中相加、之后才升到 fp32 的（(a + dt_bias).float()）：和先被舍入到了 bf16；"
               "要在相加之前升精度，a.float() + dt_bias.float()"),
              test=_bf16_add),
]


# ------------------------------------------------------------------------------------------ registry

EXERCISES = [
    Exercise("220", "delta_rule_step", ("One step of the gated delta rule", "带门的 delta 规则的一步"),
             "medium", True, ("delta_rule_step", "read_state"),
             [("Decay first: S = S * exp(g)[..., None, None] (one number per batch and head).",
               "先衰减：S = S * exp(g)[..., None, None]（每个 batch 和头一个数）。"),
              ("Read the prediction from the decayed S: (k[..., None] * S).sum(-2), or k[..., None, :] @ S, shape "
               "(batch, heads, dv). The error is v minus it.",
               "从衰减后的 S 读出预测：(k[..., None] * S).sum(-2)，或 k[..., None, :] @ S，形状 (batch, heads, dv)。"
               "误差是 v 减去它。"),
              ("Write: S + k[..., None] * (beta[..., None] * error)[..., None, :] (an outer product per head). Read "
               "with q the same way as with k.",
               "写入：S + k[..., None] * (beta[..., None] * 误差)[..., None, :]（每个头一个外积）。用 q 读的方式和用 k 读一样。")],
             cases_220, DIAGNOSES_220,
             {"220_decay_after_write.py": "decay_after_write", "220_read_before_decay.py": "read_before_decay",
              "220_decay_without_exp.py": "decay_without_exp", "220_no_beta.py": "no_beta",
              "220_no_delta.py": "no_delta", "220_read_transposed.py": "read_transposed",
              "220_beta_on_prediction.py": "beta_on_prediction"}),
    Exercise("221", "causal_conv", ("The causal depthwise convolution", "因果逐通道卷积"),
             "medium", True, ("causal_conv1d",),
             [("Each channel has its own kernel weight[c]; channels never mix.", "每个通道有自己的卷积核 weight[c]；通道之间不混合。"),
              ("Put kernel-1 zeros (or past) before x along the sequence: xp = torch.cat([left, x], 1).",
               "沿序列在 x 前面放 kernel-1 个零（或 past）：xp = torch.cat([left, x], 1)。"),
              ("y[:, t] = sum over j of weight[:, j] * xp[:, t + j]: the last tap weight[:, -1] meets token t itself.",
               "y[:, t] = 对 j 求和 weight[:, j] * xp[:, t + j]：最后一个抽头 weight[:, -1] 对应词元 t 自己。")],
             cases_221, DIAGNOSES_221,
             {"221_right_padding.py": "right_padding", "221_centred.py": "centred",
              "221_flipped_kernel.py": "flipped_kernel", "221_ignores_past.py": "ignores_past",
              "221_one_token_late.py": "one_token_late", "221_silu_applied.py": "silu_applied",
              "221_past_reversed.py": "past_reversed"}),
    Exercise("222", "decay_and_beta", ("Decay and beta from the raw parameters", "从原始参数算衰减和 beta"),
             "easy", True, ("log_decay", "write_strength"),
             [("Upcast first: a.float(), A_log.float(), dt_bias.float().", "先升到 fp32：a.float()、A_log.float()、dt_bias.float()。"),
              ("g = -exp(A_log) * softplus(a + dt_bias): torch.nn.functional.softplus; A_log broadcasts over the last "
               "dimension (heads).",
               "g = -exp(A_log) * softplus(a + dt_bias)：用 torch.nn.functional.softplus；A_log 沿最后一维（头）广播。"),
              ("beta = torch.sigmoid(b.float()).", "beta = torch.sigmoid(b.float())。")],
             cases_222, DIAGNOSES_222,
             {"222_no_minus.py": "no_minus", "222_no_dt_bias.py": "no_dt_bias", "222_no_exp.py": "no_exp",
              "222_bf16_softplus.py": "bf16_softplus", "222_naive_softplus.py": "naive_softplus",
              "222_returns_factor.py": "returns_factor", "222_dt_bias_outside.py": "dt_bias_outside",
              "222_bf16_add.py": "bf16_add"}),
]
