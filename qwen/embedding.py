"""The embedding table: token ids in, vectors out, and (tied) scores over the vocabulary back out.

An embedding is a lookup: row i of a (vocab_size, hidden_size) table is the vector of token i.
Qwen3.5-0.8B ties its output layer to the same table: the score (logit) of token i for a final
hidden vector h is the dot product h . E[i], so all scores at once are h @ E.T.

The real table is 248,320 x 1,024 in bf16, 508 MB; an fp32 copy would be 1 GB. So `logits`
walks the table in slices of rows, upcasting one slice at a time, and the whole fp32 table never
exists. `Embedding` keeps the table in its stored dtype; `load()` fills it without copying.
"""
import torch
import torch.nn as nn

from qwen.lang import QwenError


class Embedding(nn.Module):
    """ids (...) -> vectors (..., dim): row lookup into the stored table."""

    def __init__(self, vocab_size, dim, dtype=torch.bfloat16):
        super().__init__()
        # Uninitialized on purpose: load() replaces it with the stored table, and memory that is
        # never written is never really allocated, so no 508 MB of zeros is made first.
        self.weight = nn.Parameter(torch.empty(vocab_size, dim, dtype=dtype), requires_grad=False)

    def forward(self, ids):
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32):
            raise QwenError("Embedding expects integer token ids, got {dt}.",
                            "Embedding 需要整数的词元编号，实际是 {dt}。", dt=ids.dtype)
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.weight.shape[0]):
            bad = ids[(ids < 0) | (ids >= self.weight.shape[0])][0].item()
            raise QwenError("Token id {i} is outside the embedding table (rows 0..{top}).",
                            "词元编号 {i} 超出了嵌入表的范围（行 0..{top}）。", i=bad, top=self.weight.shape[0] - 1)
        return self.weight[ids]                                   # (...) -> (..., dim), stored dtype

    def extra_repr(self):
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}, dtype={self.weight.dtype}"


def logits(h, E, rows=16384):
    """Scores over the vocabulary: h (..., dim) @ E.T -> (..., vocab) in fp32, `rows` rows of E at a time."""
    if h.shape[-1] != E.shape[-1]:
        raise QwenError("logits: h has width {a} but the table's rows have width {b}.",
                        "logits：h 的宽度是 {a}，但嵌入表每行的宽度是 {b}。", a=h.shape[-1], b=E.shape[-1])
    hf = h.float()
    out = torch.empty(*h.shape[:-1], E.shape[0], dtype=torch.float32)     # (..., vocab)
    for start in range(0, E.shape[0], rows):
        block = E[start:start + rows].float()                     # (rows, dim): one slice in fp32
        out[..., start:start + rows] = hf @ block.T               # (..., dim) @ (dim, rows)
    return out


def row_norms(E, rows=16384):
    """|E[i]| for every row, in fp32, a slice at a time: (vocab,)."""
    return torch.cat([E[s:s + rows].float().norm(dim=-1) for s in range(0, E.shape[0], rows)])


def nearest(E, queries, k=5, norms=None, limit=None):
    """For each query vector, the k rows of E with the highest cosine: (values, ids), each (q, k).

    cosine(q, E[i]) = q . E[i] / (|q| |E[i]|): the logits, divided by both lengths.
    `limit` leaves out rows from that id on (e.g. the special and padding rows)."""
    n = E.shape[0] if limit is None else limit
    norms = row_norms(E[:n]) if norms is None else norms[:n]
    q = queries.float()
    cos = logits(q, E[:n]) / (q.norm(dim=-1, keepdim=True) * norms).clamp_min(1e-12)   # (q, n)
    top = cos.topk(k, dim=-1)
    return top.values, top.indices
