"""litgpt's pretraining, unchanged, through its own command line (`litgpt pretrain`, litgpt.__main__.main:
its checkpoints save the command's hyperparameters by parsing that command line again): the pythia-14m
config by name (no weights), fp32, one device, `--resume auto` (the newest out_dir/step-*/lit_model.pth,
through Fabric's load), checkpoints every `--train.save_interval` optimizer steps, and litgpt_synthetic's
data module. litgpt compiles the model with torch.compile. Usage: litgpt_pretrain.py OUT MICRO_BATCH STEPS.
No --model_config.* flag: any one of them makes jsonargparse build model_config from litgpt's default Config
(3.6 billion parameters, killed by the host's OOM killer) instead of pythia-14m's."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    out, micro, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seq = 128
    sys.argv = ["litgpt", "pretrain", "pythia-14m", "--out_dir", out, "--precision", "32-true", "--resume", "auto",
                "--data", "litgpt_synthetic.SyntheticTokens", "--train.save_interval", "2",
                "--train.log_interval", "1", "--train.global_batch_size", str(micro),
                "--train.micro_batch_size", str(micro), "--train.max_tokens", str(steps * micro * seq),
                "--train.max_seq_length", str(seq), "--train.lr_warmup_steps", "0", "--train.max_norm", "1.0",
                "--eval.interval", "1000", "--eval.max_iters", "1", "--eval.initial_validation", "false",
                "--eval.final_validation", "false", "--devices", "1", "--logger_name", "csv", "--seed", "0"]
    from litgpt.__main__ import main as litgpt_main
    litgpt_main()


if __name__ == "__main__":
    main()
