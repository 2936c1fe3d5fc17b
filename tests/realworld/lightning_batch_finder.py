"""A LightningModule whose batch size Lightning's Tuner.scale_batch_size picks before fit().

    python lightning_batch_finder.py --batch_size 64 --max_steps 8
"""
import argparse
import os
import sys

import lightning as L
import torch
from lightning.pytorch.tuner import Tuner
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_lm import RandomTokens, TinyLM  # noqa: E402


class LitLM(L.LightningModule):
    def __init__(self, batch_size=64):
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.model = TinyLM()

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch)["loss"]
        if self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            print(f"step {self.global_step + 1} bs={batch['input_ids'].shape[0]}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)

    def train_dataloader(self):
        return DataLoader(RandomTokens(), batch_size=self.batch_size)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_steps", type=int, default=8)
    args = parser.parse_args()
    L.seed_everything(0)
    model = LitLM(args.batch_size)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=args.max_steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    new_size = Tuner(trainer).scale_batch_size(model, mode="power", init_val=args.batch_size, max_trials=6)
    print(f"batch size finder chose {new_size}", flush=True)
    trainer.fit(model)


if __name__ == "__main__":
    main()
