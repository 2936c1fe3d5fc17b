"""A litgpt data module of synthetic token sequences (litgpt's DataModule interface: connect, setup, the two
loaders), for `litgpt pretrain --data litgpt_synthetic.SyntheticTokens`: litgpt's own pretraining data
modules need litdata, which is not installed. The training loader is torchdata's StatefulDataLoader, which has a
state_dict as litdata's StreamingDataLoader has: litgpt's pretrain saves `train_dataloader` in every checkpoint,
and a plain DataLoader there is pickled whole, which torch.load(weights_only=True) (PyTorch >= 2.6) refuses at
the resume."""
import torch
from litgpt.data import DataModule
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader


class SyntheticTokens(DataModule):
    def __init__(self, vocab: int = 50000, samples: int = 512):
        super().__init__()
        self.vocab, self.samples = vocab, samples

    def connect(self, tokenizer=None, batch_size=1, max_seq_length=-1):
        self.batch_size, self.seq = batch_size, max_seq_length

    def _data(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randint(0, self.vocab, (self.seq + 1,), generator=g) for _ in range(n)]

    def train_dataloader(self):
        return StatefulDataLoader(self._data(self.samples, 0), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self):
        return DataLoader(self._data(8, 1), batch_size=self.batch_size)
