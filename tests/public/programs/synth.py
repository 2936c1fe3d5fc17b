"""Synthetic data in the formats the public programs read (no hub, no download): a word-level tokenizer
saved as Hugging Face's tokenizer.json + tokenizer_config.json (what AutoTokenizer, TRL and litgpt load),
and sentences of varying length (so that a collator pads its batches). Deterministic: seed 0."""
import json
import os
import shutil
import random


# Why the drivers import torch before datasets or transformers (a harness gap, issue 41's corpus found it):
# both ask `importlib.util.find_spec("torch")` at import time; the probe's TorchFinder
# (python/oomharness/_boot.py) answers that look-up as if it were the import, leaves sys.meta_path and wraps
# the loader of a spec nobody uses, so the real `import torch` that follows installs neither the probe nor
# the virtual device, and the job dies in torch's own CUDA initialisation (cudaGetDeviceCount, error 36).
# hf_trainer.py --datasets_first keeps the order the Transformers examples use, to show the gap.

WORDS = ["w%d" % i for i in range(250)]
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def sentences(n, min_words=8, max_words=60, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


def tokenizer_dir(path):
    """A word-level tokenizer of 256 tokens in Hugging Face's format; returns `path`. Written beside it and
    renamed into place, whole: the ranks of a distributed job write it at the same time."""
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    final, path = path, "%s.tmp-%d" % (path.rstrip("/"), os.getpid())
    os.makedirs(path, exist_ok=True)
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
                   "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 512,
                   "add_bos_token": True}, f)
    with open(os.path.join(path, "special_tokens_map.json"), "w") as f:
        json.dump({"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}, f)
    try:
        os.rename(path, final)  # onto nothing or an empty folder; another rank's whole one stays
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
    return final


def hf_tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tokenizer_dir(path))
