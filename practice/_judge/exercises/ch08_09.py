"""Exercises 230-232 (chapters 8-9): a decoder layer's residual wiring, one greedy decode step with
the cache, top-p sampling.

Expected values come from the library (qwen/norm.py, qwen/mlp.py, qwen/attention.py,
qwen/generate.py), which the tests check against transformers. Inputs: the model's own layer-0
weights where a layer is needed (the real Qwen3.5-0.8B when it is on disk, else the built-in tiny
checkpoint), plus small synthetic shapes chosen so that each known mistake changes the result.
"""
import math

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol
from qwen.lang import T


def _torch():
    import torch
    return torch


# ------------------------------------------------------------------------------------------ 230

def _rms(x, w, eps):
    torch = _torch()
    h = x.float()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + w.float())


def _mlp(h, wg, wu, wd):
    torch = _torch()
    return (torch.nn.functional.silu(h @ wg.T) * (h @ wu.T)) @ wd.T


def layer_expected(x, w1, w2, eps, mix, wg, wu, wd):
    from qwen.mlp import MLP
    from qwen.norm import RMSNorm
    torch = _torch()
    n1, n2, mlp = RMSNorm(x.shape[-1], eps), RMSNorm(x.shape[-1], eps), MLP(wg.shape[1], wg.shape[0])
    with torch.no_grad():
        n1.weight.copy_(w1), n2.weight.copy_(w2)
        mlp.gate_proj.weight.copy_(wg), mlp.up_proj.weight.copy_(wu), mlp.down_proj.weight.copy_(wd)
        x = x + n1(x) @ mix.T                                      # Pre-Norm: the sublayer reads norm(x)
        return x + mlp(n2(x))


def _rms_whole(x, w, eps):
    """The RMS of the whole tensor (every token together) instead of each token's own."""
    torch = _torch()
    h = x.float()
    return h * torch.rsqrt(h.pow(2).mean() + eps) * (1 + w.float())


def _layer_mistake(kind):
    def mistake(x, w1, w2, eps, mix, wg, wu, wd):
        if kind == "mixer_reshaped":                               # mixer_weight @ h^T, reshaped instead of transposed
            h = _rms(x, w1, eps)
            x = x + (mix @ h.transpose(-1, -2)).reshape(x.shape)  # (..., hidden, T) read as (..., T, hidden)
            return x + _mlp(_rms(x, w2, eps), wg, wu, wd)
        if kind == "mixer_untransposed":                           # h @ mixer_weight: the weight's .T left out
            x = x + _rms(x, w1, eps) @ mix
            return x + _mlp(_rms(x, w2, eps), wg, wu, wd)
        if kind == "rms_whole":
            x = x + _rms_whole(x, w1, eps) @ mix.T
            return x + _mlp(_rms_whole(x, w2, eps), wg, wu, wd)
        if kind == "mlp_reads_norm1":                              # the MLP reuses the mixer's input, norm1(x)
            h = _rms(x, w1, eps)
            return x + h @ mix.T + _mlp(h, wg, wu, wd)
        if kind == "post_norm":                                    # norm after the residual add
            x = _rms(x + x @ mix.T, w1, eps)
            return _rms(x + _mlp(x, wg, wu, wd), w2, eps)
        if kind == "normalized_stream":                            # the stream itself replaced by its norm
            x = _rms(x, w1, eps)
            x = x + x @ mix.T
            x = _rms(x, w2, eps)
            return x + _mlp(x, wg, wu, wd)
        if kind == "swapped_norms":
            x = x + _rms(x, w2, eps) @ mix.T
            return x + _mlp(_rms(x, w1, eps), wg, wu, wd)
        if kind == "parallel":                                     # both sublayers read the same input
            return x + _rms(x, w1, eps) @ mix.T + _mlp(_rms(x, w2, eps), wg, wu, wd)
        if kind == "no_one_plus":
            torch = _torch()
            return layer_expected(x, w1 - 1, w2 - 1, eps, mix, wg, wu, wd).to(torch.float32)
        raise ValueError(kind)
    return mistake


def cases_230(ctx):
    torch = _torch()
    g = ctx.gen(230)
    H, eps = ctx.cfg.hidden_size, ctx.cfg.rms_norm_eps
    W = ctx.W
    w1, w2 = W["layers.0.input_layernorm.weight"].float(), W["layers.0.post_attention_layernorm.weight"].float()
    wg, wu, wd = (W[f"layers.0.mlp.{n}_proj.weight"].float() for n in ("gate", "up", "down"))
    model = (torch.randn(1, 4, H, generator=g) * 0.5, w1, w2, eps, torch.randn(H, H, generator=g) / math.sqrt(H),
             wg, wu, wd)
    small = (torch.randn(2, 3, 8, generator=g) * 3, torch.randn(8, generator=g) * 0.3, torch.randn(8, generator=g) * 0.3,
             1e-6, torch.randn(8, 8, generator=g) * 0.4, torch.randn(12, 8, generator=g) * 0.5,
             torch.randn(12, 8, generator=g) * 0.5, torch.randn(8, 12, generator=g) * 0.3)
    tol = Tol(1e-4, 1e-4)
    about = ("x = x + mixer(input_norm(x)); x = x + mlp(post_attention_norm(x)); RMSNorm scales by (1 + w)",
             "x = x + mixer(input_norm(x))；x = x + mlp(post_attention_norm(x))；RMSNorm 乘以 (1 + w)")
    L = ctx.label
    return [
        Case("decoder_layer", (f"{L} layer-0 norms and MLP, 4 tokens", f"{L} 第 0 层的归一化和 MLP，4 个词元"), model,
             layer_expected(*model), tol, about=about),
        Case("decoder_layer", ("hidden 8, intermediate 12, batch (2, 3)", "hidden 8，intermediate 12，批次 (2, 3)"),
             small, layer_expected(*small), tol, about=about),
    ]


DIAGNOSES_230 = [
    Diagnosis("post_norm", "decoder_layer",
              ("looks like Post-Norm: the norm was applied after adding to the stream; Qwen3.5 normalizes the "
               "sublayer's input and adds the sublayer's output to the unnormalized stream",
               "看起来是 Post-Norm：在加到残差流之后才做归一化；Qwen3.5 对子层的输入做归一化，把子层的输出加到未归一化的残差流上"),
              mistake=_layer_mistake("post_norm")),
    Diagnosis("normalized_stream", "decoder_layer",
              ("looks like the stream itself was replaced by its normalized version: keep x, add mixer(norm(x)) to x",
               "看起来残差流本身被换成了归一化后的版本：保留 x，把 mixer(norm(x)) 加到 x 上"),
              mistake=_layer_mistake("normalized_stream")),
    Diagnosis("swapped_norms", "decoder_layer",
              ("looks like the two norms were swapped: input_layernorm goes before the mixer, "
               "post_attention_layernorm before the MLP",
               "看起来两个归一化用反了：input_layernorm 在 mixer 之前，post_attention_layernorm 在 MLP 之前"),
              mistake=_layer_mistake("swapped_norms")),
    Diagnosis("parallel", "decoder_layer",
              ("looks like both sublayers read the layer's input: the MLP must read the stream after the mixer's output "
               "was added",
               "看起来两个子层都读了这一层的输入：MLP 应当读加上 mixer 输出之后的残差流"),
              mistake=_layer_mistake("parallel")),
    Diagnosis("no_one_plus", "decoder_layer",
              ("looks like the norms scaled by w instead of (1 + w): the weights are stored zero-centred",
               "看起来归一化乘的是 w 而不是 (1 + w)：权重是以零为中心存储的"),
              mistake=_layer_mistake("no_one_plus")),
    Diagnosis("mixer_reshaped", "decoder_layer",
              ("looks like the mixer's output was computed as mixer_weight @ h^T, (..., hidden, tokens), and reshaped "
               "instead of transposed back: mixer(h) = h @ mixer_weight.T, (..., tokens, hidden)",
               "看起来 mixer 的输出按 mixer_weight @ h^T 计算，形状 (..., hidden, tokens)，然后用 reshape 而不是转置变回来："
               "mixer(h) = h @ mixer_weight.T，形状 (..., tokens, hidden)"),
              mistake=_layer_mistake("mixer_reshaped")),
    Diagnosis("mixer_untransposed", "decoder_layer",
              ("looks like the mixer multiplied by mixer_weight without .T: a weight is stored (out, in), so "
               "mixer(h) = h @ mixer_weight.T",
               "看起来 mixer 乘的是没有转置的 mixer_weight：权重按 (out, in) 存储，所以 mixer(h) = h @ mixer_weight.T"),
              mistake=_layer_mistake("mixer_untransposed")),
    Diagnosis("rms_whole", "decoder_layer",
              ("looks like the RMS was taken over the whole tensor: each token has its own, "
               "mean(x^2) over the last dimension only (dim=-1, keepdim=True)",
               "看起来 RMS 是在整个张量上算的：每个词元有它自己的 RMS，mean(x^2) 只在最后一维上求（dim=-1，keepdim=True）"),
              mistake=_layer_mistake("rms_whole")),
    Diagnosis("mlp_reads_norm1", "decoder_layer",
              ("looks like the MLP read the first norm's output, the mixer's input: it reads "
               "post_attention_layernorm of the stream after the mixer's output was added, mlp(norm2(x))",
               "看起来 MLP 读的是第一个归一化的输出（也就是 mixer 的输入）：它应当读加上 mixer 输出之后的残差流经过 "
               "post_attention_layernorm 的结果，mlp(norm2(x))"),
              mistake=_layer_mistake("mlp_reads_norm1")),
]


# ------------------------------------------------------------------------------------------ 231

def step_expected(k_cache, v_cache, q, k_new, v_new, out_weight):
    from qwen.attention import causal_attention
    torch = _torch()
    B, H, _, D = q.shape
    k, v = torch.cat((k_cache, k_new), 2), torch.cat((v_cache, v_new), 2)
    out = causal_attention(q, k, v, 1.0 / math.sqrt(D), past=k_cache.shape[2])   # (B, H, 1, D)
    logits = out.transpose(1, 2).reshape(B, H * D) @ out_weight.T                 # (B, vocab)
    return logits.argmax(-1), k, v


def _step_mistake(kind):
    def mistake(k_cache, v_cache, q, k_new, v_new, out_weight):
        torch = _torch()
        B, H, _, D = q.shape
        if kind == "prepended":                                      # the new position put before the cached ones
            k, v = torch.cat((k_new, k_cache), 2), torch.cat((v_new, v_cache), 2)
        else:
            k, v = torch.cat((k_cache, k_new), 2), torch.cat((v_cache, v_new), 2)
        keys, values = (k_cache, v_cache) if kind == "past_only" else (k_new, v_new) if kind == "new_only" else (k, v)
        group = H // k.shape[1]
        if kind == "kv_order":                                       # query head h reads kv head h % kv_heads
            kk, vv = keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
        else:
            kk, vv = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        scale = 1.0 if kind == "no_scale" else 1.0 / D if kind == "scale_head_dim" else 1.0 / math.sqrt(D)
        scores = q.double() @ kk.double().transpose(-1, -2) * scale                 # (B, H, 1, S)
        if kind == "mask_not_offset":                                                # triu(1) of a (1, S) mask
            scores = scores.masked_fill(torch.ones(1, keys.shape[2], dtype=torch.bool).triu(1), float("-inf"))
        weights = scores.softmax(-2) if kind == "softmax_queries" else scores.softmax(-1)   # -2: one query, all 1
        out = (weights @ vv.double()).transpose(1, 2).reshape(B, H * D)
        token = (out @ out_weight.double().T).argmax(-1)
        return (token, k_cache, v_cache) if kind == "cache_not_grown" else (token, k, v)
    return mistake


def cases_231(ctx):
    torch = _torch()
    g = ctx.gen(231)
    cfg = ctx.cfg
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim

    def inputs(B, H, KV, past, D, vocab, sharp=4.0):
        k_cache = torch.randn(B, KV, past, D, generator=g)
        v_cache = torch.randn(B, KV, past, D, generator=g) * 3
        q = torch.randn(B, H, 1, D, generator=g) * sharp / math.sqrt(D)
        k_new, v_new = torch.randn(B, KV, 1, D, generator=g), torch.randn(B, KV, 1, D, generator=g) * 3
        return k_cache, v_cache, q, k_new, v_new, torch.randn(vocab, H * D, generator=g)

    # Many rows per case: a token is one argmax, and a mistake that changes some scores changes the
    # argmax of only some rows. Scores not divided by sqrt(head_dim) changed none of the 4 rows the
    # three cases had (batches 2, 1, 1); with batches 64, 16, 8 it changes 33, 13 and 1 of them on
    # the tiny checkpoint (41, 16, 3 with the real model's shapes). In every row the top two logits
    # differ by more than 4e-4 of the largest (both shapes, right and mistaken), so fp32 and fp64
    # pick the same token.
    model = inputs(16, H, KV, 7, D, 500)
    gqa = inputs(64, 8, 2, 11, 8, 300)
    short = inputs(8, 4, 2, 1, 8, 200)
    about = ("append k_new, v_new to the cache along the sequence, attend the one query over all keys (it is the "
             "last position: it may see every key), heads side by side, @ out_weight.T, argmax",
             "把 k_new、v_new 沿序列维接到缓存后面，用这一个查询关注所有的键（它是最后一个位置：所有键都能看到），"
             "各头并排，@ out_weight.T，取 argmax")
    L = ctx.label
    tol = Tol(1e-5, 1e-5)
    return [
        Case("greedy_step", ("8 heads sharing 2 kv heads, batch 64, 11 cached tokens",
                             "8 个头共享 2 个键值头，批次 64，缓存 11 个词元"),
             gqa, step_expected(*gqa), tol, about=about),
        Case("greedy_step", (f"{L} attention shapes: heads {H}, kv heads {KV}, head_dim {D}, batch 16, 7 cached",
                             f"{L} 的注意力形状：头 {H} 个、键值头 {KV} 个、head_dim {D}，批次 16，缓存 7 个"),
             model, step_expected(*model), tol, about=about),
        Case("greedy_step", ("one cached token, batch 8", "缓存里只有一个词元，批次 8"), short, step_expected(*short), tol,
             about=about),
    ]


STEP_MISTAKES = ("mask_not_offset", "past_only", "cache_not_grown", "no_scale", "kv_order", "prepended", "new_only",
                 "scale_head_dim", "softmax_queries")


def _step_signature(kind):
    """A test for the mistake `kind`: the parts of (token, k, v) that the mistake changes on this case
    are the learner's, mistaken the same way. Only those parts: a mistake that leaves the token right
    (the cache in the wrong order) is never named for a wrong token, and one that changes only the
    token never for a wrong cache. Not on a case where another known mistake gives the same result
    (with one cached token, the unshifted mask hides exactly the new key, as leaving it out does):
    there the name could contradict what another case shows."""
    def test(case, got):
        from practice._judge.compare import close
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return False
        wrong = _step_mistake(kind)(*case.args)
        changed = [i for i in range(3) if not close(case.expected[i], wrong[i], case.tol)]
        if not changed or not all(close(wrong[i], got[i], case.tol) for i in changed):
            return False
        for other in STEP_MISTAKES:
            alike = _step_mistake(other)(*case.args)
            if other != kind and all(close(wrong[i], alike[i], case.tol) for i in range(3)):
                return False
        return True
    return test


DIAGNOSES_231 = [
    Diagnosis("mask_not_offset", "greedy_step",
              ("looks like the causal mask was not shifted by the cache's length: the new token is the last position, "
               "so it sees every cached key (mask column j only when j > past + t)",
               "看起来因果掩码没有按缓存长度平移：新词元是最后一个位置，能看到所有缓存的键（只有 j > past + t 的列才被遮住）"),
              test=_step_signature("mask_not_offset")),
    Diagnosis("past_only", "greedy_step",
              ("looks like the new token's own key and value were not used: append them to the cache first, "
               "then attend over all of them",
               "看起来没有用到新词元自己的键和值：先把它们接到缓存后面，再关注全部的键"),
              test=_step_signature("past_only")),
    Diagnosis("cache_not_grown", "greedy_step",
              ("looks like the returned cache did not grow by one position: return all past + 1 keys and values, "
               "the new ones appended after the cached ones (the next step needs them)",
               "看起来返回的缓存没有多出一个位置：返回全部 past + 1 个键和值，新的接在缓存的后面（下一步需要它们）"),
              test=_step_signature("cache_not_grown")),
    Diagnosis("no_scale", "greedy_step",
              ("looks like the scores were not divided by sqrt(head_dim): softmax(q @ k^T / sqrt(head_dim))",
               "看起来分数没有除以 sqrt(head_dim)：softmax(q @ k^T / sqrt(head_dim))"),
              test=_step_signature("no_scale")),
    Diagnosis("kv_order", "greedy_step",
              ("looks like query head h read kv head h % kv_heads (repeat, or an index h % kv_heads): it reads kv head "
               "h // (heads // kv_heads), so use repeat_interleave(heads // kv_heads, dim=1)",
               "看起来查询头 h 读的是键值头 h % kv_heads（repeat，或下标 h % kv_heads）：它应当读键值头 "
               "h // (heads // kv_heads)，请用 repeat_interleave(heads // kv_heads, dim=1)"),
              test=_step_signature("kv_order")),
    Diagnosis("prepended", "greedy_step",
              ("looks like the new key and value were put before the cached ones: your token is right, but the cache "
               "keeps the tokens in order, so append them at the end, torch.cat((k_cache, k_new), dim=2)",
               "看起来新的键和值被放在了缓存的前面：你的 token 是对的，但缓存要按词元的顺序保存，所以要接在最后，"
               "torch.cat((k_cache, k_new), dim=2)"),
              test=_step_signature("prepended")),
    Diagnosis("new_only", "greedy_step",
              ("looks like the query attended the new token only: its own key is one of past + 1; attend over the "
               "cached keys and the new one together, torch.cat((k_cache, k_new), dim=2)",
               "看起来查询只关注了新词元：它自己的键只是 past + 1 个中的一个；要同时关注缓存的键和新的键，"
               "torch.cat((k_cache, k_new), dim=2)"),
              test=_step_signature("new_only")),
    Diagnosis("scale_head_dim", "greedy_step",
              ("looks like the scores were divided by head_dim: the scale is 1 / sqrt(head_dim)",
               "看起来分数除以的是 head_dim：缩放是 1 / sqrt(head_dim)"),
              test=_step_signature("scale_head_dim")),
    Diagnosis("softmax_queries", "greedy_step",
              ("looks like the softmax ran over the query axis (dim=-2): with one query every weight is 1; the "
               "weights are over the keys, softmax(..., dim=-1)",
               "看起来 softmax 是沿查询的维度算的（dim=-2）：只有一个查询时每个权重都是 1；权重是对键而言的，"
               "softmax(..., dim=-1)"),
              test=_step_signature("softmax_queries")),
]


# ------------------------------------------------------------------------------------------ 232

def top_p_expected(logits, p):
    from qwen.generate import top_p_filter
    return top_p_filter(logits, p)


def _top_p_mistake(kind):
    def mistake(logits, p):
        torch = _torch()
        if kind == "unsorted":                                      # cumulative mass in vocabulary order
            probs = logits.softmax(-1)
            return logits.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))
        if kind == "dim_1":                                         # the filter run along dimension 1
            if logits.dim() < 3:
                return top_p_expected(logits, p)                    # the same as the last dimension: never named
            return top_p_expected(logits.transpose(1, -1), p).transpose(1, -1)
        if kind == "ascending":                                     # sorted least likely first
            ordered, order = logits.sort(-1, descending=False)
            probs = ordered.softmax(-1)
            ordered = ordered.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))
            return torch.empty_like(logits).scatter_(-1, order, ordered)
        if kind == "keeps_ties":                                    # every logit >= the smallest kept one
            right = top_p_expected(logits, p)
            cut = right.masked_fill(right == float("-inf"), float("inf")).amin(-1, keepdim=True)
            return logits.masked_fill(logits < cut, float("-inf"))
        ordered, order = logits.sort(-1, descending=True)
        probs = ordered.softmax(-1)
        if kind == "sorted_output":
            return ordered.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))
        raise ValueError(kind)
    return mistake


def _kept(logits, got):
    """What the learner kept, row by row, when `got` is a valid filter of `logits` (each kept logit
    unchanged, the rest -inf, the kept ones the most likely): the count per row (rows, ), else None."""
    torch = _torch()
    if not isinstance(got, torch.Tensor) or got.shape != logits.shape or got.dtype != logits.dtype:
        return None
    V = logits.shape[-1]
    x, y = logits.reshape(-1, V), got.reshape(-1, V)                 # (rows, vocab)
    keep = y != float("-inf")
    if not torch.equal(y[keep], x[keep]):                           # NaN, +inf or a changed value
        return None
    lowest_kept = x.masked_fill(~keep, float("inf")).min(-1).values
    highest_dropped = x.masked_fill(keep, float("-inf")).max(-1).values
    if (lowest_kept < highest_dropped).any():
        return None
    return keep.sum(-1)


def _count_off_by(step):
    """A test: a valid filter that keeps `step` tokens more (+1) or fewer (-1) than the rule in some
    rows, and the right number in the others."""
    def test(case, got):
        logits, expected = case.args[0], case.expected
        n = _kept(logits, got)
        if n is None:
            return False
        right = (expected != float("-inf")).reshape(-1, logits.shape[-1]).sum(-1)
        off = n - right
        return bool((off == step).any() and ((off == 0) | (off == step)).all())
    return test


def _probabilities(case, got):
    """The learner returned probabilities where the logits were kept (softmax of all the logits, or
    renormalized over the kept ones), 0 or -inf elsewhere."""
    torch = _torch()
    logits = case.args[0]
    if not isinstance(got, torch.Tensor) or got.shape != logits.shape or not got.is_floating_point():
        return False
    g = got.double()
    kept = torch.isfinite(g) & (g != 0)
    if not kept.any() or not ((g == 0) | (g == float("-inf")) | kept).all():
        return False
    probs = logits.double().softmax(-1)
    renormalized = probs * kept / (probs * kept).sum(-1, keepdim=True)
    return any(torch.allclose(g[kept], q[kept], rtol=1e-4, atol=1e-7) for q in (probs, renormalized))


def _top_p_check(logits, expected):
    """The case's check: the same shape and dtype as the logits, every kept logit unchanged, the
    others -inf, and in each row as many tokens kept as the rule keeps, the most likely ones. With
    ties at the cut, which of the equal logits are kept is free (the count is not: their
    probabilities are equal, so the mass before each is the same whichever comes first)."""
    def check(got):
        from practice._judge.compare import Mismatch, check_tensor, describe
        torch = _torch()
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or got.dtype != expected.dtype:
            check_tensor(expected, got)                                  # the usual line for type, shape, dtype
        V = logits.shape[-1]
        x, e, y = logits.reshape(-1, V), expected.reshape(-1, V), got.reshape(-1, V)     # (rows, vocab)
        keep, right = y != float("-inf"), e != float("-inf")

        def fail(summary, row, col):
            raise Mismatch(summary, expected=describe(expected), got=describe(got), first_index=_index(logits, row, col),
                           expected_value=float(f"{e[row, col].item():.6g}"), got_value=float(f"{y[row, col].item():.6g}"))

        changed = keep & ~(y == x)                                   # NaN, +inf, or a kept logit changed
        if changed.any():
            row, col = (int(i) for i in changed.nonzero()[0])
            fail(T("a kept logit must be returned unchanged and a dropped one as -inf: at index {i} the logit is {x:.6g}, "
                   "your value {y:.6g}",
                   "保留的 logit 要原样返回，丢掉的设为 -inf：下标 {i} 处的 logit 是 {x:.6g}，你的值是 {y:.6g}",
                   i=_index(logits, row, col), x=x[row, col].item(), y=y[row, col].item()), row, col)
        n, m = keep.sum(-1), right.sum(-1)
        if (n != m).any():
            row = int((n != m).nonzero()[0, 0])
            col = int((keep[row] != right[row]).nonzero()[0, 0])                  # the first token kept or dropped wrongly
            fail(T("row {r} keeps {g} token(s), the rule keeps {m}: the smallest set of the most likely tokens whose "
                   "probabilities sum to at least p",
                   "第 {r} 行保留了 {g} 个词元，规则保留 {m} 个：概率之和至少为 p 的、最可能的词元组成的最小集合",
                   r=_index(logits, row), g=int(n[row]), m=int(m[row])), row, col)
        lowest_kept = x.masked_fill(~keep, float("inf")).min(-1).values
        highest_dropped = x.masked_fill(keep, float("-inf")).max(-1).values
        bad = lowest_kept < highest_dropped
        if bad.any():
            row = int(bad.nonzero()[0, 0])
            col = int((~keep[row] & (x[row] > lowest_kept[row])).nonzero()[0, 0])
            fail(T("row {r} drops a logit of {b:.6g} but keeps one of {a:.6g}: the kept tokens are the most likely ones",
                   "第 {r} 行丢掉了 {b:.6g} 的 logit，却保留了 {a:.6g} 的：保留的应当是最可能的词元",
                   r=_index(logits, row), b=x[row, col].item(), a=lowest_kept[row].item()), row, col)
    return check


def _index(logits, row, col=None):
    """A flat row number as the learner's index: [i, j] of the leading dimensions (and the column)."""
    from practice._judge.compare import unravel             # here: compare imports this package
    index = unravel(row, logits.shape[:-1])
    return index + ([int(col)] if col is not None else [])


def cases_232(ctx):
    torch = _torch()
    g = ctx.gen(232)
    peaked = torch.tensor([[0.0, 4.0, 1.0, 0.5, 3.5, -1.0]])       # one token holds more than half the mass
    wide = torch.randn(3, 1000, generator=g) * 2
    vocab = torch.randn(1, ctx.cfg.vocab_size, generator=g) * 3     # the model's vocabulary size
    vocab[0, torch.randperm(vocab.shape[-1], generator=g)[:40]] += 15   # 40 likely tokens hold most of the mass,
    # so p = 0.95 falls between two of them: with a flat tail of tiny probabilities, the crossing
    # token would be decided by the rounding of a 20,000-term fp32 sum, and correct forms (softmax
    # before the sort, an fp64 sum) would keep a few tokens more or fewer than the reference
    batched = torch.randn(2, 3, 40, generator=g) * 2                # (batch, position, vocab): not only 2-D
    # Masses exactly p. Logits 0, -ln 2, -2 ln 2, ... in fp32 give probabilities 1/2, 1/4, 1/8, 1/16,
    # 1/32, 1/32 bit for bit (the sum of their exps is 2), so the first three hold exactly 7/8 and
    # the fourth's mass before it is p itself: dropped. (In fp64, ln 2 rounded to fp32 makes each
    # later probability a little smaller: the mass before the fourth is a little above 7/8, dropped too.)
    halves = -torch.arange(6, dtype=torch.float32) * math.log(2)
    halves[5] = halves[4]
    powers = torch.stack((halves, halves[torch.randperm(6, generator=g)]))
    # Eight equal logits and eight of -1000 (their exp is 0 in fp32 and fp64): probabilities 1/8
    # exactly, in any order or precision; p = 1/2 keeps 4 of the 8, any 4.
    level = torch.cat((torch.zeros(8), torch.full((8,), -1000.0)))[torch.randperm(16, generator=g)][None]
    # Ties at the cut, mass not exact: 4 equal logits hold about 30% after a token of 63%, p = 0.75
    # needs 2 of the 4 in row 0; row 1 is the same row shuffled, with p reached inside the group too.
    tied = torch.tensor([4.0, 2.0, 2.0, 2.0, 2.0, 0.0, -1.0, -1.0, -2.0, -3.0])
    ties = torch.stack((tied, tied[torch.randperm(10, generator=g)]))
    about = ("sort descending; keep a token when the probability mass before it is below p (the token that crosses p "
             "is kept); the rest become -inf, in vocabulary order",
             "降序排序；一个词元之前的概率质量小于 p 时保留它（越过 p 的那个词元也保留）；其余设为 -inf，按词表顺序返回")
    exact = ("the mass before a token equal to p means the set already reaches p: that token is dropped (keep only "
             "while before < p)",
             "一个词元之前的质量正好等于 p，说明集合已经达到 p：这个词元要丢掉（只有 before < p 才保留）")
    tie = ("equal logits at the cut: keep the right number of them, any of them; the number is the same whichever "
           "comes first in the sort",
           "切分处有相等的 logit：保留正确数量的它们，保留哪几个都可以；不论排序时谁在前，数量都一样")

    def case(name, logits, p, about=about):
        expected = top_p_expected(logits, p)
        return Case("top_p_filter", name, (logits, p), expected, Tol(0, 0), about=about, check=_top_p_check(logits, expected))

    return [
        case(("six logits, p = 0.5", "六个 logits，p = 0.5"), peaked, 0.5),
        case(("six logits, p = 0.9", "六个 logits，p = 0.9"), peaked, 0.9),
        case(("3 rows of 1000 logits, p = 0.8", "3 行、每行 1000 个 logits，p = 0.8"), wide, 0.8),
        case(("logits of shape (2, 3, 40): along the last dimension, p = 0.7",
              "形状为 (2, 3, 40) 的 logits：沿最后一维，p = 0.7"), batched, 0.7),
        case(("probabilities 1/2, 1/4, 1/8, ...: the first three hold exactly p = 0.875",
              "概率为 1/2、1/4、1/8……：前三个正好是 p = 0.875"), powers, 0.875, exact),
        case(("8 equal logits (1/8 each), p = 0.5 exactly: any 4 of them",
              "8 个相等的 logit（各 1/8），p 正好是 0.5：其中任意 4 个"), level, 0.5, exact),
        case(("4 equal logits at the cut, p = 0.75: any 2 of them", "切分处有 4 个相等的 logit，p = 0.75：其中任意 2 个"),
             ties, 0.75, tie),
        case((f"the whole vocabulary ({ctx.cfg.vocab_size:,}), p = 0.95", f"整个词表（{ctx.cfg.vocab_size:,}），p = 0.95"),
             vocab, 0.95),
    ]


DIAGNOSES_232 = [
    Diagnosis("dim_1", "top_p_filter",
              ("looks like the filter ran along dimension 1: logits may have more than two dimensions, so sort, "
               "softmax, cumsum and scatter along the last one (dim=-1)",
               "看起来过滤是沿第 1 维做的：logits 可能不止两维，所以排序、softmax、cumsum 和 scatter 都要沿最后一维（dim=-1）"),
              mistake=_top_p_mistake("dim_1")),
    Diagnosis("sorted_output", "top_p_filter",
              ("looks like the result is in sorted order: put each logit back at its token's position (scatter)",
               "看起来结果是排序后的顺序：要把每个 logit 放回它所属词元的位置（scatter）"),
              mistake=_top_p_mistake("sorted_output")),
    Diagnosis("unsorted", "top_p_filter",
              ("looks like the mass was summed in vocabulary order: sort by probability first (descending)",
               "看起来是按词表顺序累加概率质量：要先按概率降序排序"),
              mistake=_top_p_mistake("unsorted")),
    Diagnosis("probabilities", "top_p_filter",
              ("looks like probabilities were returned: return the logits themselves, the kept ones unchanged and the "
               "others -inf (the sampler takes the softmax afterwards)",
               "看起来返回的是概率：要返回 logits 本身，保留的原样不变，其余为 -inf（采样器之后再做 softmax）"),
              test=_probabilities),
    Diagnosis("drops_crossing", "top_p_filter",
              ("looks like the token that crosses p was dropped: keep the smallest set whose mass reaches p, so the "
               "token that takes the sum past p stays (keep while the mass before it is < p)",
               "看起来越过 p 的那个词元被丢掉了：保留总质量达到 p 的最小集合，所以使总和越过 p 的词元要保留"
               "（它之前的质量 < p 就保留）"),
              test=_count_off_by(-1)),
    Diagnosis("one_too_many", "top_p_filter",
              ("looks like one token too many was kept: the set is complete as soon as its mass reaches p, so a token "
               "is kept only while the mass before it is below p (when it equals p, that token is dropped)",
               "看起来多保留了一个词元：集合的质量一达到 p 就完整了，所以只有它之前的质量小于 p 时才保留一个词元"
               "（正好等于 p 时，这个词元要丢掉）"),
              test=_count_off_by(1)),
    Diagnosis("ascending", "top_p_filter",
              ("looks like the logits were sorted ascending (the least likely first): the kept set is the most likely "
               "tokens, so sort with descending=True before the cumulative sum",
               "看起来 logits 是升序排序的（最不可能的在前）：保留的是最可能的那些词元，所以累加之前要用 descending=True 排序"),
              mistake=_top_p_mistake("ascending")),
    Diagnosis("keeps_ties", "top_p_filter",
              ("looks like every logit at least as large as the cut's was kept (a threshold): at a tie only as many "
               "tied tokens are kept as the mass needs; mask by position in the sorted order, not by value",
               "看起来保留了所有不小于切分处那个 logit 的值（用了阈值）：出现并列时，只保留质量所需的那么多个并列词元；"
               "要按排序后的位置来遮，而不是按数值"),
              mistake=_top_p_mistake("keeps_ties")),
]


# ------------------------------------------------------------------------------------------ registry

# The chapter that teaches each exercise (the list and the page show it).
TAUGHT_IN = {"230": 8, "231": 9, "232": 9}

EXERCISES = [
    Exercise("230", "decoder_layer", ("A decoder layer's residual wiring", "解码层的残差连接"), "easy", True,
             ("decoder_layer",),
             [("RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w), statistics in fp32.",
               "RMSNorm：x / sqrt(mean(x^2) + eps) * (1 + w)，统计量用 fp32。"),
              ("Pre-Norm: the sublayer reads norm(x), its output is added to x itself: x = x + mixer(norm1(x)).",
               "Pre-Norm：子层读 norm(x)，它的输出加到 x 本身上：x = x + mixer(norm1(x))。"),
              ("Then x = x + mlp(norm2(x)) on the updated x; the MLP is down(silu(gate(h)) * up(h)).",
               "然后在更新后的 x 上做 x = x + mlp(norm2(x))；MLP 是 down(silu(gate(h)) * up(h))。")],
             cases_230, DIAGNOSES_230,
             {"230_post_norm.py": "post_norm", "230_normalized_stream.py": "normalized_stream",
              "230_swapped_norms.py": "swapped_norms", "230_no_one_plus.py": "no_one_plus",
              "230_parallel.py": "parallel", "230_mixer_reshaped.py": "mixer_reshaped",
              "230_mixer_untransposed.py": "mixer_untransposed", "230_rms_whole.py": "rms_whole",
              "230_mlp_reads_norm1.py": "mlp_reads_norm1"},
             may_modify_inputs=True),
    Exercise("231", "greedy_step", ("One greedy decode step with the cache", "带缓存的一步贪心解码"), "medium", True,
             ("greedy_step",),
             [("k = torch.cat((k_cache, k_new), dim=2), and the same for v: the cache grows by one position.",
               "k = torch.cat((k_cache, k_new), dim=2)，v 同理：缓存增长一个位置。"),
              ("The new token is the last position, so its query sees every key: no key is masked. Repeat kv heads "
               "with repeat_interleave(heads // kv_heads, dim=1).",
               "新词元是最后一个位置，它的查询能看到所有的键：不遮任何键。用 repeat_interleave(heads // kv_heads, dim=1) "
               "重复键值头。"),
              ("softmax(q @ k^T / sqrt(D)) @ v -> (B, H, 1, D) -> (B, H * D) @ out_weight.T -> argmax(-1); return "
               "(token, k, v).",
               "softmax(q @ k^T / sqrt(D)) @ v -> (B, H, 1, D) -> (B, H * D) @ out_weight.T -> argmax(-1)；"
               "返回 (token, k, v)。")],
             cases_231, DIAGNOSES_231,
             {"231_mask_not_offset.py": "mask_not_offset", "231_past_only.py": "past_only",
              "231_cache_not_grown.py": "cache_not_grown", "231_no_scale.py": "no_scale",
              "231_kv_order.py": "kv_order", "231_prepended.py": "prepended", "231_new_only.py": "new_only",
              "231_scale_head_dim.py": "scale_head_dim", "231_softmax_queries.py": "softmax_queries"},
             may_modify_inputs=True),
    Exercise("232", "top_p", ("Top-p (nucleus) filtering", "top-p（核）过滤"), "easy", True, ("top_p_filter",),
             [("Sort the logits descending (logits.sort(-1, descending=True)) and take the softmax of the sorted ones.",
               "把 logits 降序排序（logits.sort(-1, descending=True)），对排序后的做 softmax。"),
              ("before = probs.cumsum(-1) - probs is the mass ahead of each token; drop where before >= p.",
               "before = probs.cumsum(-1) - probs 是每个词元之前的质量；before >= p 的丢掉。"),
              ("Set the dropped ones to -inf and scatter back: torch.empty_like(logits).scatter_(-1, order, ordered).",
               "把丢掉的设为 -inf 再放回原位：torch.empty_like(logits).scatter_(-1, order, ordered)。")],
             cases_232, DIAGNOSES_232,
             {"232_drops_crossing.py": "drops_crossing", "232_unsorted.py": "unsorted",
              "232_sorted_output.py": "sorted_output", "232_dim_1.py": "dim_1", "232_probabilities.py": "probabilities",
              "232_one_too_many.py": "one_too_many", "232_keeps_mass_equal_p.py": "one_too_many",
              "232_ascending.py": "ascending", "232_keeps_ties.py": "keeps_ties"},
             may_modify_inputs=True),
]
