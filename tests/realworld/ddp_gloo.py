"""DistributedDataParallel launched by torchrun, on gloo here (NCCL on GPUs), with a DistributedSampler. When a
forward pass runs out of memory the rank halves its batch; the fault plan hits every rank at the same step, as
a batch that is too large for all of them does, so they halve together.

    torchrun --standalone --nproc_per_node 2 ddp_gloo.py --steps 6 --batch-size 512
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 16)).to(device),
                device_ids=[local_rank] if args.backend == "nccl" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    data = torch.randn(args.steps * args.batch_size, 256, generator=g)
    target = torch.randint(0, 16, (args.steps * args.batch_size,), generator=g)
    bs, pos, step = args.batch_size, 0, 0
    while step < args.steps:
        x, y = data[pos:pos + bs].to(device), target[pos:pos + bs].to(device)
        try:
            out = model(x)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            bs //= 2
            print(f"rank {rank}: OOM in forward, batch size now {bs}", flush=True)
            continue
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        pos += bs
        step += 1
        if rank == 0:
            print(f"step {step} bs={bs} loss={loss.item():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
