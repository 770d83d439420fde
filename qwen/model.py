"""The whole model, assembled from the parts of the chapters (grows with chapters 8-9).

For now: every normalization of the language model, built by walking the config.
"""
from qwen.norm import GatedRMSNorm, RMSNorm
from qwen.weights import load


def model_norms(cfg, W):
    """Every normalization of the language model, built by walking the config, loaded strictly.

    Returns {prefix: module}, e.g. "layers.0.input_layernorm" -> RMSNorm(1024). For 0.8B: 49
    RMSNorms on the residual stream (two per layer, one final), 12 per-head q/k RMSNorms (in
    each full-attention layer), 18 gated RMSNorms (in each linear-attention layer).
    """
    eps = cfg.rms_norm_eps
    norms = {}
    for i, kind in enumerate(cfg.layer_types):
        norms[f"layers.{i}.input_layernorm"] = RMSNorm(cfg.hidden_size, eps)
        norms[f"layers.{i}.post_attention_layernorm"] = RMSNorm(cfg.hidden_size, eps)
        if kind == "full_attention":
            norms[f"layers.{i}.self_attn.q_norm"] = RMSNorm(cfg.head_dim, eps)       # per head
            norms[f"layers.{i}.self_attn.k_norm"] = RMSNorm(cfg.head_dim, eps)
        else:
            norms[f"layers.{i}.linear_attn.norm"] = GatedRMSNorm(cfg.linear_value_head_dim, eps)
    norms["norm"] = RMSNorm(cfg.hidden_size, eps)
    return {prefix: load(module, W, prefix + ".") for prefix, module in norms.items()}
