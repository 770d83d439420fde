"""Exercises 270-273 (chapters 14-16): the next-token loss, RMSNorm's backward, one AdamW step, LoRA.

Expected values come from the library or from PyTorch itself: qwen/train.py next_token_loss (270) and
RMSNormFunction's hand-written backward, run through autograd (271: tests/test_train.py checks it with
gradcheck); torch.optim.AdamW stepped with decay_groups' two groups (272: the course's AdamW gives the
same, tests/test_judge_exercises.py checks it); qwen/lora.py's LoRALinear and merge (273, which
tests/test_lora.py checks against PEFT). Inputs: synthetic logits and labels (270); rows of the
checkpoint's embedding table and its norm weights (271); the checkpoint's own tensors of each kind, a
matrix, the conv kernel, norms and per-head vectors, as fp32 master weights (272); slices of the
checkpoint's weights with a trained-size adapter, square ones where a transposed delta keeps its shape,
and the checkpoint's bf16 (273). Each known mistake gives a different answer on at least one case.
"""
import math

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol

TAUGHT_IN = {"270": 14, "271": 14, "272": 14, "273": 16}

ADAM_TOL = Tol(1e-8, 1e-5)         # parameters near 0 and moments of 1e-6: an atol of 1e-5 would hide them
LORA_BF16_TOL = Tol(ulps=1)        # a merge computed in fp32 and rounded once, against two roundings
LORA_FORWARD_BF16_TOL = Tol(0.01, 0.01)   # the base product rounded to bf16 before the sum (nn.Linear) or not: where
                                          # the adapter cancels the base, that is several steps of the small result


def _torch():
    import torch
    return torch


def _gap(a, b):
    """The mean absolute difference of two tensors (or of the tensors of two tuples), in fp64."""
    torch = _torch()
    if isinstance(a, (tuple, list)):
        return sum(_gap(x, y) for x, y in zip(a, b))
    return (a.double() - b.double()).abs().mean().item() if isinstance(b, torch.Tensor) else math.inf


def _nearer(mistake):
    """A test: the result (failing: the judge checks that) is at least 4 times nearer `mistake(*args)` than
    the expected value. For a mistake of precision, whose exact rounding depends on the order of the
    learner's operations: the result need not equal one mistaken formula to the bit."""
    def test(case, got):
        if not _is_bf16(case.args[0]):
            return False
        return 4 * _gap(mistake(*case.args), got) < _gap(case.expected, got)
    return test


def _is_bf16(t):
    return getattr(t, "dtype", None) == _torch().bfloat16


# ------------------------------------------------------------------------------------------------ 270
def loss_expected(logits, labels, ignore_index=-100):
    from qwen.train import next_token_loss
    return next_token_loss(logits, labels, ignore_index)


def _loss(scores, target, counted, denominator=None):
    """-log_softmax(scores)[target] summed over `counted`, over its count (or `denominator`), fp32."""
    torch = _torch()
    logp = torch.log_softmax(scores, dim=-1)
    picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).float()
    total = -(picked * counted).sum()
    return total / (counted.sum() if denominator is None else denominator)


def _loss_mistake(kind):
    def mistake(logits, labels, ignore_index=-100):
        torch = _torch()
        if kind == "no_shift":                                    # position t's logits scored against label t
            scores, target = logits.float(), labels
        elif kind == "shifted_backwards":                         # logits[t + 1] against label t
            scores, target = logits[:, 1:].float(), labels[:, :-1]
        else:
            scores, target = logits[:, :-1].float(), labels[:, 1:]
        if kind == "bf16_log_softmax":                            # log_softmax in the logits' own dtype
            scores = logits[:, :-1]
        counted = target != ignore_index
        safe = target.clamp(min=0)
        if kind == "ignore_as_class":                             # every position scored, the ignored as a class
            wrapped = torch.where(target < 0, target + scores.shape[-1], target)
            return [_loss(scores, c, torch.ones_like(counted)) for c in (target.clamp(min=0), wrapped)]
        return _loss(scores, safe, counted)
    return mistake


def _mean_over_all(case, got):
    """The right sum over a denominator that counts the ignored positions (the shifted ones, or all)."""
    torch = _torch()
    logits, labels = case.args[0], case.args[1]
    ignore = case.args[2] if len(case.args) > 2 else -100
    counted = labels[:, 1:] != ignore
    if bool(counted.all()):
        return False
    total = case.expected.double() * counted.sum()
    return any(abs(float(got) - float(total / n)) <= 1e-5 * abs(float(total / n)) + 1e-5
               for n in (counted.numel(), labels.numel())) if isinstance(got, torch.Tensor) and got.numel() == 1 else False


def _ignore_as_class(case, got):
    from practice._judge.compare import close
    return any(close(m, got, case.tol) for m in _loss_mistake("ignore_as_class")(*case.args))


def _logits(g, shape, scale):
    torch = _torch()
    return torch.randn(*shape, generator=g) * scale


def cases_270(ctx):
    torch = _torch()
    g = ctx.gen(270)
    about = ("scores = logits[:, :-1].float(), targets = labels[:, 1:]; -log_softmax(scores)[target] summed over "
             "the targets != ignore_index, divided by how many there are",
             "scores = logits[:, :-1].float()，targets = labels[:, 1:]；对 target != ignore_index 的位置把 "
             "-log_softmax(scores)[target] 求和，再除以这些位置的个数")
    cases = []
    labels = torch.randint(0, 512, (2, 9), generator=g)
    labels[0, :4] = -100                                          # row 0: a prompt of 4 tokens, not scored
    labels[1, -2:] = -100                                         # row 1: two padding positions
    cases.append(Case("next_token_loss", ("2 x 9 x 512, fp32: a prompt (row 0) and padding (row 1) labelled -100",
                                          "2 x 9 x 512，fp32：提示词（第 0 行）和填充（第 1 行）标为 -100"),
                      (_logits(g, (2, 9, 512), 2.0), labels), None, about=about))
    labels = torch.randint(0, 300, (1, 6), generator=g)
    cases.append(Case("next_token_loss", ("1 x 6 x 300, fp32: every label counts", "1 x 6 x 300，fp32：每个标签都计入"),
                      (_logits(g, (1, 6, 300), 1.0), labels), None, about=about))
    pad = 999                                                     # the padding token's id: a real class
    labels = torch.randint(0, 999, (3, 7), generator=g)
    labels[0, -3:] = pad
    labels[2, -1:] = pad
    cases.append(Case("next_token_loss", ("3 x 7 x 1000, fp32, ignore_index=999 (the padding token's id, a real class)",
                                          "3 x 7 x 1000，fp32，ignore_index=999（填充词元的编号，是一个真实的类别）"),
                      (_logits(g, (3, 7, 1000), 2.0), labels, pad), None, about=about))
    labels = torch.randint(0, 2048, (2, 9), generator=g)
    labels[0, :3] = -100
    labels[1, -1] = -100
    cases.append(Case("next_token_loss", ("2 x 9 x 2048, bf16 logits (as the model gives them), scale 8",
                                          "2 x 9 x 2048，bf16 的 logits（模型给出的就是这样），幅度 8"),
                      (_logits(g, (2, 9, 2048), 8.0).bfloat16(), labels), None,
                      about=("log_softmax in fp32: logits[:, :-1].float() first. In bf16 a logit of 20 has steps of "
                             "0.125, and so has its log-probability",
                             "在 fp32 中做 log_softmax：先 logits[:, :-1].float()。在 bf16 中，20 左右的 logit 的步长是 "
                             "0.125，它的对数概率也是")))
    big = _logits(g, (1, 8, 64), 40.0)
    labels = torch.randint(0, 64, (1, 8), generator=g)
    cases.append(Case("next_token_loss", ("1 x 8 x 64, fp32 logits up to about 150: exp overflows",
                                          "1 x 8 x 64，fp32 的 logits 大到约 150：exp 会溢出"), (big, labels), None,
                      about=("torch.log_softmax subtracts the largest logit first; exp(150) is inf in fp32, and "
                             "log(softmax(x)) is -inf where a probability underflows to 0",
                             "torch.log_softmax 先减去最大的 logit；exp(150) 在 fp32 中是 inf，"
                             "而概率下溢成 0 的地方 log(softmax(x)) 是 -inf")))
    for case in cases:
        case.expected = loss_expected(*case.args)
    return cases


DIAGNOSES_270 = [
    Diagnosis("no_shift", "next_token_loss",
              ("looks like position t's logits were scored against label t: they predict the NEXT token, so drop the "
               "last position's logits and the first label, logits[:, :-1] against labels[:, 1:]",
               "看起来位置 t 的 logits 是和标签 t 比较的：它们预测的是下一个词元，所以去掉最后一个位置的 logits 和第一个"
               "标签，logits[:, :-1] 对 labels[:, 1:]"),
              mistake=_loss_mistake("no_shift"), hint=0),
    Diagnosis("shifted_backwards", "next_token_loss",
              ("looks like the shift went the other way (logits[:, 1:] against labels[:, :-1]): position t's logits "
               "predict label t + 1, so it is logits[:, :-1] against labels[:, 1:]",
               "看起来移位的方向反了（logits[:, 1:] 对 labels[:, :-1]）：位置 t 的 logits 预测的是标签 t + 1，"
               "所以是 logits[:, :-1] 对 labels[:, 1:]"),
              mistake=_loss_mistake("shifted_backwards"), hint=0),
    Diagnosis("mean_over_all", "next_token_loss",
              ("looks like the sum was divided by every position, the ignored ones included: divide by the number of "
               "labels that count, (targets != ignore_index).sum(), or a batch with a long prompt gets a smaller loss",
               "看起来总和除以的是所有位置的个数，包括被忽略的：要除以计入的标签个数 (targets != ignore_index).sum()，"
               "否则提示词长的批次损失会变小"),
              test=_mean_over_all, hint=1),
    Diagnosis("ignore_as_class", "next_token_loss",
              ("looks like the ignored positions were scored too, their label read as a class (F.cross_entropy "
               "without ignore_index=ignore_index: its default is -100, and here the padding id is ignored): mask "
               "them out of the sum and the count",
               "看起来被忽略的位置也计了分，它们的标签被当成了一个类别（F.cross_entropy 没有传 ignore_index=ignore_index："
               "它的默认值是 -100，而这里忽略的是填充词元的编号）：要把它们从总和和个数里都去掉"),
              test=_ignore_as_class, hint=1),
    Diagnosis("bf16_log_softmax", "next_token_loss",
              ("looks like the log-softmax ran in bf16 (the logits' dtype): convert first, logits[:, :-1].float(); in "
               "bf16 a log-probability near -20 is rounded to steps of 0.125",
               "看起来 log-softmax 是在 bf16（logits 的类型）中算的：先转换，logits[:, :-1].float()；在 bf16 中，"
               "-20 附近的对数概率按 0.125 的步长舍入"),
              test=_nearer(_loss_mistake("bf16_log_softmax")), hint=2),
]


# ------------------------------------------------------------------------------------------------ 271
def norm_backward_expected(x, weight, eps, grad_out):
    from qwen.train import rms_norm
    x, weight = x.detach().clone().requires_grad_(True), weight.detach().clone().requires_grad_(True)
    rms_norm(x, weight, eps).backward(grad_out)
    return x.grad, weight.grad


def _norm_backward_mistake(kind):
    def mistake(x, weight, eps, grad_out):
        torch = _torch()
        f = x.dtype if kind == "bf16_statistics" else torch.float32
        h, dy, w = x.to(f), grad_out.to(f), weight.to(f)
        r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        g = dy * (w if kind == "w_not_one_plus" else 1.0 + w)
        dx = r * g if kind == "no_mean_term" else r * (g - h * r.pow(2) * (g * h).mean(-1, keepdim=True))
        dw = (dy * h * r).reshape(-1, h.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype)
    return mistake


def cases_271(ctx):
    torch = _torch()
    g = ctx.gen(271)
    E = ctx.W["embed_tokens.weight"]
    ids = torch.randint(0, E.shape[0], (2, 6), generator=g)
    x = E[ids].float()                                            # (2, 6, hidden): real token vectors
    w = ctx.W["layers.0.input_layernorm.weight"].float()
    hidden = x.shape[-1]
    about = ("r = rsqrt(mean(x^2) + eps), g = grad_out * (1 + w); grad_x = r * (g - x * r^2 * mean(g * x)), "
             "grad_w = (grad_out * x * r) summed over every position",
             "r = rsqrt(mean(x^2) + eps)，g = grad_out * (1 + w)；grad_x = r * (g - x * r^2 * mean(g * x))，"
             "grad_w = (grad_out * x * r) 对所有位置求和")
    cases = [Case("rms_norm_backward", (f"embedding rows of 12 tokens (2 x 6 x {hidden}), layers.0.input_layernorm "
                                        f"({ctx.label}), fp32",
                                        f"12 个词元的嵌入行（2 x 6 x {hidden}），layers.0.input_layernorm（{ctx.label}），fp32"),
                  (x, w, ctx.cfg.rms_norm_eps, torch.randn(x.shape, generator=g)), None, about=about)]
    x = torch.randn(10, 48, generator=g) * 3 + 1                  # rows with a mean: x moves its own rms a lot
    cases.append(Case("rms_norm_backward", ("10 x 48, fp32, a weight far from 0 (scale 1 + w between 0 and 3)",
                                            "10 x 48，fp32，远离 0 的权重（缩放 1 + w 在 0 到 3 之间）"),
                      (x, torch.rand(48, generator=g) * 3 - 1, 1e-6, torch.randn(10, 48, generator=g)), None, about=about))
    x = torch.randn(3, 4, 32, generator=g) * 0.02
    cases.append(Case("rms_norm_backward", ("3 x 4 x 32, fp32, small values with eps=1e-3 (eps matters)",
                                            "3 x 4 x 32，fp32，很小的值，eps=1e-3（eps 起作用）"),
                      (x, torch.randn(32, generator=g) * 0.5, 1e-3, torch.randn(3, 4, 32, generator=g)), None, about=about))
    ids = torch.randint(0, E.shape[0], (2, 16), generator=g)
    wb = ctx.W["layers.0.post_attention_layernorm.weight"]
    cases.append(Case("rms_norm_backward", (f"2 x 16 x {hidden} embedding rows, bf16 (x, weight and grad_out), "
                                            "layers.0.post_attention_layernorm",
                                            f"2 x 16 x {hidden} 的嵌入行，bf16（x、weight 和 grad_out），"
                                            "layers.0.post_attention_layernorm"),
                      (E[ids].bfloat16().clone(), wb.bfloat16().clone(), ctx.cfg.rms_norm_eps,
                       torch.randn(2, 16, hidden, generator=g).bfloat16()), None,
                      about=("statistics and both gradients in fp32 (x.float(), grad_out.float(), weight.float()), each "
                             "gradient cast to its input's dtype once, at the end",
                             "统计量和两个梯度都在 fp32 中计算（x.float()、grad_out.float()、weight.float()），"
                             "每个梯度在最后只转回它的输入的类型一次")))
    for case in cases:
        case.expected = norm_backward_expected(*case.args)
    return cases


DIAGNOSES_271 = [
    Diagnosis("no_mean_term", "rms_norm_backward",
              ("looks like grad_x is r * grad_out * (1 + w) only: x also moves its own rms, so subtract "
               "x * r^2 * mean(g * x) from g first, grad_x = r * (g - x * r^2 * mean(g * x, -1))",
               "看起来 grad_x 只是 r * grad_out * (1 + w)：x 也会改变它自己的 rms，所以先从 g 里减去 "
               "x * r^2 * mean(g * x)，grad_x = r * (g - x * r^2 * mean(g * x, -1))"),
              mistake=_norm_backward_mistake("no_mean_term"), hint=1),
    Diagnosis("w_not_one_plus", "rms_norm_backward",
              ("looks like the gradient went through w, not through the scale 1 + w that the forward applies: "
               "g = grad_out * (1 + w)",
               "看起来梯度经过的是 w，而不是前向用的缩放 1 + w：g = grad_out * (1 + w)"),
              mistake=_norm_backward_mistake("w_not_one_plus"), hint=0),
    Diagnosis("bf16_statistics", "rms_norm_backward",
              ("looks like the statistics ran in bf16 (x's dtype): r and mean(g * x) lose their low bits, and "
               "g - x r^2 mean(g x) subtracts numbers close to each other. Compute in fp32 (x.float(), "
               "grad_out.float(), weight.float()), cast each gradient once at the end",
               "看起来统计量是在 bf16（x 的类型）中算的：r 和 mean(g * x) 丢了低位，而 g - x r^2 mean(g x) 是两个很接近的数"
               "相减。要在 fp32 中计算（x.float()、grad_out.float()、weight.float()），每个梯度在最后转换一次"),
              test=_nearer(_norm_backward_mistake("bf16_statistics")), hint=2),
]


# ------------------------------------------------------------------------------------------------ 272
ADAM_NAMES = ("layers.0.mlp.gate_proj.weight", "layers.0.linear_attn.conv1d.weight", "layers.0.input_layernorm.weight",
              "layers.0.linear_attn.dt_bias", "layers.0.linear_attn.A_log")


def _adam_params(ctx):
    """fp32 master copies of the checkpoint's tensors of each kind (at most 32 rows of the larger ones)."""
    return {n: ctx.W[n][:32].float().clone() for n in ADAM_NAMES}


def _adam_run(params, grads_per_step, lr, betas, eps, weight_decay):
    """torch.optim.AdamW on decay_groups' two groups (matrices and the conv kernel decay; vectors do not),
    stepped once per list of gradients. Returns [(params, state) before each step] + [the last after]."""
    torch = _torch()
    live = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    decay = [p for p in live.values() if p.dim() >= 2]
    plain = [p for p in live.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, foreach=False)

    def snapshot():
        state = {n: {"exp_avg": opt.state[p]["exp_avg"].clone(), "exp_avg_sq": opt.state[p]["exp_avg_sq"].clone()}
                 if p in opt.state else {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                 for n, p in live.items()}
        return {n: p.detach().clone() for n, p in live.items()}, state

    seen = [snapshot()]
    for grads in grads_per_step:
        for n, p in live.items():
            p.grad = grads[n].clone()
        opt.step()
        seen.append(snapshot())
    return seen


def _adam_mistake(kind):
    def mistake(params, grads, state, lr, betas, eps, weight_decay, step):
        torch = _torch()
        b1, b2 = betas
        new_p, new_s = {}, {}
        for n, p in params.items():
            g, m, v = grads[n], state[n]["exp_avg"], state[n]["exp_avg_sq"]
            wd = weight_decay if (p.dim() >= 2 or kind == "decay_everything") else 0.0
            if kind == "l2_decay":                                # Adam's L2: the decay added to the gradient
                g = g + wd * p
            else:
                p = p * (1 - lr * wd)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            if kind == "no_bias_correction":
                p = p - lr * m / (v.sqrt() + eps)
            else:
                p = p - lr * (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
            new_p[n], new_s[n] = p, {"exp_avg": m, "exp_avg_sq": v}
        return new_p, new_s
    return mistake


def cases_272(ctx):
    torch = _torch()
    g = ctx.gen(272)
    start = _adam_params(ctx)
    about = ("decay first, only for tensors of 2 or more dimensions: p * (1 - lr * weight_decay); m, v updated with "
             "the gradient as it is; p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)",
             "先衰减，只对 2 维及以上的张量：p * (1 - lr * weight_decay)；m、v 用原样的梯度更新；"
             "p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)")
    cases = []
    for (lr, betas, eps, wd), steps, label in (((1e-2, (0.9, 0.999), 1e-8, 0.1), (1, 2, 6), "lr 1e-2, betas (0.9, 0.999), "
                                                "eps 1e-8, weight_decay 0.1"),
                                               ((3e-3, (0.8, 0.95), 1e-6, 0.3), (4,), "lr 3e-3, betas (0.8, 0.95), "
                                                "eps 1e-6, weight_decay 0.3")):
        grads = [{n: torch.randn(p.shape, generator=g) * s for (n, p), s in zip(start.items(), (0.1, 0.3, 1.0, 0.5, 0.2))}
                 for _ in range(max(steps))]
        seen = _adam_run(start, grads, lr, betas, eps, wd)
        for step in steps:
            params, state = seen[step - 1]
            cases.append(Case("adamw_step", (f"step {step}, {label}, on the checkpoint's tensors ({ctx.label})",
                                             f"第 {step} 步，{label}，用检查点的张量（{ctx.label}）"),
                              (params, grads[step - 1], state, lr, betas, eps, wd, step), seen[step], ADAM_TOL,
                              about=about))
    return cases


DIAGNOSES_272 = [
    Diagnosis("no_bias_correction", "adamw_step",
              ("looks like m and v were used without the bias correction: they start at 0, so early on they are too "
               "small; divide by 1 - b1^step and 1 - b2^step (at step 1 that makes them g and g^2)",
               "看起来 m 和 v 没有做偏差修正：它们从 0 开始，所以起初太小；要除以 1 - b1^step 和 1 - b2^step"
               "（第 1 步时这使它们正好是 g 和 g^2）"),
              mistake=_adam_mistake("no_bias_correction"), hint=1),
    Diagnosis("l2_decay", "adamw_step",
              ("looks like weight_decay * p was added to the gradient (Adam's L2): AdamW's decay is decoupled, "
               "p * (1 - lr * weight_decay) on the weight itself, and m and v see the gradient alone",
               "看起来把 weight_decay * p 加到了梯度上（Adam 的 L2）：AdamW 的衰减是解耦的，直接作用在权重上 "
               "p * (1 - lr * weight_decay)，m 和 v 只看梯度本身"),
              mistake=_adam_mistake("l2_decay"), hint=0),
    Diagnosis("decay_everything", "adamw_step",
              ("looks like every parameter was decayed: norms' weights, biases and per-head vectors (1 dimension) get "
               "none, as in qwen/train.py decay_groups; only tensors of 2 or more dimensions decay",
               "看起来所有参数都做了衰减：范数的权重、偏置和每个头的向量（1 维）不衰减，与 qwen/train.py 的 decay_groups "
               "一样；只有 2 维及以上的张量衰减"),
              mistake=_adam_mistake("decay_everything"), hint=0),
]


# ------------------------------------------------------------------------------------------------ 273
def _lora_layer(W, A, B, alpha, r):
    from qwen.lora import LoRALinear
    torch = _torch()
    base = torch.nn.Linear(W.shape[1], W.shape[0], bias=False, dtype=W.dtype)
    layer = LoRALinear(base, r, alpha)
    with torch.no_grad():
        base.weight.copy_(W)
        layer.lora_A.weight.copy_(A)
        layer.lora_B.weight.copy_(B)
    return layer


def lora_forward_expected(x, W, A, B, alpha, r):
    torch = _torch()
    with torch.no_grad():
        return _lora_layer(W, A, B, alpha, r)(x)


def lora_merge_expected(W, A, B, alpha, r):
    from qwen.lora import merge
    torch = _torch()
    holder = torch.nn.Module()                                    # merge reads model.layers, as in the model
    holder.layers = torch.nn.ModuleList([torch.nn.Module()])
    holder.layers[0].proj = _lora_layer(W, A, B, alpha, r)
    return merge(holder).layers[0].proj.weight.detach().clone()


def _lora_forward_mistake(kind):
    def mistake(x, W, A, B, alpha, r):
        torch = _torch()
        s = alpha if kind == "scale_alpha" else alpha / r
        h = x.float()
        delta = h @ B @ A if kind == "delta_transposed" else h @ A.T @ B.T
        return ((x @ W.T).float() + s * delta).to(W.dtype)
    return mistake


def _lora_merge_mistake(kind):
    def mistake(W, A, B, alpha, r):
        s = alpha if kind == "scale_alpha" else alpha / r
        delta = A.T @ B.T if kind == "delta_transposed" else B @ A
        if kind == "bf16_add":                                    # rounded to W's dtype, then added there
            return W + (s * delta).to(W.dtype)
        return (W.float() + s * delta).to(W.dtype)
    return mistake


def _bf16_add(case, got):
    from practice._judge.compare import close
    return _is_bf16(case.args[0]) and close(_lora_merge_mistake("bf16_add")(*case.args), got, LORA_BF16_TOL)


def _adapter(g, out, inp, r, size):
    """A (r, in) at nn.Linear's init scale (uniform, std 1 / sqrt(3 in)), B (out, r) of a trained adapter:
    the entries of B @ A have a std of `size`, whatever in and r (one bf16 rounding of W + delta against
    two then differs in many weights, in the tiny checkpoint as in Qwen3.5)."""
    torch = _torch()
    A = (torch.rand(r, inp, generator=g) * 2 - 1) / math.sqrt(inp)
    B = torch.randn(out, r, generator=g) * size * math.sqrt(3 * inp / r)
    return A, B


def cases_273(ctx):
    torch = _torch()
    g = ctx.gen(273)
    W = ctx.W["layers.0.mlp.gate_proj.weight"][:96]                  # (96, hidden) bf16 (48 rows in the tiny one)
    out, hidden = W.shape
    n = min(64, hidden)
    square = ctx.W["layers.0.mlp.up_proj.weight"][:n, :n]            # (n, n): a transposed delta keeps its shape
    std = W.float().std().item() / 4                                # B @ A: a quarter of W's spread
    about_f = ("y = x W^T + (alpha / r) (x A^T) B^T: A (r, in) reads x, B (out, r) writes the output; the scale is "
               "alpha / r", "y = x W^T + (alpha / r) (x A^T) B^T：A (r, in) 读 x，B (out, r) 写输出；缩放是 alpha / r")
    about_m = ("W' = W + (alpha / r) B @ A, shape (out, in) like W, added in fp32 and rounded once to W's dtype",
               "W' = W + (alpha / r) B @ A，形状 (out, in) 与 W 相同，在 fp32 中相加，最后只舍入到 W 的类型一次")
    cases = []
    A, B = _adapter(g, out, hidden, 8, std)
    x = torch.randn(2, 5, hidden, generator=g)
    cases.append(Case("lora_forward", (f"x 2 x 5 x {hidden}, W: {out} rows of layers.0.mlp.gate_proj ({ctx.label}), fp32, "
                                       "r 8, alpha 16", f"x 2 x 5 x {hidden}，W：layers.0.mlp.gate_proj 的 {out} 行"
                                       f"（{ctx.label}），fp32，r 8，alpha 16"),
                      (x, W.float(), A, B, 16, 8), None, about=about_f))
    A, B = _adapter(g, n, n, 4, std)
    cases.append(Case("lora_forward", (f"x 7 x {n}, a square W ({n} x {n} of layers.0.mlp.up_proj), fp32, r 4, alpha 32",
                                       f"x 7 x {n}，方阵 W（layers.0.mlp.up_proj 的 {n} x {n}），fp32，r 4，alpha 32"),
                      (torch.randn(7, n, generator=g), square.float(), A, B, 32, 4), None, about=about_f))
    A, B = _adapter(g, out, hidden, 8, std)
    xb = (torch.randn(3, hidden, generator=g) / (4 * std * math.sqrt(hidden))).bfloat16()   # x W^T of about 1
    cases.append(Case("lora_forward", (f"x 3 x {hidden} and W in bf16 (a frozen bf16 base), A and B fp32, r 8, alpha 12",
                                       f"x 3 x {hidden} 和 W 是 bf16（冻结的 bf16 基座），A 和 B 是 fp32，r 8，alpha 12"),
                      (xb, W.clone(), A, B, 12, 8), None, LORA_FORWARD_BF16_TOL,
                      about=("the base's x @ W.T in bf16; the adapter's path in fp32 from x.float(); the sum in fp32 "
                             "(y.float() + ...), rounded once to bf16",
                             "基座的 x @ W.T 在 bf16 中算；适配器的路径从 x.float() 开始在 fp32 中算；在 fp32 中相加"
                             "（y.float() + ...），最后只舍入到 bf16 一次")))
    for case in cases:
        case.expected = lora_forward_expected(*case.args)
    merges = []
    A, B = _adapter(g, out, hidden, 8, std)
    merges.append(Case("lora_merge", (f"W: {out} rows of layers.0.mlp.gate_proj, fp32, r 8, alpha 16",
                                      f"W：layers.0.mlp.gate_proj 的 {out} 行，fp32，r 8，alpha 16"),
                       (W.float(), A, B, 16, 8), None, about=about_m))
    A, B = _adapter(g, n, n, 4, std)
    merges.append(Case("lora_merge", (f"a square W ({n} x {n}), fp32, r 4, alpha 32", f"方阵 W（{n} x {n}），fp32，r 4，alpha 32"),
                       (square.float(), A, B, 32, 4), None, about=about_m))
    A, B = _adapter(g, out, hidden, 8, std)
    merges.append(Case("lora_merge", (f"W: {out} rows of layers.0.mlp.gate_proj in the checkpoint's bf16, r 8, alpha 16",
                                      f"W：layers.0.mlp.gate_proj 的 {out} 行，检查点的 bf16，r 8，alpha 16"),
                       (W.clone(), A, B, 16, 8), None,
                       about=("the sum in fp32, W.float() + (alpha / r) B @ A, then .to(W.dtype) once: W + delta.to(bf16) "
                              "rounds twice", "在 fp32 中相加，W.float() + (alpha / r) B @ A，再 .to(W.dtype) 一次："
                              "W + delta.to(bf16) 会舍入两次")))
    for case in merges:
        case.expected = lora_merge_expected(*case.args)
    return cases + merges


DIAGNOSES_273 = [
    Diagnosis("scale_alpha", "lora_forward",
              ("looks like the update was scaled by alpha, not alpha / r: the scale is alpha / r (PEFT's scaling), so "
               "that a learning rate tuned at one rank still fits at another",
               "看起来更新乘的是 alpha，而不是 alpha / r：缩放是 alpha / r（PEFT 的 scaling），这样在一个秩上调好的学习率"
               "换了秩也还合适"),
              mistake=_lora_forward_mistake("scale_alpha"), hint=0),
    Diagnosis("scale_alpha", "lora_merge",
              ("looks like the merged delta was scaled by alpha, not alpha / r: W' = W + (alpha / r) B @ A",
               "看起来合并的增量乘的是 alpha，而不是 alpha / r：W' = W + (alpha / r) B @ A"),
              mistake=_lora_merge_mistake("scale_alpha"), hint=0),
    Diagnosis("delta_transposed", "lora_forward",
              ("looks like the update was x @ B @ A, the delta transposed (possible only for a square W): A (r, in) "
               "reads x first, (x @ A.T) @ B.T",
               "看起来更新算成了 x @ B @ A，增量被转置了（只有方阵 W 时形状才对得上）：先用 A (r, in) 读 x，"
               "(x @ A.T) @ B.T"),
              mistake=_lora_forward_mistake("delta_transposed"), hint=0),
    Diagnosis("delta_transposed", "lora_merge",
              ("looks like the delta was A.T @ B.T, that is (B @ A) transposed (a square W hides it in the shape): "
               "W's rows are outputs, so the delta is B @ A, (out, r) @ (r, in)",
               "看起来增量是 A.T @ B.T，也就是 (B @ A) 的转置（方阵 W 在形状上看不出来）：W 的行是输出，"
               "所以增量是 B @ A，(out, r) @ (r, in)"),
              mistake=_lora_merge_mistake("delta_transposed"), hint=1),
    Diagnosis("bf16_add", "lora_merge",
              ("looks like the delta was rounded to bf16 and added in bf16 (W + delta.to(W.dtype)): two roundings. "
               "Add in fp32, W.float() + (alpha / r) * B @ A, and round once, .to(W.dtype)",
               "看起来增量先舍入成 bf16 再在 bf16 中相加（W + delta.to(W.dtype)）：舍入了两次。"
               "要在 fp32 中相加，W.float() + (alpha / r) * B @ A，再舍入一次 .to(W.dtype)"),
              test=_bf16_add, hint=2),
]


EXERCISES = [
    Exercise("270", "next_token_loss", ("The next-token loss, shifted, with an ignore index",
                                        "下一个词元的损失：移位与忽略索引"), "easy", True, ("next_token_loss",),
             [("Position t's logits predict the token at t + 1: scores = logits[:, :-1], targets = labels[:, 1:] "
               "(labels are aligned with the input ids, as transformers' labels=).",
               "位置 t 的 logits 预测 t + 1 处的词元：scores = logits[:, :-1]，targets = labels[:, 1:]"
               "（labels 与输入的 id 对齐，和 transformers 的 labels= 一样）。"),
              ("counted = targets != ignore_index; the loss is -(log p of each counted target).sum() / counted.sum(): "
               "the ignored add nothing to the sum nor to the count. Gather with targets.clamp(min=0) (-100 is no "
               "index) and multiply by counted.",
               "counted = targets != ignore_index；损失是 -(每个计入的目标的 log p).sum() / counted.sum()：被忽略的既不加到"
               "总和里，也不计入个数。用 targets.clamp(min=0) 做 gather（-100 不是下标），再乘以 counted。"),
              ("torch.log_softmax(scores.float(), dim=-1): fp32 (the model's logits come in bf16), and log_softmax "
               "rather than log(softmax) (stable for large logits). Return the 0-d fp32 tensor.",
               "torch.log_softmax(scores.float(), dim=-1)：fp32（模型的 logits 是 bf16），用 log_softmax 而不是 "
               "log(softmax)（logits 很大时也稳定）。返回 0 维的 fp32 张量。")],
             cases_270, DIAGNOSES_270,
             {"270_no_shift.py": "no_shift", "270_mean_over_all.py": "mean_over_all",
              "270_bf16_log_softmax.py": "bf16_log_softmax", "270_ignore_as_class.py": "ignore_as_class",
              "270_shifted_backwards.py": "shifted_backwards"},
             uses_model=False),
    Exercise("271", "rmsnorm_backward", ("RMSNorm's backward by hand", "手写 RMSNorm 的反向传播"), "medium", True,
             ("rms_norm_backward",),
             [("The forward is y = x * r * (1 + w), r = 1 / sqrt(mean(x^2, -1) + eps): the scale is 1 + w "
               "(zero-centred), so the gradient reaching x / rms is g = grad_out * (1 + w).",
               "前向是 y = x * r * (1 + w)，r = 1 / sqrt(mean(x^2, -1) + eps)：缩放是 1 + w（零中心），所以到达 x / rms "
               "的梯度是 g = grad_out * (1 + w)。"),
              ("r depends on x too: grad_x = r * (g - x * r^2 * mean(g * x, -1, keepdim=True)). The second term is x "
               "moving its own rms. grad_w = (grad_out * x * r) summed over every position (all but the last dim).",
               "r 也依赖于 x：grad_x = r * (g - x * r^2 * mean(g * x, -1, keepdim=True))。第二项是 x 改变它自己的 rms。"
               "grad_w = (grad_out * x * r) 对所有位置（除最后一维外的所有维）求和。"),
              ("Compute in fp32 (x.float(), grad_out.float(), weight.float()); return grad_x.to(x.dtype) and "
               "grad_w.to(weight.dtype), as a tuple.",
               "在 fp32 中计算（x.float()、grad_out.float()、weight.float()）；返回 grad_x.to(x.dtype) 和 "
               "grad_w.to(weight.dtype)，作为一个 tuple。")],
             cases_271, DIAGNOSES_271,
             {"271_no_mean_term.py": "no_mean_term", "271_w_not_one_plus.py": "w_not_one_plus",
              "271_bf16_statistics.py": "bf16_statistics"}),
    Exercise("272", "adamw_step", ("One AdamW step", "AdamW 的一步"), "medium", True, ("adamw_step",),
             [("Weight decay only for tensors of 2 or more dimensions (matrices, the conv kernel): norms' weights, "
               "biases, A_log and dt_bias keep wd = 0, as qwen/train.py decay_groups. Decoupled: "
               "p * (1 - lr * wd), never wd * p added to the gradient.",
               "只对 2 维及以上的张量（矩阵、卷积核）做权重衰减：范数的权重、偏置、A_log 和 dt_bias 的 wd = 0，与 "
               "qwen/train.py 的 decay_groups 一样。解耦：p * (1 - lr * wd)，绝不把 wd * p 加到梯度上。"),
              ("m = b1 * m + (1 - b1) * g, v = b2 * v + (1 - b2) * g * g; then the bias correction: "
               "m_hat = m / (1 - b1 ** step), v_hat = v / (1 - b2 ** step).",
               "m = b1 * m + (1 - b1) * g，v = b2 * v + (1 - b2) * g * g；然后是偏差修正："
               "m_hat = m / (1 - b1 ** step)，v_hat = v / (1 - b2 ** step)。"),
              ("p = p - lr * m_hat / (sqrt(v_hat) + eps). New tensors, new dicts (do not modify the inputs); return "
               "(params, state) with state[name] = {'exp_avg': m, 'exp_avg_sq': v}.",
               "p = p - lr * m_hat / (sqrt(v_hat) + eps)。用新的张量、新的字典（不要修改输入）；返回 (params, state)，"
               "其中 state[name] = {'exp_avg': m, 'exp_avg_sq': v}。")],
             cases_272, DIAGNOSES_272,
             {"272_no_bias_correction.py": "no_bias_correction", "272_l2_decay.py": "l2_decay",
              "272_decay_everything.py": "decay_everything"}),
    Exercise("273", "lora", ("LoRA: the forward and the merge", "LoRA：前向与合并"), "easy", True,
             ("lora_forward", "lora_merge"),
             [("The scale is alpha / r (a float: 12 / 8 = 1.5), not alpha. A is (r, in), B is (out, r): the delta "
               "B @ A is (out, in), W's shape.",
               "缩放是 alpha / r（浮点数：12 / 8 = 1.5），不是 alpha。A 是 (r, in)，B 是 (out, r)：增量 B @ A 是 "
               "(out, in)，与 W 形状相同。"),
              ("lora_forward: x @ W.T in x's dtype, plus scale * (x.float() @ A.T) @ B.T in fp32; add in fp32 and "
               "cast to W's dtype. lora_merge: W.float() + scale * (B @ A).",
               "lora_forward：x @ W.T 用 x 的类型，加上在 fp32 中算的 scale * (x.float() @ A.T) @ B.T；在 fp32 中相加，"
               "再转成 W 的类型。lora_merge：W.float() + scale * (B @ A)。"),
              ("Round once: (W.float() + scale * B @ A).to(W.dtype). W + delta.to(torch.bfloat16) rounds the delta, "
               "then the sum: in bf16 that changes many weights by one step.",
               "只舍入一次：(W.float() + scale * B @ A).to(W.dtype)。W + delta.to(torch.bfloat16) 先舍入增量，"
               "再舍入和：在 bf16 中，这会让许多权重差一个最小间隔。")],
             cases_273, DIAGNOSES_273,
             {"273_scale_alpha.py": "scale_alpha", "273_delta_transposed.py": "delta_transposed",
              "273_bf16_add.py": "bf16_add"}),
]
