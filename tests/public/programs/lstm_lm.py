"""A word-level LSTM language model as public examples write it (embedding, nn.LSTM without batch_first,
so cuDNN's RNN kernels on a GPU; truncated BPTT over a batchified token stream; gradient clipping), with a
checkpoint dict saved every `--save-every` steps and loaded by `--resume PATH`. The loop is ours; the
layers are PyTorch's."""
import argparse
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch_size", type=int, default=20)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--emsize", type=int, default=400)
    ap.add_argument("--nhid", type=int, default=400)
    ap.add_argument("--nlayers", type=int, default=2)
    ap.add_argument("--ntokens", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument("--resume", default="")
    a = ap.parse_args()
    import torch
    import torch.nn as nn
    torch.manual_seed(0)

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(a.ntokens, a.emsize)
            self.rnn = nn.LSTM(a.emsize, a.nhid, a.nlayers, dropout=0.2)
            self.decoder = nn.Linear(a.nhid, a.ntokens)

        def forward(self, x, hidden):
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out).view(-1, a.ntokens), hidden

    stream = torch.randint(0, a.ntokens, (a.batch_size * a.bptt * (a.steps + 2) + 1,), generator=torch.Generator().manual_seed(1))
    nbatch = stream.size(0) // a.batch_size
    data = stream[: nbatch * a.batch_size].view(a.batch_size, -1).t().contiguous().cuda()
    model = RNNModel().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    crit = nn.NLLLoss()
    step = 0
    if a.resume and os.path.isfile(a.resume):
        ck = torch.load(a.resume)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        step = ck["step"]
        print("resumed from %s at step %d" % (a.resume, step), flush=True)
    model.train()
    hidden = None
    while step < a.steps:
        i = step * a.bptt
        x, y = data[i:i + a.bptt], data[i + 1:i + 1 + a.bptt].reshape(-1)
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        opt.zero_grad()
        out, hidden = model(x, hidden)
        loss = crit(torch.log_softmax(out, -1), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        step += 1
        print("| step %d | batch %d | loss %.3f" % (step, x.shape[1], loss.item()), flush=True)
        if a.resume and step % a.save_every == 0:
            os.makedirs(os.path.dirname(a.resume) or ".", exist_ok=True)
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, a.resume)


if __name__ == "__main__":
    main()
