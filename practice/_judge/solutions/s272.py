"""Reference solution for 272."""
import torch


def adamw_step(params, grads, state, lr, betas, eps, weight_decay, step):
    b1, b2 = betas
    new_params, new_state = {}, {}
    for name, p in params.items():
        g, m, v = grads[name], state[name]["exp_avg"], state[name]["exp_avg_sq"]
        wd = weight_decay if p.dim() >= 2 else 0.0               # matrices and the conv kernel; never vectors
        p = p * (1 - lr * wd)                                    # decoupled: on the weight itself
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)    # the bias correction
        new_params[name] = p - lr * m_hat / (v_hat.sqrt() + eps)
        new_state[name] = {"exp_avg": m, "exp_avg_sq": v}
    return new_params, new_state
