"""DeepSpeed ZeRO, unchanged: `deepspeed.initialize` with a ZeRO stage-`--stage` config on one process
(the init_distributed it does itself, with gloo where NCCL is not there), a GPT-2 built from a config,
synthetic token batches, `engine.backward`/`engine.step`, and DeepSpeed's own checkpoints
(`save_checkpoint` every `--save_every` steps, `load_checkpoint` of the `latest` tag at start)."""
import argparse
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--save_every", type=int, default=2)
    ap.add_argument("--n_embd", type=int, default=256)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import deepspeed
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=4096, n_positions=128, n_embd=a.n_embd, n_layer=4, n_head=4))
    config = {"train_micro_batch_size_per_gpu": a.batch_size, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": a.stage}, "steps_per_print": 1}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    _, client = engine.load_checkpoint(a.output_dir) if os.path.exists(os.path.join(a.output_dir, "latest")) else (None, None)
    step = engine.global_steps
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 4096, (a.batch_size, 128), generator=g) for _ in range(a.steps)]
    while step < a.steps:
        ids = batches[step].to(engine.device)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        step = engine.global_steps
        print("step %d batch %d loss %.4f" % (step, ids.shape[0], loss.item()), flush=True)
        if step % a.save_every == 0:
            engine.save_checkpoint(a.output_dir)


if __name__ == "__main__":
    main()
