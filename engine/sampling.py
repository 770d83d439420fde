"""Top-p without sorting the vocabulary: a radix select over the logits' float bits; top-k as a logits filter.

qwen/generate.py's top_p_filter sorts all 248,320 probabilities of a row; this one keeps the same
set (tests/test_engine_sampling.py checks they agree) from a top-k of 256 and, for a flat row
(random weights keep thousands of tokens), two counting passes over 16 bits of the logits at a time.
`top_k_filter` is qwen.generate.distribution's top-k as transformers' TopKLogitsWarper applies it.
"""
import torch

from qwen.generate import check_sampling


TOP_P_FIRST = 256          # top-p looks among the 256 most likely tokens first,
TOP_P_WINDOW = 4096        # ... else narrows the cut down to at most this many tokens, then sorts those


def top_k_filter(logits, k):
    """Keep the k largest logits and every logit tied with the k-th (as transformers' top-k does:
    bf16 logits tie often); the rest become -inf. k = 0 keeps all of them."""
    check_sampling(top_k=k)
    if k == 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]                          # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits, p):
    """qwen.generate.top_p_filter's kept set, found without sorting the whole vocabulary.

    The rule, precisely: sorted by probability, a token is kept when the mass of the tokens before
    it is below p. So the token that crosses p is kept; when the most likely tokens sum to exactly
    p, the next one is not (the mass before it is p, not below it); the most likely token is always
    kept (p = 0 keeps it alone). Equal logits at the cut are taken in vocabulary order, as many as
    the rule needs: the set's size never depends on the order, only which of the tied tokens are
    in it (transformers' TopPLogitsWarper keeps the same number, in its sort's order; exercise 232
    accepts any of them).

    The sums are float64 (bench/bench_sampling.py compares with fp32 sums). Each row costs a top-k of
    256 and a few counting passes, not a sort of the whole vocabulary (`_top_p_cut`)."""
    check_sampling(top_p=p)
    if p == 1:
        return logits
    rows = logits.reshape(-1, logits.shape[-1])                            # (rows, vocab)
    keep = torch.stack([_top_p_keep(row, p) for row in rows])              # (rows, vocab) bool
    return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))


def _top_p_keep(row, p):
    """Which tokens of one row (vocab,) top-p keeps: every logit above the cut, and of those equal
    to it (a tie), the first ones in vocabulary order while the mass before each is below p."""
    cut = _top_p_cut(row, p)                                               # the crossing token's logit
    if not torch.isfinite(cut):                                            # all -inf, or an inf logit
        return row >= cut
    x = row.double()
    probs = (x - x.max()).exp_()
    probs /= probs.sum()                                                   # (vocab,) float64 softmax
    above, tied = row > cut, row == cut
    n_tied = int(tied.sum())
    before = probs[above].sum() + probs[tied][0] * torch.arange(n_tied, dtype=torch.float64)  # (n_tied,)
    need = max(1, int((before < p).sum()))                                 # p = 0: the most likely alone
    return above | (tied & (tied.cumsum(-1) <= need))


def _top_p_cut(row, p):
    """The lowest logit top-p keeps in one row (vocab,): the logit of the token that crosses p.

    1. The crossing token is usually among the most likely few (a trained model's top-p set is a
       few dozen tokens): sum the probabilities of the 256 largest logits, in order.
    2. Else (a flat distribution: random weights keep thousands of tokens) narrow it down without
       sorting the vocabulary, 16 bits of the logit at a time (`_sortable_bits`): the probability
       mass of each of the 65,536 values of the top 16 bits is one bincount; summed from the top,
       they say which value holds the crossing token. Keep only the tokens with that value, and go
       on with the next 16 bits, until a few thousand tokens are left: sort those. (A radix
       select: for fp32 logits, two passes of counting instead of a sort.)"""
    first = row.topk(min(TOP_P_FIRST, len(row))).values.double()           # (256,) largest first
    if not torch.isfinite(first[0]):                                       # all -inf, or an inf logit
        return first[0]
    probs = row.to(torch.float64, copy=True).sub_(first[0]).exp_()          # (vocab,) softmax, before dividing
    total = probs.sum()
    mass = ((first - first[0]).exp() / total).cumsum(0)                    # mass of the tokens up to each
    j = int(torch.searchsorted(mass, p))                                   # the first whose sum reaches p
    if j < len(first):
        return first[j]
    probs /= total                                                         # (vocab,)
    keys = _sortable_bits(row if row.dtype == torch.float64 else row.float())   # (vocab,) int32 (bf16: exact)
    where = None                                                           # the window's positions in row (None: all)
    above = 0.0                                                            # mass of the tokens above the window
    for shift in range(keys.element_size() * 8 - 16, -1, -16):             # 16, 0 (float64: 48, 32, 16, 0)
        if len(keys) <= TOP_P_WINDOW:
            break
        digit = (keys >> shift).bitwise_and_(0xFFFF)                       # (n,) 16 bits: 0..65535
        per_digit = torch.bincount(digit, weights=probs, minlength=1 << 16).flip(0)   # (65536,) top value first
        reached = above + per_digit.cumsum(0)                              # mass at or above each value
        j = int(torch.searchsorted(reached, p))                            # the value that holds the crossing
        j = min(j, int(per_digit.nonzero()[-1]))                           # (rounding: stay where tokens are)
        above = reached[j - 1] if j else above
        inside = (digit == 0xFFFF - j).nonzero().squeeze(1)                # (m,) the tokens with that value
        probs, keys, where = probs[inside], keys[inside], inside if where is None else where[inside]
    x = row.double() if where is None else row[where].double()             # (m,) the window's logits
    if len(x) > TOP_P_WINDOW:                                              # all bits read: every one tied
        return x[0]
    x, order = x.sort(descending=True)
    mass = above + probs[order].cumsum(0)
    j = min(int(torch.searchsorted(mass, p)), len(x) - 1)                  # (rounding: keep the whole window)
    return x[j]


def _sortable_bits(x):
    """float32 or float64 (n,) -> int32 or int64 (n,) whose bits, read as an unsigned number, sort
    as the floats do (then 16 bits at a time can be counted from the top, as digits).

    A positive float's bits grow with it (exponent first, then mantissa): set the sign bit, so they
    come after the negatives. A negative float's bits grow as it shrinks: flip them all."""
    kind = torch.int64 if x.dtype == torch.float64 else torch.int32
    bits = x.view(kind)
    flip = (bits >> (bits.element_size() * 8 - 1)).bitwise_or_(torch.iinfo(kind).min)  # all ones, or the sign
    return flip.bitwise_xor_(bits)                                         # negative: ~bits; else sign bit set
