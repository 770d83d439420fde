"""Another correct solution for 272: torch.optim.AdamW itself, with the two groups of decay_groups
and the state loaded in (its step counter is the number of steps already taken)."""
import torch


def adamw_step(params, grads, state, lr, betas, eps, weight_decay, step):
    live = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    groups = [{"params": [p for p in live.values() if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in live.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    for n, p in live.items():
        p.grad = grads[n].clone()
        opt.state[p] = {"step": torch.tensor(float(step - 1)), "exp_avg": state[n]["exp_avg"].clone(),
                        "exp_avg_sq": state[n]["exp_avg_sq"].clone()}
    opt.step()
    return ({n: p.detach() for n, p in live.items()},
            {n: {"exp_avg": opt.state[p]["exp_avg"], "exp_avg_sq": opt.state[p]["exp_avg_sq"]} for n, p in live.items()})
