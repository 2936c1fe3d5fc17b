"""Hugging Face Transformers' Trainer, unchanged: a GPT-2 built from a config (no weights), causal-LM
training on synthetic sentences of varying length padded per batch by DataCollatorForLanguageModeling, with
Trainer's own checkpoints (checkpoint-N/: model.safetensors, optimizer.pt, trainer_state.json) and its own
resume (`train(resume_from_checkpoint=...)`, from `get_last_checkpoint`, as the examples' run_clm.py does).
`--auto_find_batch_size` turns on Trainer's OOM helper (Accelerate's find_executable_batch_size)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--per_device_train_batch_size", type=int, default=16)
    ap.add_argument("--max_steps", type=int, default=8)
    ap.add_argument("--save_steps", type=int, default=2)
    ap.add_argument("--n_embd", type=int, default=256)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--auto_find_batch_size", action="store_true")
    ap.add_argument("--datasets_first", action="store_true")
    a = ap.parse_args()
    if not a.datasets_first:
        import torch  # noqa: F401  (first: synth.py says why)
    from datasets import Dataset
    from transformers import (DataCollatorForLanguageModeling, GPT2Config, GPT2LMHeadModel, Trainer,
                              TrainingArguments, set_seed)
    from transformers.trainer_utils import get_last_checkpoint
    set_seed(0)
    tok = synth.hf_tokenizer(os.path.join(a.output_dir, "tokenizer"))
    ds = Dataset.from_dict({"text": synth.sentences(512, max_words=120)})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=a.n_embd, n_layer=a.n_layer,
                                       n_head=4, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id))
    args = TrainingArguments(output_dir=a.output_dir, per_device_train_batch_size=a.per_device_train_batch_size,
                             max_steps=a.max_steps, save_strategy="steps", save_steps=a.save_steps, logging_steps=1,
                             learning_rate=1e-3, report_to="none", auto_find_batch_size=a.auto_find_batch_size,
                             dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    last = get_last_checkpoint(a.output_dir) if os.path.isdir(a.output_dir) else None
    if last:
        print("resuming from", last, flush=True)
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
