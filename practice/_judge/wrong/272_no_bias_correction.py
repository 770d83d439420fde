"""Wrong on purpose (judge --verify): m and v used as they are, without dividing by 1 - b^step."""


def adamw_step(params, grads, state, lr, betas, eps, weight_decay, step):
    b1, b2 = betas
    new_params, new_state = {}, {}
    for name, p in params.items():
        g, m, v = grads[name], state[name]["exp_avg"], state[name]["exp_avg_sq"]
        p = p * (1 - lr * (weight_decay if p.dim() >= 2 else 0.0))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        new_params[name] = p - lr * m / (v.sqrt() + eps)
        new_state[name] = {"exp_avg": m, "exp_avg_sq": v}
    return new_params, new_state
