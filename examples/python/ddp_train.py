#!/usr/bin/env python3
"""A small data-parallel trainer for oomharness's distributed jobs (`ranks: N`, docs/distributed.md): each
rank trains the same MLP on its own synthetic batches and averages the gradients with one all_reduce of a
bucket after every backward, as DistributedDataParallel does. torch.distributed with gloo on the CPU and the
virtual CUDA device, NCCL on GPUs. Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK for the GPU) as torchrun sets them.

    ddp_train.py --recovery consistent   # correct: after each backward, every rank all-reduces "did I hit an
                                         #   OOM"; when any did, every rank halves its batch and redoes the step
    ddp_train.py --recovery local        # broken: the rank that failed halves and retries on its own; the
                                         #   others keep their batch: the ranks train on different batch sizes
    ddp_train.py --recovery none         # broken: no handler; the failing rank raises its OOM
    ddp_train.py --recovery none --keepalive
                                         # ... and a non-daemon thread (as a metrics uploader is) keeps its
                                         #   process alive, so the other ranks wait in all_reduce forever

On NCCL the others hang whether the failing process exits or not; on gloo a peer that exits closes its
connections and the others fail at once ("Connection closed by peer"), so the CPU twin of that hang needs
--keepalive. Prints `step N bs=B loss=L` after every step, and `rank R: ...` when it recovers.
"""

import argparse
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=512, help="samples per rank per step")
    p.add_argument("--min-batch", type=int, default=1)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recovery", choices=("consistent", "local", "none"), default="consistent")
    p.add_argument("--keepalive", action="store_true", help="a non-daemon thread keeps the process alive")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--collective-timeout", type=float, default=1800, help="seconds (gloo's and NCCL's default)")
    return p.parse_args(argv)


def is_oom(exc):
    kind = getattr(torch.cuda, "OutOfMemoryError", None)
    if kind is not None and isinstance(exc, kind):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc)


def main(argv=None):
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    on_gpu = torch.cuda.is_available()
    virtual = os.environ.get("OOMH_DEVICE") == "virtual"  # the virtual device's tensors live on the CPU
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if on_gpu and not virtual else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.collective_timeout))
    device = torch.device("cuda") if on_gpu else torch.device("cpu")

    if args.keepalive:
        def heartbeat():
            while True:
                time.sleep(0.2)
        threading.Thread(target=heartbeat, name="metrics-uploader", daemon=False).start()

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                          nn.ReLU(), nn.Linear(args.hidden, args.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # Note [Buffers a collective holds]: the tensors handed to all_reduce live as long as the run, as DDP's
    # reducer keeps its buckets. torch's gloo backend releases a collective's tensors on its worker thread some
    # time after the call returned; if the Python object was gone by then (a gradient set to None by
    # zero_grad), that release takes the GIL, and during interpreter shutdown a thread that takes the GIL is
    # ended: "terminate called without an active exception", SIGABRT after the last step (torch 2.13 and
    # 2.14, about 1 run in 20 on 2 busy cores, without oomharness too; pytorch/pytorch#190489 is that crash
    # without destroy_process_group). A buffer that Python still holds is released without the GIL.
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    bucket = torch.zeros(sum(sizes), device=device)
    anyone = torch.zeros(1, device=device)

    def batch(step, size):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
        x = torch.randn(size, args.features, generator=g)
        y = torch.randint(0, args.classes, (size,), generator=g)
        return x.to(device), y.to(device)

    bs = args.batch
    step = 0
    while step < args.steps:
        failed = 0
        loss = None
        try:
            x, y = batch(step, bs)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
        except Exception as e:  # noqa: BLE001
            if args.recovery == "none" or not is_oom(e):
                raise
            failed = 1
            loss = x = y = None
            opt.zero_grad(set_to_none=True)
            if args.recovery == "local":
                # The bug: the others are already in the gradient all_reduce with their full batch.
                bs = max(args.min_batch, bs // 2)
                print("rank %d: out of memory at step %d, halving to %d on this rank" % (rank, step + 1, bs), flush=True)
                continue
        if args.recovery == "consistent":
            anyone.fill_(float(failed))
            dist.all_reduce(anyone, op=dist.ReduceOp.MAX)
            if anyone.item() > 0:
                opt.zero_grad(set_to_none=True)
                loss = None
                bs = max(args.min_batch, bs // 2)
                print("rank %d: a rank ran out of memory at step %d, every rank halves to %d" % (rank, step + 1, bs),
                      flush=True)
                continue
        torch.cat([p.grad.reshape(-1) for p in params], out=bucket)
        dist.all_reduce(bucket)
        bucket /= world
        for p, part in zip(params, bucket.split(sizes)):
            p.grad.copy_(part.view_as(p.grad))
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        print("step %d bs=%d loss=%.4f" % (step, bs, loss.item()), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
