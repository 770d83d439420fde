"""Speculative decoding's tools around qwen/mtp.py: a cut draft vocabulary, its coverage, the head's
teacher-forced acceptance along a text, and replayed drafts (tests, bench/bench_speculative.py, ch12).

Each of DraftVocabulary and `replaying` is a `guess` for qwen.mtp.speculative_ids: a function
(model, g, out, drafted) -> the head's scores (vocab,) from its hidden state g (1, 1, hidden), where
out is the tokens so far and drafted this round's drafts so far.
"""
import collections

import torch

from qwen.lang import QwenError
from qwen.linear import product
from qwen.mtp import MAX_DRAFTS, forward, head_read, head_scores


class DraftVocabulary:
    """The tokens the head may guess: `ids` (n,), and their rows of the output layer, taken once.

    A guess then costs an (n x hidden) product instead of (248,320 x hidden) (EAGLE-3 does the same).
    The main model still chooses every token among all of them, so the output stays exact; only the
    acceptance can drop, by at most the share of tokens outside the cut (`coverage`)."""

    def __init__(self, model, ids):
        self.ids = torch.as_tensor(list(ids), dtype=torch.long)
        self.weight = model.output_weight[self.ids].contiguous()      # (n, hidden)

    def __len__(self):
        return len(self.ids)

    def __call__(self, model, g, out=(), drafted=()):
        """The head's scores (vocab,) fp32: its own among the cut's ids, -inf elsewhere."""
        scores = torch.full((model.output_weight.shape[0],), float("-inf"))
        scores[self.ids] = product(g[0, -1], self.weight).float().cpu()
        return scores


def replaying(drafts, scores=head_scores):
    """A guess that verifies drafts(out, guesses) instead of the head's own guesses (the plain run's
    next tokens: all accepted; wrong ones: all rejected). The head still runs (its scores from
    `scores`). drafts is asked once a round, at its first guess, with the tokens so far and as many
    places as a round can have (the head's first guess, MAX_DRAFTS times): a replay that counts its
    rounds sees each once."""
    planned = []

    def guess(model, g, out, drafted):
        own = scores(model, g, out, drafted)                          # (vocab,)
        if not drafted:                                               # a new round
            planned[:] = [int(t) for t in drafts(list(out), [int(own.argmax())] * MAX_DRAFTS)]
        return torch.full_like(own, float("-inf")).index_fill_(0, torch.tensor([planned[len(drafted)]]), 0.0)
    return guess


def frequent_tokens(token_lists, size):
    """The `size` most frequent ids of some tokenized texts (ties: the smaller id first): a draft
    vocabulary. EAGLE-3 takes them from its training data; chapter 12 takes the course's prose."""
    counts = collections.Counter(i for ids in token_lists for i in ids)
    return sorted(counts, key=lambda i: (-counts[i], i))[:size]


def coverage(ids, tokens):
    """The share of `tokens` (a list of ids) that are in `ids`: what a draft vocabulary cut to `ids`
    can guess at all, so a bound on the acceptance it keeps."""
    inside = set(int(i) for i in ids)
    return sum(1 for t in tokens if t in inside) / max(1, len(tokens))


@torch.inference_mode()
def teacher_forced_acceptance(model, ids, vocab=None, cut=None, rows=64):
    """How often the head's guess for token t + 2 equals the model's own greedy choice there, along a
    text read as it is (teacher forcing: the text's tokens, not the model's, are the inputs).
    Returns (share, number of guesses): the chance that a first draft is accepted, on this text."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)               # (1, T)
    if ids.shape[1] < 3:
        raise QwenError("teacher_forced_acceptance needs a text of 3 tokens or more, got {n}.",
                        "teacher_forced_acceptance 需要至少 3 个词元的文本，实际是 {n} 个。", n=ids.shape[1])
    _, hidden = forward(model, ids, None, last=True)                          # (1, T, hidden)
    g = head_read(model, ids[0, 1:].tolist(), hidden[:, :-1], None, 0)        # (1, T - 1, hidden)
    agree = 0
    for s in range(0, g.shape[1] - 1, rows):                                  # a few rows of logits at a time
        e = min(s + rows, g.shape[1] - 1)
        greedy = model.logits(hidden[0, s + 1:e + 1])[:, :vocab].argmax(-1)   # the model after ids[.. t + 1]
        if cut is None:
            guess = model.logits(g[0, s:e])[:, :vocab].argmax(-1)
        else:
            guess = cut.ids[product(g[0, s:e], cut.weight).float().argmax(-1)]
        agree += int((guess == greedy).sum())
    n = g.shape[1] - 1
    return agree / n, n
