"""Accelerate, unchanged: the pattern of its examples by_feature/memory.py and checkpointing.py. A BERT
built from a config (no weights) classifies synthetic padded sentences; `find_executable_batch_size` reruns
the training function at a smaller batch after an OOM (`--find_batch_size`); `accelerator.save_state` every
`--checkpointing_steps` to OUTPUT/step_N and, at start, `load_state` of the newest one and
`skip_first_batches` to go on where it stopped (`--resume`)."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--max_steps", type=int, default=8)
    ap.add_argument("--checkpointing_steps", type=int, default=2)
    ap.add_argument("--hidden_size", type=int, default=256)
    ap.add_argument("--find_batch_size", action="store_true")
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    import torch  # first: synth.py says why
    from accelerate import Accelerator
    from accelerate.utils import find_executable_batch_size, set_seed
    from torch.utils.data import DataLoader
    from transformers import BertConfig, BertForSequenceClassification, DataCollatorWithPadding

    accelerator = Accelerator()
    tok = synth.hf_tokenizer(os.path.join(a.output_dir, "tokenizer"))
    texts = synth.sentences(1024, max_words=120)
    enc = [dict(tok(t, truncation=True, max_length=128), labels=i % 2) for i, t in enumerate(texts)]
    collate = DataCollatorWithPadding(tok)

    def training_function(batch_size):
        set_seed(0)
        accelerator.free_memory()
        model = BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=a.hidden_size,
                                                         num_hidden_layers=4, num_attention_heads=4,
                                                         intermediate_size=4 * a.hidden_size,
                                                         max_position_embeddings=128, pad_token_id=tok.pad_token_id))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = DataLoader(enc, batch_size=batch_size, shuffle=True, collate_fn=collate)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        step = 0
        if a.resume and os.path.isdir(a.output_dir):
            done = sorted((int(m.group(1)), d) for d in os.listdir(a.output_dir)
                          for m in [re.fullmatch(r"step_(\d+)", d)] if m)
            if done:
                step, path = done[-1]
                accelerator.print("resuming from", os.path.join(a.output_dir, path))
                accelerator.load_state(os.path.join(a.output_dir, path))
        model.train()
        active = accelerator.skip_first_batches(loader, step % len(loader)) if step else loader
        while step < a.max_steps:
            for batch in active:
                loss = model(**batch).loss
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
                step += 1
                accelerator.print("step %d batch_size %d loss %.4f" % (step, batch["input_ids"].shape[0], loss.item()))
                if step % a.checkpointing_steps == 0:
                    accelerator.save_state(os.path.join(a.output_dir, "step_%d" % step))
                if step >= a.max_steps:
                    break
            active = loader

    if a.find_batch_size:
        find_executable_batch_size(training_function, starting_batch_size=a.batch_size)()
    else:
        training_function(a.batch_size)


if __name__ == "__main__":
    main()
