"""Chapter 15's loop on several processes: torch.distributed's DistributedDataParallel (DDP).

    torchrun --nproc-per-node 2 -m engine.ddp --steps 20 --losses out/ddp.json

Each process builds the same model from the same seed and reads the same stream of global batches;
process r keeps rows r, r + world, ... of each. DDP averages the gradients over the processes during
backward (an all-reduce), so every process applies the same update: with the same global batch, the
curve is the one process's curve, to float rounding in the order of the sums. Nothing else in the loop
changes; on a CPU the processes talk over "gloo" (TCP on this machine).

On a cluster the same code runs with backend "nccl" on GPUs, one process per GPU, torchrun started on
each machine (--nnodes, --rdzv-endpoint). When the model no longer fits on one device, FSDP shards the
weights, gradients and AdamW's moments across the processes instead of copying them: the loop and the
loss stay the same.
"""
import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from qwen.config import Config
from qwen.model import Qwen35
from qwen.pretrain import TokenStream, init_weights, small_config, train_step
from qwen.train import AdamW, decay_groups, lr_at


def corpus_tokens(vocab, n, seed):
    """The tokens both runs train on: learnable phrases of ids (the same on every process)."""
    g = torch.Generator().manual_seed(seed)
    phrases = [torch.randint(0, vocab, (int(k),), generator=g) for k in torch.randint(5, 12, (40,), generator=g)]
    picks = torch.randint(0, len(phrases), (n // 5,), generator=g)
    return torch.cat([phrases[int(i)] for i in picks])[:n]


def curve(steps, batch=8, seq=32, vocab=512, seed=0, rank=0, world=1, wrap=lambda m: m):
    """The loss of each step on the global batch, for a run split over `world` processes (1: alone)."""
    raw = small_config(vocab, hidden_size=32, layers=4, heads=4, head_dim=8, intermediate_size=64)
    model = init_weights(Qwen35(Config.from_dict(raw)), seed=seed)
    opt = AdamW(decay_groups(model, 0.1), lr=1e-3)
    net = wrap(model)                                                    # DDP's all-reduce, or nothing
    stream = TokenStream(corpus_tokens(vocab, 8000, seed), batch, seq, seed=seed)
    losses = []
    for step in range(steps):
        ids = stream.next()[rank::world]                                 # this process's rows
        loss, _ = train_step(net, opt, ids, lr_at(step, 3e-3, 5, steps, 3e-4))
        if world > 1:                                                    # each process's mean, averaged
            total = torch.tensor(loss, dtype=torch.float64)
            dist.all_reduce(total)
            loss = total.item() / world
        losses.append(loss)
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description="Chapter 15's training loop under torchrun (DDP, gloo)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8, help="the global batch, split over the processes")
    p.add_argument("--losses", metavar="FILE", help="write the curve as JSON (rank 0)")
    args = p.parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    try:
        losses = curve(args.steps, batch=args.batch, rank=rank, world=world, wrap=DistributedDataParallel)
        dist.barrier()                          # no process closes its connections while another still reads
    finally:
        dist.destroy_process_group()
    if rank == 0:
        if args.losses:
            Path(args.losses).parent.mkdir(parents=True, exist_ok=True)
            Path(args.losses).write_text(json.dumps({"world": world, "losses": losses}), encoding="utf-8")
        print(f"{world} processes, {args.steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
