"""Gated DeltaNet: linear attention with a fixed-size memory that is corrected, not just added to.

Why: full attention keeps every past key and value, so its memory grows with the text. 18 of
Qwen3.5-0.8B's 24 layers keep one matrix per head instead, S (dk x dv). Plain linear attention
only adds v k^T to S, so old associations blur; the delta rule reads what S already predicts
for the new key, k^T S, and writes only the error, scaled by beta in (0, 1):

    S = S * exp(g)                       forget a little (g <= 0 is the log decay, per head)
    S = S + k (beta * (v - k^T S))^T     correct the prediction for k towards v
    o = S^T q                            read with the query

With beta = 1 and a unit-length k (q and k are l2-normalized), reading k returns v exactly. Two
forms of one rule: `delta_rule_recurrent`, token by token, and `delta_rule_chunked`, 64 tokens at a
time, a chunk's corrections solved at once (the WY / UT form). The layer: projections; a causal
depthwise conv and silu over q, k, v; l2norm of q and k, q / sqrt(dk); beta = sigmoid(b);
g = -exp(A_log) * softplus(a + dt_bias); the rule (fp32, as the state); a gated RMSNorm; out_proj.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.lang import QwenError
from qwen.norm import GatedRMSNorm, l2norm
from qwen.linear import Linear


def delta_rule_recurrent(q, k, v, g, beta, state=None, states=None):
    """The gated delta rule, one token at a time (the form that teaches).

    q, k (batch, heads, seq, dk), q scaled; v (batch, heads, seq, dv); g (<= 0), beta (batch, heads, seq);
    state None (zeros) or (batch, heads, dk, dv). Returns out (batch, heads, seq, dv) and the last state,
    fp32. states: None, or fp32 (seq, batch, heads, dk, dv) receiving every token's state, under no_grad.
    """
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    (B, H, T, dk), dv = k.shape, v.shape[-1]
    _check_state(state, (B, H, dk, dv))
    _check_slots(states, (T, B, H, dk, dv), (q, k, v, g, beta, state))
    S = k.new_zeros(B, H, dk, dv) if state is None else state.float().expand(B, H, -1, -1)      # (B, H, dk, dv)
    out = v.new_empty(v.shape)                                                   # (B, H, T, dv)
    for t in range(T):
        decay = g[:, :, t, None, None].exp()                                     # (B, H, 1, 1)
        S = torch.mul(S, decay, out=None if states is None else states[t])       # forget (into token t's slot)
        read = (k[:, :, t, None, :] @ S).squeeze(-2)                             # (B, H, dv): k^T S
        error = beta[:, :, t, None] * (v[:, :, t] - read)                        # (B, H, dv)
        if torch.is_grad_enabled() and states is None:                           # S + k error^T:
            S = S + k[:, :, t, :, None] * error[:, :, None, :]                   # autograd keeps the S read
        else:
            S.addcmul_(k[:, :, t, :, None], error[:, :, None, :])                # else in place
        out[:, :, t] = (q[:, :, t, None, :] @ S).squeeze(-2)                     # S^T q
    return out, S if T else S.clone()                                            # (no token: a copy, not the caller's)


def delta_rule_chunked(q, k, v, g, beta, state=None, chunk=64):
    """The gated delta rule, 64 tokens at a time: `delta_rule_recurrent`'s arguments and results.

    Inside a chunk, with c_t = g_1 + ... + g_t (the log decay since its start) and S0 its first state:

        S_t = exp(c_t) S0 + sum_{j<=t} exp(c_t - c_j) k_j u_j^T       (u_j: the j-th written error)
        u_t = beta_t (v_t - exp(c_t) S0^T k_t - sum_{j<t} exp(c_t - c_j) (k_t . k_j) u_j)

    In matrix form (I + A) U = beta (V - exp(c) K S0), A_tj = beta_t exp(c_t - c_j) k_t . k_j strictly
    lower triangular: one unit-triangular solve gives all 64 errors at once (the WY / UT form). Then

        O  = exp(c) Q S0 + (Q K^T * decay) U        (what S0 predicts, plus this chunk's writes)
        S1 = exp(c_C) S0 + K^T (exp(c_C - c) U)     (S0 decayed to the chunk's end, plus the writes)
    """
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    (B, H, T, dk), dv = k.shape, v.shape[-1]
    _check_state(state, (B, H, dk, dv))
    _check_chunk(chunk)
    n = -(-T // chunk)                                                        # chunks; the last may be shorter
    q, k, v = q.reshape(B * H, T, dk), k.reshape(B * H, T, dk), v.reshape(B * H, T, dv)   # heads as a batch
    beta = beta.reshape(B * H, 1, T)                                          # a row: bc scales columns, bc.mT rows
    # exp(c_t - c_j) is summed as exp(g_{j+1} + .. + g_t): the difference of two large running sums
    # loses digits. float64 where the device has it; g clamped at -80 (no -inf); the last chunk padded with 0.
    g = F.pad(g.clamp(min=-80.0).reshape(B * H, T), (0, n * chunk - T))
    g = g.view(B * H, n, chunk).to(decay_dtype(g.device))                    # (BH, n, C): log decay per token
    start = g.cumsum(-1).exp().float()[..., None]                             # (BH, n, C, 1): exp(c_t), since S0
    to_end = F.pad(g[..., 1:], (0, 1)).flip(-1).cumsum(-1).flip(-1).float().exp()[..., None]  # exp(g_{t+1} + .. + g_C)
    S = k.new_zeros(B * H, dk, dv) if state is None else state.float().expand(B, H, dk, dv).reshape(B * H, dk, dv)
    # S and U change in place unless autograd keeps them for backward
    record = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, g, beta, state))
    S = S.clone() if not record and state is not None else S                  # never the caller's state
    out = v.new_empty(B * H, T, dv)
    eye = torch.eye(chunk, device=k.device)
    for i, s in enumerate(range(0, T, chunk)):
        e = min(s + chunk, T)
        qc, kc, vc, bc = q[:, s:e], k[:, s:e], v[:, s:e], beta[:, :, s:e]     # (BH, C, d), (BH, 1, C)
        gi, st = g[:, i, :e - s], start[:, i, :e - s]                         # (BH, C), (BH, C, 1)
        # (BH, C, C): exp(g_{j+1} + ... + g_t) for j <= t (row m holds g_m, summed down the rows), 0 above
        decay = gi[:, :, None].expand(-1, -1, e - s).tril(-1).cumsum(-2).float().exp().tril()
        kT = kc.transpose(-1, -2)                                             # (BH, dk, C)
        A = (kc @ kT).mul_(decay).mul_(bc.mT)                                 # (BH, C, C); diagonal unused
        inverse = torch.linalg.solve_triangular(A, eye[:e - s, :e - s].expand_as(A), upper=False, left=False,
                                                unitriangular=True)           # (I + A)^-1, from X (I + A) = I
        rhs = torch.baddbmm(vc, kc * st, S, alpha=-1)                         # (BH, C, dv): V - e^c K S0
        U = inverse.mul(bc) @ rhs                                             # (I + A)^-1 beta rhs: the written errors
        o = (qc * st) @ S                                                     # what S0 predicts, read by q,
        out[:, s:e] = o.baddbmm_((qc @ kT).mul_(decay), U)                    # + this chunk's writes
        to_chunk_end, end = to_end[:, i, :e - s], start[:, i, -1:]            # (BH, C, 1), (BH, 1, 1)
        if record:                                                            # to the next chunk:
            S = (S * end).baddbmm_(kT, U * to_chunk_end)                      # S1 = exp(c_C) S0 + K^T (.. U)
        else:
            S = S.mul_(end).baddbmm_(kT, U.mul_(to_chunk_end))                # the same, in place
    return out.reshape(B, H, T, dv), S.reshape(B, H, dk, dv)


def decay_dtype(device):
    """float64 for the chunked form's log decays; float32 on Apple's GPUs (MPS), which have no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


# Bad input: this module's checks, in one place, so that the forward paths read as the math

def _check_state(state, shape):
    """A state: (batch, heads, dk, dv), or broadcast to it over batch and heads."""
    if state is not None and not isinstance(state, torch.Tensor):
        raise QwenError("delta rule: the state is a {t}, not a tensor; pass None or a tensor of shape (batch, heads, "
                        "dk, dv) = {want}.", "delta rule：state 是 {t}，不是张量；请传 None，或形状为 (batch, heads, dk, "
                        "dv) = {want} 的张量。", t=type(state).__name__, want=shape)
    got = () if state is None else tuple(state.shape)
    if state is not None and (not 2 <= len(got) <= len(shape) or got[-2:] != shape[-2:]
                              or any(a not in (1, b) for a, b in zip(got[::-1], shape[::-1]))):
        raise QwenError("delta rule: the state has shape {got}; it must be (batch, heads, dk, dv) = {want}, or "
                        "broadcast to it over batch and heads (one state for the whole batch: {one}).",
                        "delta rule：state 的形状是 {got}；应为 (batch, heads, dk, dv) = {want}，或在 batch 和 heads "
                        "两维上能广播成它（整个批次共用一个状态：{one}）。", got=got, want=shape, one=(1,) + shape[1:])


def _check_slots(states, shape, inputs):
    """`states`: an fp32 tensor of (seq, batch, heads, dk, dv), and no input wanting a gradient."""
    tensor = isinstance(states, torch.Tensor)
    if states is not None and (not tensor or tuple(states.shape) != shape or states.dtype != torch.float32):
        got = f"{tuple(states.shape)} {str(states.dtype).replace('torch.', '')}" if tensor else \
            f"a {type(states).__name__}"
        raise QwenError("delta rule: states is {got}; give an fp32 tensor of shape (seq, batch, heads, dk, dv) = "
                        "{want}, or None.", "delta rule：states 是 {got}；请给形状为 (seq, batch, heads, dk, dv) = "
                        "{want} 的 fp32 张量，或 None。", got=got, want=shape)
    if states is not None and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        raise QwenError("delta rule: states records no gradient; call it under torch.no_grad(), or leave states None.",
                        "delta rule：states 不记录梯度；请在 torch.no_grad() 下调用，或不传 states。")


def _check_chunk(chunk):
    if not isinstance(chunk, int) or chunk < 1:
        raise QwenError("delta_rule_chunked: chunk = {chunk!r}; it must be a whole number of tokens, 1 or more "
                        "(64 by default).", "delta_rule_chunked：chunk = {chunk!r}；它必须是不小于 1 的整数个词元"
                        "（默认 64）。", chunk=chunk)


def _check_window(past, want):
    if past.shape != want:
        raise QwenError("The linear-attention cache holds a conv window of shape {had} (batch, conv_dim, kernel-1) "
                        "but this call needs {want}: a different batch needs a new cache (model.new_cache()).",
                        "线性注意力缓存里的卷积窗口形状是 {had} (batch, conv_dim, kernel-1)，而这次调用需要 {want}："
                        "批次不同时请用新的缓存 (model.new_cache())。", had=list(past.shape), want=list(want))
    return past


def _check_heads(nk, nv):
    if nv % nk:
        raise QwenError("GatedDeltaNet: {nv} value heads cannot be shared evenly by {nk} key heads; "
                        "linear_num_value_heads must be a multiple of linear_num_key_heads.",
                        "GatedDeltaNet：{nk} 个键头无法平均分给 {nv} 个值头；linear_num_value_heads 必须是 "
                        "linear_num_key_heads 的整数倍。", nv=nv, nk=nk)


class Trail:
    """What one layer keeps while verifying drafts (qwen/mtp.py): its conv input window and its state
    after every token, in memory kept from one verify pass to the next (`slots`)."""

    def __init__(self):
        self.window = None              # (batch, conv_channels, kernel - 1 + tokens)
        self.states = None              # (tokens, batch, value_heads, dk, dv) fp32: after each token
        self.memory = None              # what states is cut from: the largest pass so far

    def slots(self, shape, device):
        """Room for this pass's states (tokens, batch, heads, dk, dv), fp32 on `device`."""
        m = self.memory
        if m is None or m.shape[1:] != shape[1:] or len(m) < shape[0] or m.device != torch.device(device):
            self.memory = torch.empty(shape, dtype=torch.float32, device=device)
        self.states = self.memory[:shape[0]]
        return self.states


class GatedDeltaNet(nn.Module):
    """One linear-attention layer, with the checkpoint's parameter names: x (batch, seq, hidden) ->
    (batch, seq, hidden). cache.conv (the last kernel-1 conv inputs) and cache.state (batch, value_heads,
    dk, dv) are read, then replaced; a cache's `trail` also keeps the window and every token's state."""

    def __init__(self, cfg):
        super().__init__()
        self.nk, self.nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kernel = cfg.linear_conv_kernel_dim
        _check_heads(self.nk, self.nv)
        H, key_dim, value_dim = cfg.hidden_size, self.nk * self.dk, self.nv * self.dv
        self.conv_dim = 2 * key_dim + value_dim                                   # q, k, v share one conv
        self.in_proj_qkv = Linear(H, self.conv_dim, bias=False)
        self.in_proj_z = Linear(H, value_dim, bias=False)                      # the output gate
        self.in_proj_b = Linear(H, self.nv, bias=False)                        # beta, per value head
        self.in_proj_a = Linear(H, self.nv, bias=False)                        # decay input, per value head
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        # decay rates 1..16 at init, made on the CPU even when the model is built on "meta"
        self.A_log = nn.Parameter(torch.linspace(1, 16, self.nv, device="cpu").log())
        self.norm = GatedRMSNorm(self.dv, cfg.rms_norm_eps)
        self.out_proj = Linear(value_dim, H, bias=False)

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        q, k, v, g, beta = self.rule_inputs(x, cache)                            # (B, nv, T, ...) fp32
        state, trail = (None, None) if cache is None else (cache.state, cache.trail)
        if trail is not None:                                                    # every token's state kept
            slots = trail.slots((T, B, self.nv, self.dk, self.dv), q.device)     # (T, B, nv, dk, dv) fp32
            out, state = delta_rule_recurrent(q, k, v, g, beta, state, states=slots)
        else:
            rule = delta_rule_recurrent if T == 1 else delta_rule_chunked
            out, state = rule(q, k, v, g, beta, state)                           # (B, nv, T, dv)
        if cache is not None:
            cache.state = state
        z = self.in_proj_z(x).reshape(B, T, self.nv, self.dv)                    # the gate
        out = self.norm(out.transpose(1, 2).to(x.dtype), z)                      # (B, T, nv, dv)
        return self.out_proj(out.reshape(B, T, self.nv * self.dv))               # (B, T, hidden)

    def rule_inputs(self, x, cache=None):
        """What the rule reads, from x (batch, seq, hidden): q, k (batch, value_heads, seq, dk), v (.., dv),
        g and beta (batch, value_heads, seq); fp32 but v, in x's dtype (the rule upcasts it)."""
        B, T, _ = x.shape
        qkv = self.causal_conv(self.in_proj_qkv(x), cache)                       # (B, T, conv_dim)
        q, k, v = qkv.split([self.nk * self.dk, self.nk * self.dk, self.nv * self.dv], -1)
        q = l2norm(q.reshape(B, T, self.nk, self.dk).transpose(1, 2).float()) / math.sqrt(self.dk)  # (B, nk, T, dk)
        k = l2norm(k.reshape(B, T, self.nk, self.dk).transpose(1, 2).float())    # unit length (q then scaled)
        v = v.reshape(B, T, self.nv, self.dv).transpose(1, 2)                    # (B, nv, T, dv)
        if self.nv > self.nk:                                                    # a key head serves nv/nk value heads
            q, k = (t.repeat_interleave(self.nv // self.nk, dim=1) for t in (q, k))   # (B, nv, T, dk)
        beta, g = self.beta_and_decay(x)                                         # (B, nv, T) each
        return q, k, v, g, beta

    def causal_conv(self, qkv, cache=None):
        """Depthwise conv over time, each channel mixing its own last `kernel` inputs, then silu;
        causal: padded on the left (zeros, or the cached inputs)."""
        x = qkv.transpose(1, 2)                                                  # (B, conv_dim, T)
        want = (x.shape[0], x.shape[1], self.kernel - 1)                         # (B, conv_dim, kernel-1)
        past = None if cache is None else cache.conv                             # None: nothing read yet
        past = x.new_zeros(want) if past is None else _check_window(past, want)
        x = torch.cat([past.to(x.dtype), x], -1)                                 # (B, conv_dim, kernel-1+T)
        if cache is not None:
            cache.conv = x[:, :, x.shape[-1] - (self.kernel - 1):].clone()       # the next call's window
            if cache.trail is not None:
                cache.trail.window = x                                           # every token's window
        if x.shape[-1] < self.kernel:                                            # no new token: no output
            y = x[:, :, :0]
        elif x.shape[-1] == self.kernel:                                         # one new token (decoding):
            w = self.conv1d.weight[:, 0]                                         # a dot product per channel,
            y = (x.float() * w.float()).sum(-1, keepdim=True).to(x.dtype)        # cheaper than a conv call
        else:
            y = F.conv1d(x, self.conv1d.weight, groups=self.conv_dim)             # (B, conv_dim, T)
        return F.silu(y).transpose(1, 2)                                         # (B, T, conv_dim)

    def beta_and_decay(self, x):
        """beta = sigmoid(b) in (0, 1); log decay g = -exp(A_log) * softplus(a + dt_bias) < 0. fp32."""
        beta = self.in_proj_b(x).float().sigmoid()                               # (B, T, nv)
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        return beta.transpose(1, 2), g.transpose(1, 2)                           # (B, nv, T)

    def extra_repr(self):
        return f"key_heads={self.nk}, value_heads={self.nv}, dk={self.dk}, dv={self.dv}, kernel={self.kernel}"
