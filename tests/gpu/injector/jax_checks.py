"""JAX under the shim with OOMH_CAP=4GiB (run.sh sets XLA_PYTHON_CLIENT_PREALLOCATE for the mode).

usage: jax_checks.py MODE      MODE: prealloc | noprealloc
  sizes_from_cap   XLA's memory limit (memory_stats()['bytes_limit']) is within the 4 GiB cap
  oom_beyond_cap   a 6 GiB array fails with RESOURCE_EXHAUSTED / out of memory
"""
import sys

from oomh_gpu_common import GIB, guarded, result

MODE = sys.argv[1] if len(sys.argv) > 1 else "prealloc"
CAP = 4 * GIB

try:
    import jax
    import jax.numpy as jnp
except Exception as e:  # noqa: BLE001
    result("jax", MODE, "import", False, f"cannot import jax: {e}")
    sys.exit(0)


def gpu():
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        raise RuntimeError(f"no GPU device: {jax.devices()}")
    return devices[0]


def sizes_from_cap():
    stats = gpu().memory_stats() or {}
    limit = stats.get("bytes_limit", 0)
    result("jax", MODE, "sizes_from_cap", 0 < limit <= CAP, f"bytes_limit={limit} cap={CAP}")


def oom_beyond_cap():
    try:
        x = jnp.ones((6 * GIB // 4,), dtype=jnp.float32)
        x.block_until_ready()
        result("jax", MODE, "oom_beyond_cap", False, "a 6 GiB array was allocated under a 4 GiB cap")
    except Exception as e:  # noqa: BLE001 - XlaRuntimeError's module moved between versions
        msg = str(e)
        ok = "RESOURCE_EXHAUSTED" in msg or "out of memory" in msg.lower()
        result("jax", MODE, "oom_beyond_cap", ok, f"{type(e).__name__}: {msg[:220]}")


guarded("jax", MODE, "sizes_from_cap", sizes_from_cap)
guarded("jax", MODE, "oom_beyond_cap", oom_beyond_cap)
