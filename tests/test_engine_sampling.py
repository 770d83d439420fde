"""engine/sampling.py's radix-select top-p keeps the set qwen/generate.py's sort keeps (the fast path
and the plain path tested equal), on flat and peaked rows of the real vocabulary size and with ties."""
import torch

from engine.sampling import top_p_filter as radix_top_p
from qwen.generate import top_p_filter


def test_the_radix_select_keeps_what_the_sort_keeps():
    g = torch.Generator().manual_seed(7)
    for trial in range(12):
        logits = torch.randn(248320, generator=g) * (0.3, 3.0, 12.0)[trial % 3]     # flat .. peaked
        if trial % 4 == 3:
            logits = logits.bfloat16().float()                                      # ties
        for p in (0.0, 0.3, 0.8, 0.99):
            assert torch.equal(torch.isfinite(radix_top_p(logits, p)), torch.isfinite(top_p_filter(logits, p))), (trial, p)
    level = torch.tensor([0.0] * 8 + [-1000.0] * 8)                                 # 1/8 each: the first 4 in order
    assert torch.equal(torch.isfinite(radix_top_p(level, 0.5)), torch.isfinite(top_p_filter(level, 0.5)))
