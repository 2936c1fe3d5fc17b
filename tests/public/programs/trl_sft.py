"""TRL's SFTTrainer, unchanged: a Llama built from a config (no weights), supervised fine-tuning on a
synthetic "text" dataset, tokenized and padded per batch by SFTTrainer itself (no packing), Trainer's
checkpoints and resume; `--auto_find_batch_size` turns on the OOM helper it inherits from Trainer."""
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
    ap.add_argument("--hidden_size", type=int, default=256)
    ap.add_argument("--auto_find_batch_size", action="store_true")
    a = ap.parse_args()
    import torch  # noqa: F401  (first: synth.py says why)
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, set_seed
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer
    set_seed(0)
    tok = synth.hf_tokenizer(os.path.join(a.output_dir, "tokenizer"))
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=a.hidden_size,
                                         intermediate_size=2 * a.hidden_size, num_hidden_layers=4,
                                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    cfg = SFTConfig(output_dir=a.output_dir, per_device_train_batch_size=a.per_device_train_batch_size,
                    max_steps=a.max_steps, save_strategy="steps", save_steps=a.save_steps, logging_steps=1,
                    learning_rate=1e-3, report_to="none", auto_find_batch_size=a.auto_find_batch_size,
                    max_length=128, packing=False, dataset_num_proc=None, seed=0, disable_tqdm=True,
                    bf16=False, fp16=False)
    trainer = SFTTrainer(model=model, args=cfg, processing_class=tok,
                         train_dataset=Dataset.from_dict({"text": synth.sentences(512, max_words=120)}))
    last = get_last_checkpoint(a.output_dir) if os.path.isdir(a.output_dir) else None
    if last:
        print("resuming from", last, flush=True)
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
