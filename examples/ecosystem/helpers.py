#!/usr/bin/env python3
"""The ecosystem's own OOM helpers, each driving the same small GPT-style model on synthetic data, so that
oomharness can judge what each one does when memory runs out (issue 19; results in docs/ecosystem.md):

    helpers.py accelerate    # accelerate.utils.find_executable_batch_size around the training loop
    helpers.py transformers  # transformers.Trainer(auto_find_batch_size=True)
    helpers.py lightning     # Lightning's batch-size finder (Tuner.scale_batch_size), then fit

Each prints `step N bs=B loss=L` after every optimizer step (the suite's observe: patterns) and trains
--steps optimizer steps. Nothing here handles the OOM itself: what happens is the helper's doing.
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("helper", choices=("accelerate", "transformers", "lightning"))
    p.add_argument("--batch", type=int, default=64, help="the batch the helper starts from")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--reduce", choices=("helper", "half"), default="helper",
                   help="accelerate: the helper's own reduction (x0.9), or a reduce_batch_size_fn that halves")
    return p.parse_args()


class TinyGPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.d_model)
        layer = nn.TransformerEncoderLayer(a.d_model, 8, 4 * a.d_model, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, a.layers)
        self.head = nn.Linear(a.d_model, a.vocab)

    def forward(self, input_ids, labels=None):
        h = self.head(self.blocks(self.emb(input_ids)))
        loss = F.cross_entropy(h.reshape(-1, h.shape[-1]), labels.reshape(-1)) if labels is not None else None
        return {"loss": loss, "logits": h}


class Tokens(torch.utils.data.Dataset):
    def __init__(self, a, n=100000):
        self.a, self.n = a, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.a.vocab, (self.a.seq + 1,), generator=g)
        return {"input_ids": ids[:-1], "labels": ids[1:]}


def report(step, bs, loss):
    print("step %d bs=%d loss=%.6f" % (step, bs, loss), flush=True)


def with_accelerate(a):
    from accelerate import Accelerator
    from accelerate.utils import find_executable_batch_size
    accelerator = Accelerator()
    tried = [a.batch]

    def halve():
        tried.append(tried[-1] // 2)
        return tried[-1]

    @find_executable_batch_size(starting_batch_size=a.batch,
                                reduce_batch_size_fn=halve if a.reduce == "half" else None)
    def train(batch_size):
        accelerator.free_memory()
        torch.manual_seed(0)
        model = TinyGPT(a)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loader = torch.utils.data.DataLoader(Tokens(a), batch_size=batch_size)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for step, batch in enumerate(loader, start=1):
            loss = model(**batch)["loss"]
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            report(step, batch_size, loss.item())
            if step == a.steps:
                return

    train()


def with_transformers(a):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            loader = kw.get("train_dataloader")
            bs = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", 0)
            loss = state.log_history[-1].get("loss", 0.0) if state.log_history else 0.0
            report(state.global_step, bs or 0, loss)

    torch.manual_seed(0)
    args = TrainingArguments(output_dir="hf-out", per_device_train_batch_size=a.batch, max_steps=a.steps,
                             auto_find_batch_size=True, logging_steps=1, report_to=[], save_strategy="no",
                             learning_rate=1e-4, dataloader_num_workers=0, disable_tqdm=True)
    Trainer(model=TinyGPT(a), args=args, train_dataset=Tokens(a), callbacks=[Steps()]).train()


def with_lightning(a):
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.tuner import Tuner
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.tuner import Tuner

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = a.batch
            self.model = TinyGPT(a)

        def training_step(self, batch, i):
            loss = self.model(**batch)["loss"]
            return loss

        def on_train_batch_end(self, outputs, batch, i):
            if not self.trainer.sanity_checking and self.trainer.state.fn == "fit" and not getattr(self.trainer, "_oomh_tuning", False):
                report(self.trainer.global_step, batch["input_ids"].shape[0], float(outputs["loss"]))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Tokens(a), batch_size=self.batch_size)

    torch.manual_seed(0)
    module = Module()
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=a.steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer._oomh_tuning = True
    found = Tuner(trainer).scale_batch_size(module, mode="binsearch", init_val=a.batch, max_trials=8)
    print("lightning batch-size finder chose %s" % found, flush=True)
    trainer._oomh_tuning = False
    trainer.fit(module)


if __name__ == "__main__":
    a = parse()
    {"accelerate": with_accelerate, "transformers": with_transformers, "lightning": with_lightning}[a.helper](a)
    print("done", flush=True)
    sys.exit(0)
