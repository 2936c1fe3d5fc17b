#!/usr/bin/env python3
"""What cuDNN's convolutions ask of PyTorch's allocator beyond their results (issue 43: ResNet-18 predicted
15-22% low, the convolution workspaces not booked): the figures a model of them must reproduce.

    python3 tests/gpu/conv_workspace.py [--quick] [--out FILE.jsonl]
    python3 tests/gpu/conv_workspace.py --lattice --out FILE.jsonl   # the lattice of common shapes alone
    python3 tests/gpu/conv_workspace.py --table FILE.jsonl[,FILE.jsonl] python/oomharness/virtual_device/cudnn_conv_table.py
    python3 tests/gpu/conv_workspace.py --held-out FILE.jsonl tests/python/predict_programs/conv_resnet_h200.json

For each configuration (batch, channels in and out, height, width, kernel, stride, padding, groups, dtype,
memory format) it measures on the GPU, each from an emptied cache and a reset peak, with PyTorch's defaults
(torch.backends.cudnn.benchmark False: the algorithm cuDNN's heuristics pick, TF32 allowed):
  forward   the peak allocated during F.conv2d beyond what was allocated before and the output's bytes
  data      the same for aten.convolution_backward asked for the input's gradient alone
  filter    ... for the weight's gradient alone
  both      ... for both, as autograd asks (output_mask [True, True, False]) beyond both gradients
  segments  the reserved bytes each call left behind (the caching allocator's segments: a workspace is
            served from a segment of its own size rounded up, 2 MiB or 20 MiB or the size, Note [The
            allocator's rounding] in virtual_device/allocator.py)
The configurations are every convolution of ResNet-18 and ResNet-50 (torchvision's shapes) at batches 1, 8,
32, 64 and 128, a seeded random grid beside them (batches 1-64, and 64-512), and depthwise convolutions
(groups = channels), in float32, bfloat16 and float16, NCHW and channels_last. Each figure is given twice: from
the allocator's allocated bytes (a block's rounding included) and from its requested bytes (the `_requested`
keys: the sizes asked for, which a model of the allocator rounds itself). One JSON object per line; the
driver's, PyTorch's and cuDNN's versions first.
"""
import argparse
import json
import random
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --table needs no torch
    torch = F = None

MIB = 1 << 20


def rounded(n):
    return max(512, (n + 511) // 512 * 512)


def fresh():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    stats = torch.cuda.memory_stats()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), stats.get("requested_bytes.all.current", 0)


def after(base, kept, kept_requested):
    """(peak allocated beyond `base` and the kept blocks, reserved added, peak requested beyond base and the
    kept tensors' own bytes): the allocated figure counts a block's rounding (a block served whole when what
    is left of its segment is too small to split), the requested one the sizes asked for."""
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    requested = torch.cuda.memory_stats().get("requested_bytes.all.peak", 0)
    return (peak - base[0] - kept, torch.cuda.memory_reserved() - base[1],
            requested - base[2] - kept_requested if requested else None)


def resnet_convs():
    """(C, K, H, W, k, stride, padding) of every convolution of ResNet-18 and ResNet-50 at 224x224."""
    out = []

    def add(name, c, k, hw, kern, stride, pad):
        out.append((name, c, k, hw, hw, kern, stride, pad))

    add("stem", 3, 64, 224, 7, 2, 3)
    # ResNet-18: BasicBlocks (3x3, 3x3), downsample 1x1 stride 2.
    hw, c = 56, 64
    for stage, k in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if (stage > 0 and block == 0) else 1
            add("r18.s%d.b%d.conv1" % (stage, block), c, k, hw, 3, stride, 1)
            if stride == 2 or c != k:
                add("r18.s%d.b%d.down" % (stage, block), c, k, hw, 1, stride, 0)
            hw //= stride
            add("r18.s%d.b%d.conv2" % (stage, block), k, k, hw, 3, 1, 1)
            c = k
    # ResNet-50: Bottlenecks (1x1, 3x3 with the stride, 1x1 x4), downsample 1x1 with the stride.
    hw, c = 56, 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            stride = 2 if (stage > 0 and block == 0) else 1
            add("r50.s%d.b%d.conv1" % (stage, block), c, width, hw, 1, 1, 0)
            add("r50.s%d.b%d.conv2" % (stage, block), width, width, hw, 3, stride, 1)
            if block == 0:
                add("r50.s%d.b%d.down" % (stage, block), c, width * 4, hw, 1, stride, 0)
            hw //= stride
            add("r50.s%d.b%d.conv3" % (stage, block), width, width * 4, hw, 1, 1, 0)
            c = width * 4
    seen, unique = set(), []
    for row in out:
        if row[1:] not in seen:
            seen.add(row[1:])
            unique.append(row)
    return unique


def random_convs(n, seed=0, batches=(1, 2, 4, 8, 16, 32, 64), prefix="random"):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        c, k = rng.choice((3, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)), rng.choice((16, 32, 64, 96, 128, 256, 512, 1024))
        hw = rng.choice((7, 14, 16, 28, 32, 56, 64, 112, 128, 224))
        kern = rng.choice((1, 1, 3, 3, 3, 5, 7))
        stride = rng.choice((1, 1, 2))
        batch = rng.choice(batches)
        if batch * max(c, k) * hw * hw * 4 > 2 << 30:
            continue
        out.append(("%s%d" % (prefix, len(out)), c, k, hw, hw, kern, stride, kern // 2, batch))
    return out


def lattice_convs():
    """A lattice of common CNN shapes beside ResNet's and not on them (channels 24-768, sizes 10-160, batches
    4-192), so that the nearest measured calls of a ResNet's convolution are near it and the ResNets stay held
    out."""
    out = []
    for kern in (1, 3):
        for stride in (1, 2):
            for c in (24, 48, 96, 192, 384, 768):
                for k in (c, 2 * c):
                    for hw in (10, 20, 40, 80, 160):
                        for batch in (4, 12, 48, 192):
                            if batch * max(c, k) * hw * hw * 4 > 2 << 30:
                                continue
                            out.append(("lattice", c, k, hw, hw, kern, stride, kern // 2, batch))
    return out


def measure(name, batch, c, k, h, w, kern, stride, pad, dtype, channels_last=False, groups=1):
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(batch, c, h, w, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    wt = torch.randn(k, c // groups, kern, kern, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    row = {"name": name, "batch": batch, "c": c, "k": k, "h": h, "w": w, "kernel": kern, "stride": stride,
           "padding": pad, "groups": groups, "dtype": str(dtype).replace("torch.", ""),
           "channels_last": channels_last}
    base = fresh()
    y = F.conv2d(x, wt, None, stride, pad, 1, groups)
    row["out_shape"] = list(y.shape)
    row["forward"], row["forward_reserved"], row["forward_requested"] = after(
        base, rounded(y.numel() * y.element_size()), y.numel() * y.element_size())
    gy = torch.randn_like(y)
    conv_bwd = torch.ops.aten.convolution_backward
    for key, mask in (("data", [True, False, False]), ("filter", [False, True, False]), ("both", [True, True, False])):
        base = fresh()
        gx, gw, _ = conv_bwd(gy, x, wt, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups, mask)
        kept = [t.numel() * t.element_size() for t in (gx, gw) if t is not None]
        row[key], row[key + "_reserved"], row[key + "_requested"] = after(base, sum(rounded(k) for k in kept), sum(kept))
        del gx, gw
    del x, wt, y, gy
    return row


def write_table(jsonls, out_py):
    """python/oomharness/virtual_device/cudnn_conv_table.py from a run's JSON lines: the random grid's, the large
    batches' and the depthwise rows (the ResNet rows stay out: they check the model, Note [cuDNN's convolutions
    as a GPU runs them])."""
    head, rows = None, []
    for jsonl in jsonls.split(","):
        with open(jsonl) as f:
            lines = [json.loads(line) for line in f]
        head = head or lines[0]
        rows += [r for r in lines[1:] if "forward_requested" in r]
    kept = [r for r in rows if r["name"].startswith(("random", "large", "depthwise", "lattice"))]
    text = ['"""cuDNN\'s convolution workspaces as measured on a GPU: the data of Note [cuDNN\'s convolutions as a GPU',
            'runs them] in convolutions.py. Generated by `tests/gpu/conv_workspace.py --table RUN.jsonl THIS_FILE` from',
            '`tests/gpu/run_all.sh convws`; do not edit."""', "",
            "MEASURED_ON = %r" % ("%s, PyTorch %s, CUDA %s, cuDNN %s" % (head["gpu"], head["torch"], head["cuda"], head["cudnn"])),
            "# (dtype, channels_last, groups, batch, in channels, out channels, height, width, kernel, stride, out height,",
            "#  out width, forward workspace, backward workspace): bytes requested of PyTorch's allocator",
            "ROWS = ("]
    for r in kept:
        o = r["out_shape"]
        text.append("    (%r, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d)," % (
            r["dtype"], r["channels_last"], r["groups"], r["batch"], r["c"], r["k"], r["h"], r["w"], r["kernel"],
            r["stride"], o[2], o[3], max(0, r["forward_requested"]), max(0, r["both_requested"])))
    text.append(")")
    with open(out_py, "w") as f:
        f.write("\n".join(text) + "\n")
    print("%d rows of %d into %s" % (len(kept), len(rows), out_py))


def write_held_out(jsonl, out_json):
    """tests/python/predict_programs/conv_resnet_h200.json: the ResNet rows, which the table leaves out, as
    (dtype, channels_last, batch, c, k, h, w, kernel, stride, out h, out w, forward, backward) in requested bytes."""
    with open(jsonl) as f:
        lines = [json.loads(line) for line in f]
    rows = [r for r in lines[1:] if "forward_requested" in r and r["name"].startswith(("stem", "r18.", "r50."))]
    doc = {"about": "ResNet-18's and ResNet-50's convolutions, measured by tests/gpu/conv_workspace.py and left out of "
                    "python/oomharness/virtual_device/cudnn_conv_table.py: the held-out check of Note [cuDNN's "
                    "convolutions as a GPU runs them] (tests/python/test_predict_real.py). Bytes requested of "
                    "PyTorch's allocator beyond the call's outputs.",
           "measured_on": "%s, PyTorch %s, CUDA %s, cuDNN %s" % (lines[0]["gpu"], lines[0]["torch"], lines[0]["cuda"],
                                                                 lines[0]["cudnn"]),
           "fields": ["dtype", "channels_last", "batch", "c", "k", "h", "w", "kernel", "stride", "out_h", "out_w",
                      "forward", "backward"],
           "rows": [[r["dtype"], int(r["channels_last"]), r["batch"], r["c"], r["k"], r["h"], r["w"], r["kernel"],
                     r["stride"], r["out_shape"][2], r["out_shape"][3], max(0, r["forward_requested"]),
                     max(0, r["both_requested"])] for r in rows]}
    with open(out_json, "w") as f:
        f.write(json.dumps({k: v for k, v in doc.items() if k != "rows"})[:-1] + ', "rows": [\n'
                + ",\n".join(json.dumps(r) for r in doc["rows"]) + "\n]}\n")
    print("%d held-out rows into %s" % (len(rows), out_json))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--table":
        return write_table(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 4 and sys.argv[1] == "--held-out":
        return write_held_out(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--lattice", action="store_true", help="only lattice_convs(), float32 and bfloat16, NCHW")
    a = ap.parse_args()
    out = open(a.out, "w") if a.out else sys.stdout
    head = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0), "benchmark": torch.backends.cudnn.benchmark,
            "allow_tf32": getattr(torch.backends.cudnn, "allow_tf32", None)}
    print(json.dumps(head), file=out, flush=True)
    # Warm: cuDNN's handle and cuBLAS's are made outside the allocator; the first call pays for them.
    measure("warm", 2, 8, 8, 16, 16, 3, 1, 1, torch.float32)
    if a.lattice:
        measure("warm", 2, 8, 8, 16, 16, 3, 1, 1, torch.float32)
        for name, c, k, h, w, kern, stride, pad, b in lattice_convs():
            for dtype in (torch.float32, torch.bfloat16):
                try:
                    row = measure(name, b, c, k, h, w, kern, stride, pad, dtype)
                except torch.OutOfMemoryError as e:
                    row = {"name": name, "batch": b, "error": str(e)[:200]}
                    torch.cuda.empty_cache()
                print(json.dumps(row), file=out, flush=True)
        print(json.dumps({"summary": {"lattice": True}}), file=out, flush=True)
        return
    batches = (32,) if a.quick else (1, 8, 32, 64, 128)
    configs = []
    for name, c, k, h, w, kern, stride, pad in resnet_convs():
        for b in batches:
            configs.append((name, b, c, k, h, w, kern, stride, pad, 1))
    for name, c, k, h, w, kern, stride, pad, b in random_convs(40 if a.quick else 160):
        configs.append((name, b, c, k, h, w, kern, stride, pad, 1))
    if not a.quick:  # larger batches (a model of the workspaces must not extrapolate in the batch) and depthwise
        for name, c, k, h, w, kern, stride, pad, b in random_convs(160, seed=1, batches=(64, 128, 256, 512), prefix="large"):
            configs.append((name, b, c, k, h, w, kern, stride, pad, 1))
        for name, c, k, h, w, kern, stride, pad, b in random_convs(40, seed=2, prefix="depthwise"):
            configs.append((name, b, c, c, h, w, kern if kern > 1 else 3, stride, (kern if kern > 1 else 3) // 2, c))
    dtypes = ((torch.float32, False), (torch.bfloat16, False), (torch.float16, False)) + (
        () if a.quick else ((torch.bfloat16, True), (torch.float32, True)))
    n = 0
    for cfg in configs:
        for dtype, cl in dtypes:
            name, b, c, k, h, w, kern, stride, pad, groups = cfg
            resnet = name.startswith(("stem", "r18.", "r50."))
            if dtype != torch.float32 and resnet and b not in (8, 32):
                continue
            if dtype == torch.float16 and not name.startswith(("random", "large")):
                continue
            if dtype == torch.float32 and cl and not name.startswith("random"):
                continue
            try:
                row = measure(name, b, c, k, h, w, kern, stride, pad, dtype, cl, groups)
            except torch.OutOfMemoryError as e:
                row = {"name": name, "batch": b, "error": str(e)[:200]}
                torch.cuda.empty_cache()
            print(json.dumps(row), file=out, flush=True)
            n += 1
    print(json.dumps({"summary": {"rows": n}}), file=out, flush=True)


if __name__ == "__main__":
    main()
