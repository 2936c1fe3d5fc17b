"""The small causal LM and token dataset the ecosystem trainers share (a GPT-style encoder stack, synthetic
tokens; no model hub). Imported by hf_trainer.py, accelerate_find_batch_size.py and lightning_batch_finder.py."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab=1024, d_model=64, layers=2, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.lm_head = nn.Linear(d_model, vocab)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.encoder(self.embed(input_ids)))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return {"loss": loss, "logits": logits}


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n=4096, seq_len=32, vocab=1024):
        self.n, self.seq_len, self.vocab = n, seq_len, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq_len + 1,), generator=g)
        return {"input_ids": ids[:-1], "labels": ids[1:]}
