"""Lightning, unchanged: its own demo model (lightning.pytorch.demos.transformer.LightningTransformer, a
2-layer Transformer LM) on its own dataset class (WikiText2, reading data/wikitext-2.txt: we write that file
with synthetic words, so nothing is downloaded), trained by `Trainer.fit` with `ModelCheckpoint` (every
`--save_every` steps, `save_last`) and resumed by `ckpt_path="last"`; `--find_batch_size` adds the
`BatchSizeFinder` callback (its power mode) on the data module's `batch_size`. `--devices N` trains with
Lightning's DDP strategy on N GPUs (started by the harness's `ranks: N`, which Lightning finds as torchelastic's
environment; `--backend gloo` for the virtual device, which has no NCCL)."""
import argparse
import os
import random


def write_wikitext(path, n_words, seed=0):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(600):
            f.write(" ".join("w%d" % rng.randrange(n_words) for _ in range(rng.randint(5, 30))) + "\n")
        f.write(" ".join("w%d" % i for i in range(n_words)) + "\n")  # every word once: a fixed vocabulary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--default_root_dir", required=True)
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--max_steps", type=int, default=8)
    ap.add_argument("--save_every", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=20000)
    ap.add_argument("--find_batch_size", action="store_true")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--backend", default=None)
    a = ap.parse_args()
    import lightning as L
    from lightning.pytorch.callbacks import BatchSizeFinder, ModelCheckpoint
    from lightning.pytorch.demos.transformer import LightningTransformer, WikiText2
    from pathlib import Path
    from torch.utils.data import DataLoader

    # LightningTransformer.prepare_data reads ./data/wikitext-2.txt (WikiText2's default folder, downloading
    # it when absent): run in the output folder, where the file is written first.
    os.makedirs(a.default_root_dir, exist_ok=True)
    os.chdir(a.default_root_dir)
    data_dir = Path("data")
    write_wikitext(str(data_dir / "wikitext-2.txt"), a.vocab)

    class WikiData(L.LightningDataModule):
        def __init__(self, batch_size):
            super().__init__()
            self.batch_size = batch_size
            self.dataset = WikiText2(data_dir=data_dir, download=False)

        def train_dataloader(self):
            return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=False)

    L.seed_everything(0)
    dm = WikiData(a.batch_size)
    model = LightningTransformer(vocab_size=dm.dataset.vocab_size)
    ckpt_dir = "checkpoints"
    callbacks = [ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=a.save_every, save_last=True, save_top_k=-1)]
    if a.find_batch_size:
        callbacks.append(BatchSizeFinder(mode="power", init_val=a.batch_size, max_trials=4))
    strategy = "auto"
    if a.devices > 1:
        from lightning.pytorch.strategies import DDPStrategy
        strategy = DDPStrategy(process_group_backend=a.backend)
    trainer = L.Trainer(default_root_dir=".", max_steps=a.max_steps, accelerator="gpu", devices=a.devices, strategy=strategy,
                        callbacks=callbacks, logger=False, enable_progress_bar=False, log_every_n_steps=1,
                        enable_model_summary=False)
    last = os.path.join(ckpt_dir, "last.ckpt")
    trainer.fit(model, datamodule=dm, ckpt_path="last" if os.path.exists(last) else None)


if __name__ == "__main__":
    main()
