"""Embedding lookup, tied logits in slices, and nearest neighbours, against plain formulas."""
import pytest
import torch

from qwen.embedding import Embedding, logits, nearest, row_norms
from qwen.lang import QwenError
from qwen.weights import load, load_weights


@pytest.fixture(scope="module")
def E(tiny_path):
    return load_weights(tiny_path)["embed_tokens.weight"]


def test_lookup_is_the_stored_rows(tiny_path, E):
    emb = load(Embedding(248320, 16), load_weights(tiny_path), "embed_tokens.")
    ids = torch.tensor([[9419, 0, 248045], [5, 5, 248319]])
    out = emb(ids)
    assert out.shape == (2, 3, 16) and out.dtype == torch.bfloat16
    assert torch.equal(out, E[ids])
    assert torch.equal(emb([9419]), E[[9419]])


@pytest.mark.parametrize("bad", [[248320], [-1]])
def test_lookup_out_of_range(tiny_path, bad):
    emb = load(Embedding(248320, 16), load_weights(tiny_path), "embed_tokens.")
    with pytest.raises(QwenError, match=f"Token id {bad[0]} is outside the embedding table"):
        emb(torch.tensor(bad))


def test_float_ids_are_refused():
    with pytest.raises(QwenError, match="integer token ids"):
        Embedding(4, 2)(torch.tensor([1.0]))


@pytest.mark.parametrize("rows", [1000, 16384, 300000])
def test_logits_in_slices_equal_one_matmul(E, rows):
    h = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    full = h @ E.float().T
    got = logits(h, E, rows=rows)
    assert got.shape == (3, 248320) and got.dtype == torch.float32
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)


def test_logits_shape_mismatch(E):
    with pytest.raises(QwenError, match="h has width 8 but the table's rows have width 16"):
        logits(torch.zeros(8), E)


def test_row_norms_and_nearest_match_brute_force(E):
    norms = row_norms(E, rows=5000)
    torch.testing.assert_close(norms, E.float().norm(dim=-1))
    q = E[[9419, 100]].float()
    vals, ids = nearest(E, q, k=4, limit=248044)
    cos = (q / q.norm(dim=-1, keepdim=True)) @ (E[:248044].float() / norms[:248044, None]).T
    ref = cos.topk(4, dim=1)
    torch.testing.assert_close(vals, ref.values)
    assert ids[:, 0].tolist() == [9419, 100]                         # a row is its own nearest
