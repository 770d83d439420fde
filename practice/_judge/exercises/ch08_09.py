"""Exercises 230-232 (chapters 8-9): a decoder layer's residual wiring, one greedy decode step with
the cache, top-p sampling.

Expected values come from the library (qwen/norm.py, qwen/mlp.py, qwen/attention.py,
qwen/generate.py), which the tests check against transformers. Inputs: the model's own layer-0
weights where a layer is needed (the real Qwen3.5-0.8B when it is on disk, else the built-in tiny
checkpoint), plus small synthetic shapes chosen so that each known mistake changes the result.
"""
import math

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol


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


def _layer_mistake(kind):
    def mistake(x, w1, w2, eps, mix, wg, wu, wd):
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
        k, v = torch.cat((k_cache, k_new), 2), torch.cat((v_cache, v_new), 2)
        keys, values = (k_cache, v_cache) if kind == "past_only" else (k, v)
        group = H // k.shape[1]
        kk, vv = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        scores = q.double() @ kk.double().transpose(-1, -2) / math.sqrt(D)          # (B, H, 1, S)
        if kind == "mask_not_offset":                                                # triu(1) of a (1, S) mask
            scores = scores.masked_fill(torch.ones(1, keys.shape[2], dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ vv.double()).transpose(1, 2).reshape(B, H * D)
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

    model = inputs(1, H, KV, 7, D, 500)
    gqa = inputs(2, 8, 2, 11, 8, 300)
    short = inputs(1, 4, 2, 1, 8, 200)
    about = ("append k_new, v_new to the cache along the sequence, attend the one query over all keys (it is the "
             "last position: it may see every key), heads side by side, @ out_weight.T, argmax",
             "把 k_new、v_new 沿序列维接到缓存后面，用这一个查询关注所有的键（它是最后一个位置：所有键都能看到），"
             "各头并排，@ out_weight.T，取 argmax")
    L = ctx.label
    return [
        Case("greedy_step", ("8 heads sharing 2 kv heads, batch 2, 11 cached tokens", "8 个头共享 2 个键值头，批次 2，缓存 11 个词元"),
             gqa, step_expected(*gqa), Tol(1e-5, 1e-5), about=about),
        Case("greedy_step", (f"{L} attention shapes: heads {H}, kv heads {KV}, head_dim {D}, 7 cached",
                             f"{L} 的注意力形状：头 {H} 个、键值头 {KV} 个、head_dim {D}，缓存 7 个"),
             model, step_expected(*model), Tol(1e-5, 1e-5), about=about),
        Case("greedy_step", ("one cached token", "缓存里只有一个词元"), short, step_expected(*short), Tol(1e-5, 1e-5),
             about=about),
    ]


def _differs(case, got, kind):
    """The learner's (token, k, v) equals the mistake's on this case, and the reference's does not."""
    torch = _torch()
    try:
        token, k, v = got
        wrong = _step_mistake(kind)(*case.args)
        return (torch.equal(torch.as_tensor(token), wrong[0]) and tuple(k.shape) == tuple(wrong[1].shape)
                and not (torch.equal(wrong[0], case.expected[0]) and tuple(wrong[1].shape) == tuple(case.expected[1].shape)))
    except Exception:
        return False


DIAGNOSES_231 = [
    Diagnosis("mask_not_offset", "greedy_step",
              ("looks like the causal mask was not shifted by the cache's length: the new token is the last position, "
               "so it sees every cached key (mask column j only when j > past + t)",
               "看起来因果掩码没有按缓存长度平移：新词元是最后一个位置，能看到所有缓存的键（只有 j > past + t 的列才被遮住）"),
              test=lambda case, got: _differs(case, got, "mask_not_offset")),
    Diagnosis("past_only", "greedy_step",
              ("looks like the new token's own key and value were not used: append them to the cache first, "
               "then attend over all of them",
               "看起来没有用到新词元自己的键和值：先把它们接到缓存后面，再关注全部的键"),
              test=lambda case, got: _differs(case, got, "past_only")),
    Diagnosis("cache_not_grown", "greedy_step",
              ("looks like the returned cache did not grow by one position: return all past + 1 keys and values, "
               "the new ones appended after the cached ones (the next step needs them)",
               "看起来返回的缓存没有多出一个位置：返回全部 past + 1 个键和值，新的接在缓存的后面（下一步需要它们）"),
              test=lambda case, got: _differs(case, got, "cache_not_grown")),
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
        ordered, order = logits.sort(-1, descending=True)
        probs = ordered.softmax(-1)
        if kind == "drops_crossing":
            drop = probs.cumsum(-1) > p                             # the token that crosses p is dropped too
        elif kind == "sorted_output":
            return ordered.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))
        else:
            raise ValueError(kind)
        return torch.empty_like(logits).scatter_(-1, order, ordered.masked_fill(drop, float("-inf")))
    return mistake


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
    about = ("sort descending; keep a token when the probability mass before it is below p (the token that crosses p "
             "is kept); the rest become -inf, in vocabulary order",
             "降序排序；一个词元之前的概率质量小于 p 时保留它（越过 p 的那个词元也保留）；其余设为 -inf，按词表顺序返回")
    tol = Tol(0, 0)
    return [
        Case("top_p_filter", ("six logits, p = 0.5", "六个 logits，p = 0.5"), (peaked, 0.5), top_p_expected(peaked, 0.5),
             tol, about=about),
        Case("top_p_filter", ("six logits, p = 0.9", "六个 logits，p = 0.9"), (peaked, 0.9), top_p_expected(peaked, 0.9),
             tol, about=about),
        Case("top_p_filter", ("3 rows of 1000 logits, p = 0.8", "3 行、每行 1000 个 logits，p = 0.8"), (wide, 0.8),
             top_p_expected(wide, 0.8), tol, about=about),
        Case("top_p_filter", (f"the whole vocabulary ({ctx.cfg.vocab_size:,}), p = 0.95",
                              f"整个词表（{ctx.cfg.vocab_size:,}），p = 0.95"), (vocab, 0.95),
             top_p_expected(vocab, 0.95), tol, about=about),
    ]


DIAGNOSES_232 = [
    Diagnosis("drops_crossing", "top_p_filter",
              ("looks like the token that crosses p was dropped: keep the smallest set whose mass reaches p, so the "
               "token that takes the sum past p stays (keep while the mass before it is < p)",
               "看起来越过 p 的那个词元被丢掉了：保留总质量达到 p 的最小集合，所以使总和越过 p 的词元要保留"
               "（它之前的质量 < p 就保留）"),
              mistake=_top_p_mistake("drops_crossing")),
    Diagnosis("unsorted", "top_p_filter",
              ("looks like the mass was summed in vocabulary order: sort by probability first (descending)",
               "看起来是按词表顺序累加概率质量：要先按概率降序排序"),
              mistake=_top_p_mistake("unsorted")),
    Diagnosis("sorted_output", "top_p_filter",
              ("looks like the result is in sorted order: put each logit back at its token's position (scatter)",
               "看起来结果是排序后的顺序：要把每个 logit 放回它所属词元的位置（scatter）"),
              mistake=_top_p_mistake("sorted_output")),
]


# ------------------------------------------------------------------------------------------ registry

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
              "230_parallel.py": "parallel"},
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
              "231_cache_not_grown.py": "cache_not_grown"},
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
              "232_sorted_output.py": "sorted_output"},
             may_modify_inputs=True),
]
