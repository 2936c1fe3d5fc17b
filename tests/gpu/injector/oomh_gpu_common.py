"""Shared helpers for the injector's GPU checks (run by run.sh under LD_PRELOAD=liboomharness_inject.so).

Each check prints exactly one line:  RESULT <framework> <mode> <check> PASS|FAIL <detail>
The control block is mapped with mmap at the fixed offsets of include/oomharness/control_block.h
(Note [Control block layout]); this file writes the step and publishes plans the way the runner does.
"""
import json
import mmap
import os
import struct
import sys

STEP_OFFSET = 24            # int64, ControlBlock::step
PLAN_GENERATION_OFFSET = 36  # uint32, seqlock: odd while written
PLAN_SIZE_OFFSET = 38016     # uint32, ControlBlock::plan_size
PLAN_TEXT_OFFSET = 38024     # char[64 KiB], ControlBlock::plan_text
BLOCK_SIZE = 103560
GIB = 1 << 30
MIB = 1 << 20


def result(framework, mode, check, ok, detail=""):
    detail = " ".join(str(detail).split())[:300]
    print(f"RESULT {framework} {mode} {check} {'PASS' if ok else 'FAIL'} {detail}", flush=True)


class ControlBlock:
    """The job's control block: the shim set OOMH_CONTROL (its own block) before Python started."""

    def __init__(self):
        name = os.environ.get("OOMH_CONTROL", "")
        if not name:
            raise RuntimeError("OOMH_CONTROL is not set: is the shim preloaded and active?")
        fd = os.open("/dev/shm/" + name.lstrip("/"), os.O_RDWR)
        try:
            self.mem = mmap.mmap(fd, BLOCK_SIZE)
        finally:
            os.close(fd)

    def set_step(self, step):
        struct.pack_into("<q", self.mem, STEP_OFFSET, step)

    def publish_plan(self, plan):
        text = json.dumps(plan).encode()
        (generation,) = struct.unpack_from("<I", self.mem, PLAN_GENERATION_OFFSET)
        struct.pack_into("<I", self.mem, PLAN_GENERATION_OFFSET, generation + 1)  # odd: writing
        self.mem[PLAN_TEXT_OFFSET:PLAN_TEXT_OFFSET + len(text)] = text
        struct.pack_into("<I", self.mem, PLAN_SIZE_OFFSET, len(text))
        struct.pack_into("<I", self.mem, PLAN_GENERATION_OFFSET, generation + 2)  # even: stable


def inject_events(rule=None):
    """The inject events the shim wrote so far (OOMH_EVENTS), optionally only those of one rule."""
    path = os.environ.get("OOMH_EVENTS")
    if not path or not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("kind") == "inject" and (rule is None or event["fields"].get("rule") == rule):
                out.append(event)
    return out


def guarded(framework, mode, check, fn):
    """Runs one check; an unexpected exception is a FAIL line, never a crash of the whole script."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report, do not crash
        result(framework, mode, check, False, f"unexpected {type(e).__name__}: {e}")
    sys.stdout.flush()
