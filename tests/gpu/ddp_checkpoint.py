#!/usr/bin/env python3
"""A DistributedDataParallel trainer written the way public DDP code is written: torchrun's environment,
DistributedSampler, rank 0 saves an atomic checkpoint every few steps (tmp file, then os.replace) and every
rank loads it at start with map_location to its own device. An OOM is not caught: the process dies and
the harness's `restart: {scope: all}` starts every rank again, which resumes from the checkpoint.

    ddp_checkpoint.py --ckpt DIR/last.pt                      # correct
    ddp_checkpoint.py --ckpt DIR/last.pt --no-load-rank 1     # broken twin: rank 1 never loads the
                                                              # checkpoint, so it trains from scratch

Issue 33 (docs/distributed.md): on GPUs with NCCL; the same file runs on gloo under the virtual device.
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--no-load-rank", type=int, default=-1)
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    virtual = os.environ.get("OOMH_DEVICE") == "virtual"
    use_nccl = torch.cuda.is_available() and not virtual
    if use_nccl:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_nccl else "gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = nn.Sequential(nn.Linear(128, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    model = DDP(model, device_ids=[local_rank] if use_nccl else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    start_step = 0
    if os.path.exists(args.ckpt) and rank != args.no_load_rank:
        state = torch.load(args.ckpt, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
        print(f"[rank {rank}] resumed from {args.ckpt} at step {start_step}", flush=True)

    # Resume where the data was, as HF Trainer and Accelerate's skip_first_batches do: the same epoch's
    # shuffle, past the batches the checkpoint already trained on.
    step = start_step
    epoch, skip = divmod(start_step, len(loader))
    while step < args.steps:
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if i < skip:
                continue
            if step >= args.steps:
                break
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                print(f"step {step} loss={loss.item():.4f}", flush=True)
            if step % args.save_every == 0:
                if rank == 0:
                    tmp = args.ckpt + ".tmp"
                    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                "step": step}, tmp)
                    os.replace(tmp, args.ckpt)
                dist.barrier()
        epoch += 1
        skip = 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
