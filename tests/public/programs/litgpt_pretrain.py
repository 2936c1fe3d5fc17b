"""litgpt's pretraining, unchanged: `litgpt.pretrain.setup` (what `litgpt pretrain` runs) with the
pythia-14m config by name (no weights), fp32, one device, `resume="auto"` (the newest out_dir/step-*/
lit_model.pth, through Fabric's load), checkpoints every `--save_interval` optimizer steps, and a data
module of synthetic token sequences (litgpt's DataModule interface: connect, setup, the two loaders; its
own data modules need litdata, which is not installed). litgpt compiles the model with torch.compile."""
import argparse
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--micro_batch_size", type=int, default=8)
    ap.add_argument("--max_steps", type=int, default=8)
    ap.add_argument("--save_interval", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    import torch
    from litgpt.args import EvalArgs, TrainArgs
    from litgpt.config import Config
    from litgpt.data import DataModule
    from litgpt.pretrain import setup
    from torch.utils.data import DataLoader

    class SyntheticTokens(DataModule):
        def connect(self, tokenizer=None, batch_size=1, max_seq_length=-1):
            self.batch_size, self.seq = batch_size, max_seq_length

        def _data(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            return [torch.randint(0, 50000, (self.seq + 1,), generator=g) for _ in range(n)]

        def train_dataloader(self):
            return DataLoader(self._data(512, 0), batch_size=self.batch_size, shuffle=False)

        def val_dataloader(self):
            return DataLoader(self._data(8, 1), batch_size=self.batch_size)

    setup(model_name="pythia-14m", model_config=Config.from_name("pythia-14m", block_size=a.seq),
          out_dir=Path(a.out_dir), precision="32-true", resume="auto", data=SyntheticTokens(),
          train=TrainArgs(save_interval=a.save_interval, log_interval=1, global_batch_size=a.micro_batch_size,
                          micro_batch_size=a.micro_batch_size, max_tokens=a.max_steps * a.micro_batch_size * a.seq,
                          max_seq_length=a.seq, lr_warmup_steps=0, max_norm=1.0, min_lr=6e-5),
          eval=EvalArgs(interval=1000, max_iters=1, initial_validation=False, final_validation=False),
          devices=1, logger_name="csv", seed=0)


if __name__ == "__main__":
    main()
