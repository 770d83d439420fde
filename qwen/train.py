"""Training by hand: the loss, one backward written out, the optimizer, clipping and the schedule.

Why: a language model learns by predicting each next token. The loss is that prediction's cross-entropy
over the tokens that count; its gradient (autograd, through every layer) says how to move each weight;
AdamW moves it; clipping keeps one bad batch from throwing the weights far; the schedule warms up, then decays.

The pieces, in the order a training step uses them:
    next_token_loss   logits and labels -> one fp32 number (the shift by one is inside)
    RMSNormFunction   RMSNorm's backward written by hand, the math autograd does for us
    SwiGLUFunction    the MLP's backward written by hand
    decay_groups      which parameters get weight decay (matrices) and which do not (norms, biases)
    AdamW             the update: two running moments, bias correction, decoupled weight decay
    clip_grad_norm    scale all gradients down together when their joint norm is too large
    lr_at             the learning rate at a step: linear warm-up, then a cosine down to a floor

Labels follow transformers' `labels=`: aligned with the input ids, so position t's logits predict label
t + 1. A label equal to ignore_index (the prompt, padding) adds nothing to the sum nor to the count.
"""
import math

import torch


def next_token_loss(logits, labels, ignore_index=-100):
    """logits (batch, seq, vocab), labels (batch, seq) -> the mean next-token cross-entropy, fp32.

    -log softmax(logits[t])[labels[t + 1]], averaged over the positions whose label counts. The
    log-softmax runs in fp32: in bf16, log(p) of a likely token is off by up to 2^-8 relative, and the
    sum over the vocabulary loses small terms. No counted label: 0 / 0, NaN, as torch's cross_entropy."""
    scores = logits[:, :-1].float()                                       # (batch, seq - 1, vocab)
    target = labels[:, 1:].to(scores.device)                              # (batch, seq - 1)
    counted = target != ignore_index                                      # (batch, seq - 1)
    logp = torch.log_softmax(scores, dim=-1)                              # log p over the vocabulary
    picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)   # (batch, seq - 1)
    total = -(picked * counted).sum()                                     # the ignored add 0
    return total / counted.sum()                                          # mean over counted tokens


class RMSNormFunction(torch.autograd.Function):
    """y = x * r * (1 + w), r = 1 / sqrt(mean(x^2) + eps): Qwen3.5's zero-centred RMSNorm.

    Backward, with g = dy * (1 + w) (the gradient reaching x / rms):
        dx = r * (g - x * r^2 * mean(g * x))        the second term: x moves its own rms too
        dw = sum over every position of dy * x * r
    Statistics in fp32 at least (float64 stays float64, for gradcheck); each gradient is cast
    to its input's dtype once."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)            # (..., 1)
        ctx.save_for_backward(x, weight, r)
        return (h * r * (1.0 + weight.to(h.dtype))).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, r = ctx.saved_tensors
        h, dy32 = x.to(r.dtype), dy.to(r.dtype)
        g = dy32 * (1.0 + weight.to(r.dtype))                                 # (..., dim)
        dx = r * (g - h * r.pow(2) * (g * h).mean(-1, keepdim=True))      # (..., dim)
        dw = (dy32 * h * r).reshape(-1, h.shape[-1]).sum(0)               # (dim,)
        return dx.to(x.dtype), dw.to(weight.dtype), None


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm with the hand-written backward: the same values as qwen.norm.RMSNorm."""
    return RMSNormFunction.apply(x, weight, eps)


class SwiGLUFunction(torch.autograd.Function):
    """y = (silu(x Wg^T) * (x Wu^T)) Wd^T: the MLP of qwen/mlp.py, with its backward by hand.

    With a = x Wg^T, b = x Wu^T, s = silu(a), m = s * b, and dm = dy Wd:
        dWd = dy^T m         db = dm * s          da = dm * b * silu'(a)
        dWu = db^T x         dWg = da^T x         dx = da Wg + db Wu
    silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))). Keeps x, a and b; s and m are recomputed."""

    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down):
        a, b = x @ w_gate.T, x @ w_up.T                                   # (..., intermediate) each
        ctx.save_for_backward(x, w_gate, w_up, w_down, a, b)
        return (torch.nn.functional.silu(a) * b) @ w_down.T              # (..., hidden)

    @staticmethod
    def backward(ctx, dy):
        x, w_gate, w_up, w_down, a, b = ctx.saved_tensors
        sig = torch.sigmoid(a)
        s = a * sig                                                       # silu(a)
        dm = dy @ w_down                                                  # (..., intermediate)
        da = dm * b * sig * (1 + a * (1 - sig))                           # through silu
        db = dm * s
        flat = lambda t: t.reshape(-1, t.shape[-1])                       # (positions, features)
        d_down = flat(dy).T @ flat(s * b)                                 # (hidden, intermediate)
        d_gate, d_up = flat(da).T @ flat(x), flat(db).T @ flat(x)         # (intermediate, hidden) each
        dx = da @ w_gate + db @ w_up                                      # (..., hidden)
        return dx, d_gate, d_up, d_down


def swiglu(x, w_gate, w_up, w_down):
    """The SwiGLU MLP with the hand-written backward: the same values as qwen.mlp.MLP."""
    return SwiGLUFunction.apply(x, w_gate, w_up, w_down)


def decay_groups(model, weight_decay):
    """Two parameter groups for AdamW: matrices (and the conv's kernel) decay; vectors do not.

    Weight decay pulls a weight towards 0: for a matrix, a mild preference for small weights. For a norm's
    w, a bias or a per-head constant (A_log, dt_bias) 0 is no better than any other value, and pulling
    there only fights the data. Frozen parameters (requires_grad False) are left out."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    plain = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov and Hutter), written out.

    For each parameter p with gradient g, at step t = 1, 2, ...:
        p <- p * (1 - lr * wd)                  decay: on the weight itself, not added to g
        m <- b1 m + (1 - b1) g                  a running mean of g
        v <- b2 v + (1 - b2) g^2                a running mean of g^2
        p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    Dividing by 1 - b^t undoes the start at zero (bias correction): at t = 1, m and v are g and g^2.
    Adding wd * p to g instead (Adam's L2) would be scaled down by sqrt(v): AdamW decays every weight alike."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:                                             # the moments start at zero
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t, m, v, g = state["step"], state["exp_avg"], state["exp_avg_sq"], p.grad
                p.mul_(1 - lr * wd)                                       # decoupled weight decay
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add_(eps)
                p.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))


def clip_grad_norm(params, max_norm):
    """Scale every gradient by min(1, max_norm / (norm + 1e-6)), norm = the 2-norm of all of them together
    (one long vector), so the update keeps its direction and only its length is capped. Returns the norm
    before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return norm


def lr_at(step, peak, warmup, total, floor=0.0):
    """The learning rate at step (0-based): linear warm-up to peak over `warmup` steps, then a cosine
    from peak down to floor at step `total`, and floor after.
    Why warm up: at the start Adam's v has seen few gradients, so its steps are erratic. Why come down:
    a smaller step at the end settles into a minimum that large steps keep jumping over."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))          # 0 -> 1
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * progress))
