"""Accelerate's find_executable_batch_size around the training function, as in accelerate's
examples/by_feature/memory.py: on an out-of-memory error the function is called again with a smaller batch.

    python accelerate_find_batch_size.py --batch_size 64 --max_steps 8
"""
import argparse
import os
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_lm import RandomTokens, TinyLM  # noqa: E402


def training_function(args):
    accelerator = Accelerator()

    @find_executable_batch_size(starting_batch_size=args.batch_size)
    def inner_training_loop(batch_size):
        nonlocal accelerator
        accelerator.free_memory()
        torch.manual_seed(42)
        model = TinyLM()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dataloader = DataLoader(RandomTokens(), batch_size=batch_size, shuffle=False)
        model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
        model.train()
        for step, batch in enumerate(train_dataloader, start=1):
            outputs = model(**batch)
            accelerator.backward(outputs["loss"])
            optimizer.step()
            optimizer.zero_grad()
            accelerator.print(f"step {step} bs={batch_size} loss={outputs['loss'].item():.4f}")
            if step >= args.max_steps:
                break

    inner_training_loop()


def main():
    parser = argparse.ArgumentParser(description="find_executable_batch_size example")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_steps", type=int, default=8)
    args = parser.parse_args()
    training_function(args)


if __name__ == "__main__":
    main()
