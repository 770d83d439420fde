"""Another correct solution for 272: torch's in-place forms on copies (lerp for m, addcmul for v,
the step size with the bias corrections folded in, as torch.optim.AdamW writes it)."""
import math

import torch


def adamw_step(params, grads, state, lr, betas, eps, weight_decay, step):
    b1, b2 = betas
    out_p, out_s = {}, {}
    for name, p in params.items():
        p = p.clone()
        g = grads[name]
        m, v = state[name]["exp_avg"].clone(), state[name]["exp_avg_sq"].clone()
        if p.ndim > 1:
            p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(eps)
        p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))
        out_p[name], out_s[name] = p, {"exp_avg": m, "exp_avg_sq": v}
    return out_p, out_s
