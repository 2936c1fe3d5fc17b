"""torchtitan, unchanged: `python -m torchtitan.train --module llama3 --config llama3_debugmodel` (its debug
Llama 3) run from a folder holding the assets that config names, written here in their formats: a Hugging
Face tokenizer at tests/assets/tokenizer and the c4_test JSON-lines dataset at tests/assets/c4_test.
Checkpoints are torchtitan's own (DCP, every `--interval` steps into OUT/checkpoint/step-N), and a restart
loads the newest one (its default). Extra arguments go to torchtitan's command line."""
import json
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402


def main():
    import torch  # noqa: F401  (first: synth.py says why)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    os.chdir(out)
    synth.tokenizer_dir(os.path.join("tests", "assets", "tokenizer"))
    data = os.path.join("tests", "assets", "c4_test")
    if not os.path.exists(os.path.join(data, "c4_sample.json")):
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(data, "c4_sample.json"), "w") as f:
            for s in synth.sentences(400, max_words=200):
                f.write(json.dumps({"text": s}) + "\n")
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29541"}.items():
        os.environ.setdefault(k, v)
    sys.argv = ["torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel",
                "--dump_folder", out] + sys.argv[2:]
    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
