"""Training a Qwen3.5 from nothing (chapter 15): a small config, a random start, batches cut from
one stream of tokens, and the loop that chapter 14's pieces make.

Why from nothing: a model whose every weight starts as noise predicts each of its V tokens alike,
so its loss starts at ln(V). Everything it later knows, it learned from the batches below. When
the same start, the same batches and the same AdamW give transformers' Qwen3.5 the same loss curve
step for step (tests/test_pretrain.py), the model written by hand is the real architecture, and so
is what it learns.

    cfg = small_config(vocab_size=V)          the real layout: 3 Gated DeltaNet layers, then attention
    model = Qwen35(Config.from_dict(cfg))
    init_weights(model, seed=0)               transformers' rules: N(0, 0.02), norms at their identity
    stream = TokenStream(tokens, batch=8, seq=64, seed=0)
    for step in range(steps):
        ids = stream.next()                   (batch, seq), every row a window of the corpus
        loss = train_step(model, opt, ids, lr_at(step, ...))

The stream's order is a seeded shuffle of the corpus's windows, epoch after epoch, so a run is
repeatable, and one that stops can resume at the same window (`state_dict` / `load_state_dict`).
"""
import math

import torch

from qwen.deltanet import GatedDeltaNet
from qwen.lang import QwenError
from qwen.norm import GatedRMSNorm, RMSNorm
from qwen.train import clip_grad_norm, next_token_loss


def small_config(vocab_size, hidden_size=64, layers=4, heads=4, head_dim=16, intermediate_size=192,
                 tie=True):
    """config.json's text part for a small Qwen3.5, in the real keys: every 4th layer full attention
    (3 : 1, as in 0.8B), attention's output gate, a quarter of each head rotated, the DeltaNet's
    conv of 4. Only the widths and the depth are small."""
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "float32",
        "eos_token_id": vocab_size - 1, "full_attention_interval": 4, "head_dim": head_dim,
        "hidden_act": "silu", "hidden_size": hidden_size, "initializer_range": 0.02,
        "intermediate_size": intermediate_size, "layer_types": layer_types, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": head_dim, "linear_num_key_heads": heads // 2, "linear_num_value_heads": heads,
        "linear_value_head_dim": head_dim, "max_position_embeddings": 4096, "mlp_only_layers": [],
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": heads // 2,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": tie, "use_cache": True, "vocab_size": vocab_size,
        "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [1, 1, 0]},
    }


@torch.no_grad()
def init_weights(model, seed=0, std=0.02):
    """A random start by transformers' rules for Qwen3.5, seeded, in place; returns the model.

    Matrices, the embedding and the conv: N(0, std), small enough that every logit starts near 0
    (the loss near ln V). RMSNorm's w: 0, its scale 1 + w is then 1. The gated norm's w: 1 (it is
    not zero-centred). dt_bias: 1. A_log: log of U(0.01, 16), each head its own decay speed."""
    g = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.weight.zero_()
        elif isinstance(module, GatedRMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, GatedDeltaNet):
            module.dt_bias.fill_(1.0)
            module.A_log.copy_(torch.empty(module.A_log.shape).uniform_(0.01, 16, generator=g).log())
        for name, p in module.named_parameters(recurse=False):
            if p.dim() >= 2:                                               # matrices, embedding, conv
                p.copy_(torch.randn(p.shape, generator=g) * std)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


class TokenStream:
    """Batches of windows from one long 1-D tensor of token ids: (batch, seq) ids per `next()`.

    The corpus is cut into len // seq windows; each epoch visits all of them once, in the order
    of a permutation seeded by (seed, epoch). A window's label at t is its own id at t: the shift
    happens in the loss (qwen.train.next_token_loss), so seq ids give seq - 1 predictions."""

    def __init__(self, tokens, batch, seq, seed=0):
        self.tokens, self.batch, self.seq, self.seed = tokens, batch, seq, seed
        self.windows = len(tokens) // seq
        if self.windows < batch:
            raise QwenError("{n} tokens make {w} windows of {seq}: fewer than one batch of {batch}. Give a "
                            "longer text, or a smaller batch or window.", "{n} 个词元只能切出 {w} 个长 {seq} "
                            "的窗口，不够一个 {batch} 行的批次。请换更长的文字，或减小批次或窗口。",
                            n=len(tokens), w=self.windows, seq=seq, batch=batch)
        self.epoch, self.index = 0, 0

    def _order(self):
        return torch.randperm(self.windows, generator=torch.Generator().manual_seed(self.seed * 100003 + self.epoch))

    def next(self):
        order, rows = self._order(), []
        for _ in range(self.batch):
            if self.index == self.windows:                                  # the next epoch, a new order
                self.epoch, self.index = self.epoch + 1, 0
                order = self._order()
            start = int(order[self.index]) * self.seq
            rows.append(self.tokens[start:start + self.seq])
            self.index += 1
        return torch.stack(rows)                                            # (batch, seq)

    @property
    def tokens_seen(self):
        return (self.epoch * self.windows + self.index) * self.seq

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "seq": self.seq,
                "batch": self.batch, "windows": self.windows}

    def load_state_dict(self, state):
        mine = self.state_dict()
        for key in ("seed", "seq", "batch", "windows"):
            if state.get(key) != mine[key]:
                raise QwenError("The saved run cut its batches with {key} {a}, this one with {b}: resume with "
                                "the same corpus and options, or start afresh.", "保存的训练用 {key} {a} 切批次，"
                                "这次是 {b}：请用同样的语料和选项继续，或者重新开始。",
                                key=key, a=state.get(key), b=mine[key])
        self.epoch, self.index = state["epoch"], state["index"]


def train_step(model, opt, ids, lr, max_norm=1.0):
    """One update on a batch: the loss, its gradient, clipping, AdamW at learning rate lr.
    Returns (loss, gradient norm before clipping) as floats."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = next_token_loss(model(ids), ids)
    loss.backward()
    norm = clip_grad_norm([p for p in model.parameters() if p.requires_grad], max_norm)
    opt.step()
    return loss.item(), float(norm)


@torch.no_grad()
def held_out_loss(model, tokens, seq, batch=8):
    """The mean next-token loss over every window of held-out tokens (no update): what the model
    predicts of text it never trained on, the number that says whether it learned or memorised."""
    windows = tokens[:len(tokens) // seq * seq].view(-1, seq)              # (windows, seq)
    total, count = 0.0, 0
    for rows in windows.split(batch):
        n = rows.shape[0] * (seq - 1)
        total += next_token_loss(model(rows), rows).item() * n
        count += n
    return total / count


def uniform_loss(vocab_size):
    """ln V: the loss of a model that gives every token the same probability, where training starts."""
    return math.log(vocab_size)


def parameters(model):
    """The number of trainable weights (the tied table counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
