"""The shape rules of Qwen3.5's checkpoint: {name: (shape, dtype)} of every tensor, from config.json alone.

The lesson's modules get their shapes from the config as they are built, and `qwen.weights.load`
checks each one against the file. These tables say the same rules in one place, for what needs
them without building a module: engine/checkpoint.py (a config that does not belong to its weights),
engine/tiny.py (writing the tiny checkpoint), and the tests, which check them against the real
checkpoint's 320 language-model, 153 tower and 15 MTP tensors. `kv_cache_bytes`: what a key/value
cache in every layer would take (chapter 9 compares it with the model's cache).
"""
from qwen.config import mtp_layers


def language_model_shapes(cfg):
    """{short name: (shape, dtype)} of every language-model tensor, from the config alone: the
    architecture's shape rules in one place (the tests check them against the real checkpoint)."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    conv = 2 * nk * dk + nv * dv                      # q, k and v go through one causal conv
    shapes = {"embed_tokens.weight": ((V, H), "BF16")}
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        shapes[p + "input_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "post_attention_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "mlp.gate_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.up_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.down_proj.weight"] = ((H, I), "BF16")
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes[a + "in_proj_qkv.weight"] = ((conv, H), "BF16")
            shapes[a + "in_proj_z.weight"] = ((nv * dv, H), "BF16")
            shapes[a + "in_proj_b.weight"] = ((nv, H), "BF16")
            shapes[a + "in_proj_a.weight"] = ((nv, H), "BF16")
            shapes[a + "conv1d.weight"] = ((conv, 1, cfg.linear_conv_kernel_dim), "BF16")
            shapes[a + "dt_bias"] = ((nv,), "BF16")
            shapes[a + "A_log"] = ((nv,), "F32")       # the two fp32 tensors of the checkpoint
            shapes[a + "norm.weight"] = ((dv,), "F32")
            shapes[a + "out_proj.weight"] = ((H, nv * dv), "BF16")
        else:
            a = p + "self_attn."
            shapes[a + "q_proj.weight"] = ((nh * hd * 2, H), "BF16")   # per head: query, then output gate
            shapes[a + "k_proj.weight"] = ((nkv * hd, H), "BF16")
            shapes[a + "v_proj.weight"] = ((nkv * hd, H), "BF16")
            shapes[a + "o_proj.weight"] = ((H, nh * hd), "BF16")
            shapes[a + "q_norm.weight"] = ((hd,), "BF16")
            shapes[a + "k_norm.weight"] = ((hd,), "BF16")
    shapes["norm.weight"] = ((H,), "BF16")
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = ((V, H), "BF16")
    return shapes


def vision_shapes(vcfg, out_hidden=None):
    """{full name: (shape, dtype)} of every `model.visual.*` tensor, from the vision config alone
    (the tests check them against the real checkpoint's 153). out_hidden: the merged tokens'
    width, which must be the language model's hidden_size (default: the config's out_hidden_size)."""
    D, I, m = vcfg.hidden_size, vcfg.intermediate_size, vcfg.spatial_merge_size
    out = vcfg.out_hidden_size if out_hidden is None else out_hidden
    kernel = (vcfg.temporal_patch_size, vcfg.patch_size, vcfg.patch_size)
    v = "model.visual."
    shapes = {v + "patch_embed.proj.weight": ((D, vcfg.in_channels, *kernel), "BF16"),   # a Conv3d's weight
              v + "patch_embed.proj.bias": ((D,), "BF16"),
              v + "pos_embed.weight": ((vcfg.num_position_embeddings, D), "BF16")}
    for i in range(vcfg.depth):
        b = f"{v}blocks.{i}."
        for norm in ("norm1", "norm2"):                                  # LayerNorms: weight and bias
            shapes[b + norm + ".weight"] = ((D,), "BF16")
            shapes[b + norm + ".bias"] = ((D,), "BF16")
        for name, (rows, cols) in (("attn.qkv", (3 * D, D)), ("attn.proj", (D, D)),
                                   ("mlp.linear_fc1", (I, D)), ("mlp.linear_fc2", (D, I))):
            shapes[b + name + ".weight"] = ((rows, cols), "BF16")
            shapes[b + name + ".bias"] = ((rows,), "BF16")
    merged = D * m * m                                                   # m x m patches side by side
    shapes[v + "merger.norm.weight"] = ((D,), "BF16")
    shapes[v + "merger.norm.bias"] = ((D,), "BF16")
    shapes[v + "merger.linear_fc1.weight"] = ((merged, merged), "BF16")
    shapes[v + "merger.linear_fc1.bias"] = ((merged,), "BF16")
    shapes[v + "merger.linear_fc2.weight"] = ((out, merged), "BF16")
    shapes[v + "merger.linear_fc2.bias"] = ((out,), "BF16")
    return shapes


def mtp_shapes(cfg):
    """{full name: (shape, dtype)} of the multi-token-prediction head's tensors (`mtp.*`, 15 in 0.8B),
    from the config alone. The head is one more decoder layer, always full attention, whose input is
    fc(cat[norm(embedding), norm(hidden)]): fc maps 2 x hidden to hidden. The layer's shapes are the
    main model's full-attention shapes (q_proj with its output-gate rows included)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    shapes = {"mtp.fc.weight": ((H, 2 * H), "BF16"),                     # (hidden, [embedding; hidden])
              "mtp.pre_fc_norm_embedding.weight": ((H,), "BF16"),
              "mtp.pre_fc_norm_hidden.weight": ((H,), "BF16")}
    for i in range(mtp_layers(cfg)):
        p = f"mtp.layers.{i}."
        shapes[p + "input_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "post_attention_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "mlp.gate_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.up_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.down_proj.weight"] = ((H, I), "BF16")
        shapes[p + "self_attn.q_proj.weight"] = ((nh * hd * 2, H), "BF16")
        shapes[p + "self_attn.k_proj.weight"] = ((nkv * hd, H), "BF16")
        shapes[p + "self_attn.v_proj.weight"] = ((nkv * hd, H), "BF16")
        shapes[p + "self_attn.o_proj.weight"] = ((H, nh * hd), "BF16")
        shapes[p + "self_attn.q_norm.weight"] = ((hd,), "BF16")
        shapes[p + "self_attn.k_norm.weight"] = ((hd,), "BF16")
    shapes["mtp.norm.weight"] = ((H,), "BF16")
    return shapes


def kv_cache_bytes(cfg, tokens, itemsize, layers=None):
    """Bytes a key/value cache of `tokens` positions needs in `layers` layers (default: all of them)."""
    layers = cfg.num_hidden_layers if layers is None else layers
    return layers * 2 * cfg.num_key_value_heads * cfg.head_dim * tokens * itemsize
