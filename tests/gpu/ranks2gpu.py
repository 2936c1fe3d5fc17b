"""Judges tests/gpu/ranks2gpu.yaml's results (run with --gpus 0,1 on a machine with two GPUs): prints one
RESULT line per claim, exit 1 when one fails.

    python3 tests/gpu/ranks2gpu.py OUT/results.json"""
import json
import re
import sys

with open(sys.argv[1]) as f:
    results = json.load(f)
jobs = {j["name"].split("::")[-1]: j for s in results["suites"] for j in s["jobs"]}
failed = False


def claim(name, ok, detail=""):
    global failed
    failed = failed or not ok
    print("RESULT %s %s %s" % (name, "PASS" if ok else "FAIL", detail), flush=True)


j = jobs.get("gpu-per-rank", {})
claim("gpu_per_rank_status", j.get("status") == "passed", j.get("message", ""))
claim("gpu_per_rank_gpus", j.get("gpus") == [0, 1], "gpus=%s" % j.get("gpus"))
seen = {}
for r in (j.get("attempts") or [{}])[0].get("ranks", []):
    try:
        text = open(r["log_path"]).read()
    except OSError:
        text = ""
    m = re.search(r"rank (\d) cvd (\S+) count (\d+) device (\d+) .* nvls (\S+)", text)
    seen[r["rank"]] = m.groups() if m else text[-300:]
claim("gpu_per_rank_env", seen.get(0, ("",))[:5] == ("0", "0,1", "2", "0", "0") and seen.get(1, ("",))[:5] == ("1", "0,1", "2", "1", "0"),
      "per rank (rank, CUDA_VISIBLE_DEVICES, device_count, current_device, NCCL_NVLS_ENABLE): %s" % seen)

j = jobs.get("nccl-consistent", {})
verdicts = {v["policy"]: v["status"] for v in j.get("verdicts", [])}
claim("nccl_consistent", j.get("status") == "passed" and all(s == "pass" for s in verdicts.values()),
      "%s %s gpus=%s" % (j.get("status"), verdicts, j.get("gpus")))

j = jobs.get("nccl-no-handler-hangs", {})
hang = next((v for v in j.get("verdicts", []) if v["policy"] == "no_hang"), {})
claim("nccl_hang_found", j.get("status") == "passed" and hang.get("status") == "fail" and "rank 0 waited" in hang.get("reason", ""),
      "%s: %s (job took %.1fs)" % (j.get("status"), hang.get("reason"), j.get("duration", 0)))

j = jobs.get("too-many-ranks", {})
claim("too_many_ranks_error", j.get("status") == "error" and "needs one GPU per rank" in j.get("message", ""),
      "%s: %s" % (j.get("status"), j.get("message")))
sys.exit(1 if failed else 0)
