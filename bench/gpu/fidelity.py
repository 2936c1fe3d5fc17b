#!/usr/bin/env python3
"""Fidelity of the simulated small GPU: the largest batch that fits under
  (a) a virtual cap of X that counts allocations (the shim, OOMH_CAP=X),
  (b) a virtual cap of X that counts the footprint (OOMH_CAP=X OOMH_CAP_COUNTS=footprint),
  (c) a real reservation that leaves X free (oomh-reserve --leave X holds the rest, its own context counted),
  (d) torch.cuda.set_per_process_memory_fraction(X / total),
found by the same bisection of the batch size of one training step of a small transformer.
Targets: (a) gives (d)'s batch, and (b) gives (c)'s: each kind of limit has a virtual counterpart.

    python3 bench/gpu/fidelity.py --inject build/injector/liboomharness_inject.so \
        --reserve build/runner/oomh-reserve [--limit 8GiB] [--modes caps|reserve|all] [--json-out F]

The three caps are limits inside one process and may run beside other jobs (--modes caps runs them at
once); the reservation needs the GPU to itself (--modes reserve). --json-out adds this run's figures to
a JSON file, so that two runs make one table (run_all.sh runs the two halves apart).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

WORKER = r'''
import os, sys, torch
mode, limit = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
if mode == "fraction":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(limit / total)
d, layers, seq, vocab = 1024, 8, 512, 8192
layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, dropout=0.0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.TransformerEncoder(layer, layers), torch.nn.Linear(d, vocab)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def fits(batch):
    try:
        x = torch.randint(0, vocab, (batch, seq), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), x.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        ok = True
    except torch.OutOfMemoryError:
        ok = False
    x = loss = None
    opt.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return ok
lo, hi = 0, 1
while fits(hi):
    lo, hi = hi, hi * 2
    if hi > 4096:
        break
while hi - lo > 1:
    mid = (lo + hi) // 2
    if fits(mid):
        lo = mid
    else:
        hi = mid
print(f"LARGEST_BATCH {lo}")
'''


def parse_size(s):
    units = {"GiB": 1 << 30, "MiB": 1 << 20}
    for u, f in units.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * f)
    return int(s)


def clean_env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("OOMH_"):
            del env[k]
    return env


def largest(mode, limit, env):
    out = subprocess.run([sys.executable, "-c", WORKER, mode, str(limit)], env=env, capture_output=True,
                         text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("LARGEST_BATCH "):
            return int(line.split()[1])
    raise RuntimeError(f"{mode} failed ({out.returncode}): {out.stderr[-2000:]}")


def free_bytes():
    q = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True, check=True)
    return int(q.stdout.split()[0]) << 20


def reservation(args, limit):
    """(c): oomh-reserve --leave sizes its hold once its own context exists, so that `limit` stays free."""
    res = {}
    side = subprocess.Popen([args.reserve, "--device", "0", "--leave", str(limit)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        line = side.stdout.readline().strip()
        if not line.startswith("READY"):
            raise RuntimeError(f"reservation sidecar: {line}")
        res["reserved_bytes"] = int(line.split()[1])
        res["free_beside_reservation"] = free_bytes()
        res["real_reservation"] = largest("reserve", limit, clean_env())
    finally:
        side.stdin.close()
        side.terminate()
        side.wait(timeout=30)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inject", required=True)
    ap.add_argument("--reserve", required=True)
    ap.add_argument("--limit", default="8GiB")
    ap.add_argument("--modes", choices=("caps", "reserve", "all"), default="all")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    limit = parse_size(args.limit)
    res = {}
    if args.json_out and os.path.exists(args.json_out):
        res = json.load(open(args.json_out))
    res["limit"] = args.limit

    if args.modes in ("caps", "all"):
        cap = clean_env()
        cap.update(LD_PRELOAD=args.inject, OOMH_CAP=str(limit))
        footprint = dict(cap, OOMH_CAP_COUNTS="footprint")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            runs = {"virtual_cap": pool.submit(largest, "cap", limit, cap),
                    "virtual_cap_footprint": pool.submit(largest, "cap", limit, footprint),
                    "set_per_process_memory_fraction": pool.submit(largest, "fraction", limit, clean_env())}
            for key, run in runs.items():
                res[key] = run.result()
    if args.modes in ("reserve", "all"):
        res.update(reservation(args, limit))
    if args.json_out:
        with open(args.json_out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(args.json_out + ".tmp", args.json_out)
    print(json.dumps(res))
    if all(k in res for k in ("virtual_cap", "virtual_cap_footprint", "set_per_process_memory_fraction", "real_reservation")):
        print("\n| limit | cap, counts allocations | `set_per_process_memory_fraction` | cap, counts footprint | real reservation |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| {res['limit']} | {res['virtual_cap']} | {res['set_per_process_memory_fraction']} | "
              f"{res['virtual_cap_footprint']} | {res['real_reservation']} |")


if __name__ == "__main__":
    main()
