"""Hugging Face Trainer with auto_find_batch_size=True: the Trainer retries with a smaller batch when the
first one does not fit (it uses Accelerate's find_executable_batch_size).

    python hf_trainer.py --output_dir out --per_device_train_batch_size 64 --max_steps 8
"""
import argparse
import logging
import os
import sys

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_lm import RandomTokens, TinyLM  # noqa: E402

logger = logging.getLogger(__name__)


class PrintStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        print(f"step {state.global_step} bs={state.train_batch_size}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="hf-out")
    parser.add_argument("--per_device_train_batch_size", type=int, default=64)
    parser.add_argument("--max_steps", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(name)s - %(message)s")
    torch.manual_seed(0)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.per_device_train_batch_size,
        max_steps=args.max_steps,
        auto_find_batch_size=True,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=TinyLM(), args=training_args, train_dataset=RandomTokens(), callbacks=[PrintStep()])
    result = trainer.train()
    logger.info("train_loss=%.4f", result.training_loss)


if __name__ == "__main__":
    main()
