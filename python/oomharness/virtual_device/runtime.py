"""The virtual device's runtime part: torch.cuda (and torch.accelerator) answered from the caching-allocator
model and from host objects: memory figures, empty_cache, the device's properties, streams, events, device
guards, NVTX ranges, the RNG, and a clear refusal of CUDA graphs.

Note [No CUDA runtime under the virtual device]
On a CUDA build without a GPU (what `pip install torch` gives a laptop or a CI runner), any call that reaches
the CUDA runtime fails ("API call is not supported in the installed CUDA driver") or prints its
initialisation warnings; on a CPU build the same calls raise "Torch not compiled with CUDA" or meet dummy
classes. So nothing the virtual device does may reach it: streams and events are host objects (work runs
synchronously on the CPU, so an event is complete once recorded and times with the host's clock), a device
guard changes nothing (there is one device), NVTX ranges are no-ops, and torch.load reads storages meant for
the device to the host and books them. tests/python/test_cuda_build.py runs each way public code writes
these, under every PyTorch of the CI matrix.
"""

import os
import time

import torch

from .. import _patches
from .unsupported import unsupported

WHO = "device.runtime"
# torch.cuda's names the device answers only where this torch has them (the rest it provides in any case).
_ONLY_WHERE_THERE = frozenset(("Event", "Stream", "ExternalStream", "StreamContext", "stream", "current_stream",
                               "default_stream", "set_stream", "device", "device_of", "_exchange_device",
                               "_maybe_exchange_device", "_lazy_init", "CUDAGraph", "graph", "make_graphed_callables",
                               "graph_pool_handle"))


class Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
        self.enable_timing = enable_timing
        self._t = None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1000.0


GRAPHS_NOT_MODELLED = "CUDA graphs are not modelled by the virtual device"


def _graphs_not_modelled(name):
    """What stands for torch.cuda.NAME: a class where PyTorch has one (CUDAGraph, graph), so that annotations
    such as `torch.cuda.CUDAGraph | None` in libraries' code still work, else a function; either refuses."""
    def refuse(*args, **kwargs):
        raise unsupported("torch.cuda.%s" % name, GRAPHS_NOT_MODELLED)
    if name in ("CUDAGraph", "graph"):
        return type(name, (), {"__init__": refuse, "__module__": "torch.cuda"})
    refuse.__name__ = name
    return refuse


class Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        index = _DeviceGuard.devices.index_of(device) if _DeviceGuard.devices else None
        self.device = torch.device("cuda", index if index is not None and index >= 0 else
                                   (_DeviceGuard.devices.index if _DeviceGuard.devices else 0))
        self.priority = priority
        self.cuda_stream = 0

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self):
        return True

    def synchronize(self):
        pass

    def is_capturing(self):
        return False  # no CUDA graph is ever captured on the virtual device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class PhiloxState:
    """Note [The CUDA generator's state]
    On a GPU, torch.cuda.get_rng_state() is the Philox generator's seed and offset, 16 bytes (a uint8 tensor),
    and code reads them: DTensor's RNG tracker (FSDP2, torchtitan) takes the offset from bytes 8-16 and sets a
    state with a new offset before each random operation; activation checkpointing saves the state at the
    forward and sets it again for the recomputation; fork_rng saves and restores it around a block.

    The virtual device draws a device tensor's random numbers (every operation torch tags
    nondeterministic_seeded: dropout, normal_, uniform_, bernoulli, randn, randperm, ...) from a generator of its
    own, not from the CPU's: the dispatch mode runs each such operation with the CPU's default generator set to
    the device's state and puts the CPU's back after (draw()). Its state is defined by the 16 bytes: manual_seed
    sets the seed and a zero offset; each draw moves the offset on by the numbers drawn (rounded up to 4, as
    Philox's counter moves); get_rng_state returns seed and offset, and the generator restarts from exactly
    that (seed, offset), so that set_rng_state of those bytes later draws the same numbers again, as on a GPU.
    Before, the device drew from the CPU generator and kept the 16 bytes aside: fork_rng, which restores the
    CPU's state after the block, made every draw inside a DTensor RNG tracker repeat the one before it, and
    torchtitan's truncated-normal init (trunc_normal_'s rejection loop) never ended (public corpus,
    torchtitan-debug-resume). Random numbers still match no GPU's; what code reads and writes of the state,
    and what setting it does, have a GPU's shape. torch.utils.checkpoint saves the device's state only where
    torch.cuda._initialized says CUDA was initialised, and the device says so (a patch-table row), so that
    a checkpointed block's recomputation draws its dropout masks again exactly (tests/python/
    test_virtual_device.py)."""

    def __init__(self, seed=67280421310721):  # CUDA's default seed (c10::default_rng_seed_val)
        self._make = torch.Generator(device="cpu")
        self._drawing = 0
        self.manual_seed(seed)

    def manual_seed(self, seed):
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self.offset = 0
        self._restart()

    def _restart(self):
        """The generator's state for (seed, offset): one mt19937 seeded from both."""
        self._make.manual_seed((self.seed * 0x9E3779B97F4A7C15 + self.offset) & 0xFFFFFFFFFFFFFFFF)
        self.generator_state = self._make.get_state()
        if self._drawing:  # inside draw() the CPU's generator stands for this one: it follows
            torch.default_generator.set_state(self.generator_state)

    def initial_seed(self):
        return self.seed

    def get_state(self):
        # On the host whatever the default device (these bytes are no tensor of the job's).
        self._restart()  # what follows is what set_rng_state of these bytes will draw again
        return torch.tensor(list(self.seed.to_bytes(8, "little")) + list(self.offset.to_bytes(8, "little")),
                            dtype=torch.uint8, device="cpu")

    def set_state(self, state):
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
            raise TypeError("torch.cuda.set_rng_state expects a torch.ByteTensor, got %s" % type(state).__name__)
        raw = bytes(state.detach().to("cpu").reshape(-1)[:16].tolist())
        raw = raw + bytes(16 - len(raw))
        self.seed = int.from_bytes(raw[:8], "little")
        self.offset = int.from_bytes(raw[8:], "little")
        self._restart()

    def draw(self, run):
        """run() with the CPU's default generator standing for this one; the CPU's own state is left as it was.
        A DTensor's operation reaches the dispatch mode whole, and its local random operation runs inside
        DTensor's own dispatch (which the mode does not see) after the RNG tracker has set CUDA's state: while
        drawing, setting the state sets the CPU generator that stands for it too."""
        cpu = torch.default_generator
        saved = cpu.get_state()
        cpu.set_state(self.generator_state)
        self._drawing += 1
        try:
            out = run()
        finally:
            self._drawing -= 1
            self.generator_state = cpu.get_state()
            cpu.set_state(saved)
        n = 0
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, torch.Tensor):
                n += t.numel()
        self.offset = (self.offset + max(4, (n + 3) // 4 * 4)) & 0xFFFFFFFFFFFFFFFF
        return out


class Devices:
    """Note [A device per local rank]
    A rank of a distributed job (the runner's `ranks:`, or torchrun) sees every GPU of its node and takes its
    own with torch.cuda.set_device(LOCAL_RANK); DDP, Lightning and Accelerate then index that device (DDP's
    per-device stream list, Lightning's check that the GPUs asked for exist). The virtual device models one
    GPU per process, the one the process uses: it counts LOCAL_WORLD_SIZE devices (1 outside a distributed
    job), remembers the current one (set_device, torch.cuda.device(i), _exchange_device), and a device tensor
    says it is on the current device. Every allocation of the process is booked in its one memory model, as a
    rank's own GPU's; `torch.cuda.memory_allocated(other)` answers for it too (a rank that reads another GPU's
    figures reads its own). An index outside the count is CUDA's error ("invalid device ordinal")."""

    def __init__(self, count=None):
        if count is None:
            try:
                count = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
            except ValueError:
                count = 1
        self.count = min(max(count, 1), 64)
        self.index = 0
        self.current = torch.device("cuda", 0)

    def index_of(self, device):
        """The index `device` names (an int, "cuda", "cuda:1", a torch.device); None: the current one."""
        if device is None:
            return None
        if isinstance(device, int):
            return device
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            return device.index
        return None

    def set(self, device):
        i = self.index_of(device)
        if i is None or i < 0:
            return
        if i >= self.count:
            raise RuntimeError("CUDA error: invalid device ordinal (the virtual device has %d device%s: one per "
                               "local rank)" % (self.count, "" if self.count == 1 else "s"))
        self.index = i
        self.current = torch.device("cuda", i)

    def exchange(self, device):
        before = self.index
        self.set(device)
        return before


class _DeviceGuard:
    """torch.cuda.device(i) / device_of(t): the current device inside (Note [A device per local rank])."""

    devices = None  # set by Runtime.answers

    def __init__(self, device=None):
        if device is not None and isinstance(device, torch.Tensor):
            device = None  # device_of(t): a tensor on the device is on the current one
        self.target = self.devices.index_of(device) if self.devices else None
        self.idx = self.target if self.target is not None else 0
        self.saved = None

    def __enter__(self):
        if self.devices and self.target is not None and self.target >= 0:
            self.saved = self.devices.exchange(self.target)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.devices.set(self.saved)
        return False


class _Range:
    """torch.cuda.nvtx.range: a no-op context manager and decorator."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


class Runtime:
    def __init__(self, device):
        self.device = device
        self.default_stream = Stream()
        self.current = self.default_stream
        self.rng = PhiloxState()
        self.devices = Devices()

    def make_current(self, stream):
        # The cuBLAS workspace is per handle and stream (Libraries.blas_call): the device knows the current one.
        self.current = stream
        self.device.current_stream = None if stream is self.default_stream else stream

    def answers(self):
        """What torch.cuda's functions answer on the virtual device: name -> value."""
        dev, model = self.device, self.device.model
        runtime = self
        devices = _DeviceGuard.devices = self.devices

        def memory_allocated(device=None):
            dev.sweep()
            return model.allocated

        def memory_reserved(device=None):
            dev.sweep()
            return model.reserved

        def memory_stats(device=None):
            dev.sweep()
            return model.stats()

        def reset_peak_memory_stats(device=None):
            dev.sweep()
            model.reset_peak()

        def empty_cache():
            dev.sweep()
            model.empty_cache()

        def mem_get_info(device=None):
            dev.sweep()
            return model.mem_info()

        def set_per_process_memory_fraction(fraction, device=None):
            _, total = model.source.mem_info()
            model.fraction_limit = int(total * fraction)

        class _Properties:
            def __init__(self):
                free, total = mem_get_info()
                self.name = "virtual CUDA device (PyTorch %s on the CPU, caching-allocator model)" % torch.__version__
                self.total_memory = total
                self.major, self.minor = 9, 0  # as the H100 the model's figures were checked against
                self.multi_processor_count = 1

        def memory_summary(device=None, abbreviated=False):
            s = memory_stats()
            return ("|  virtual CUDA device: memory summary (modelled)  |\n"
                    "|  allocated: %d bytes (peak %d)  |\n|  reserved: %d bytes (peak %d)  |\n|  segments: %d  |\n"
                    % (s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"],
                       s["reserved_bytes.all.current"], s["reserved_bytes.all.peak"], s["segment.all.current"]))

        class _StreamContext:
            def __init__(self, stream):
                self.stream, self.saved = stream, None

            def __enter__(self):
                self.saved = runtime.current
                if self.stream is not None:
                    runtime.make_current(self.stream)
                return self.stream

            def __exit__(self, *exc):
                runtime.make_current(self.saved)
                return False

        def set_stream(stream):
            runtime.make_current(stream if stream is not None else runtime.default_stream)

        answers = {
            "is_available": lambda: True, "device_count": lambda: devices.count,
            "current_device": lambda: devices.index, "set_device": devices.set,
            "synchronize": lambda device=None: None, "is_initialized": lambda: True,
            "init": lambda: None, "get_device_name": lambda device=None: _Properties().name,
            "get_device_properties": lambda device=None: _Properties(),
            "memory_allocated": memory_allocated, "memory_reserved": memory_reserved,
            "max_memory_allocated": lambda device=None: model.peak_allocated,
            "max_memory_reserved": lambda device=None: model.peak_reserved,
            "memory_stats": memory_stats, "reset_peak_memory_stats": reset_peak_memory_stats,
            "empty_cache": empty_cache, "mem_get_info": mem_get_info,
            "set_per_process_memory_fraction": set_per_process_memory_fraction, "memory_summary": memory_summary,
            "get_device_capability": lambda device=None: (9, 0), "is_bf16_supported": lambda *a, **k: True,
            # No stream is ever capturing a graph (optimizers on PyTorch 2.x ask).
            "is_current_stream_capturing": lambda: False,
            # Note [The CUDA generator's state]: the CPU RNG draws; CUDA's state is its 16 bytes, kept here.
            "manual_seed": runtime.rng.manual_seed, "manual_seed_all": runtime.rng.manual_seed,
            "seed": lambda: None, "seed_all": lambda: None, "initial_seed": runtime.rng.initial_seed,
            "get_rng_state": lambda device="cuda": runtime.rng.get_state(),
            "set_rng_state": lambda state, device="cuda": runtime.rng.set_state(state),
            "get_rng_state_all": lambda: [runtime.rng.get_state()],
            "set_rng_state_all": lambda states: runtime.rng.set_state(states[0]),
            "Event": Event, "Stream": Stream, "ExternalStream": Stream, "StreamContext": _StreamContext,
            "stream": _StreamContext, "current_stream": lambda device=None: runtime.current,
            "default_stream": lambda device=None: runtime.default_stream, "set_stream": set_stream,
            "device": _DeviceGuard, "device_of": _DeviceGuard, "_exchange_device": devices.exchange,
            "_maybe_exchange_device": devices.exchange, "_lazy_init": lambda: None,
        }
        # CUDA graphs are not modelled: a clear error where the CPU build's dummy class would say "Tried to
        # instantiate dummy base class CUDAGraph" (Note [No CUDA runtime under the virtual device]).
        for name in ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle"):
            answers[name] = _graphs_not_modelled(name)
        return answers

    def install(self, torch_, patches):
        answers = self.answers()
        model = self.device.model

        def answer(name):
            return lambda original: answers[name]

        for name in _patches.CUDA_RUNTIME + ("empty_cache",):
            # A CPU build lacks some of them (its torch.cuda is a stub): provided all the same, as code calls them.
            patches.replace(WHO, "torch.cuda", name, answer(name), add=name not in _ONLY_WHERE_THERE)
        for owner, names in _patches.CUDA_MIRRORS + (("torch.cuda.memory", ("empty_cache",)),):
            for name in names:
                patches.replace(WHO, owner, name, answer(name))
        # The allocator's own entry, which the probe calls to flush the cache before a faulted step (Note
        # [Flushing before a faulted step] in probe/steps.py), so that the code's empty_cache() stays its own.
        patches.replace(WHO, "torch._C", "_cuda_emptyCache", answer("empty_cache"), add=True)
        # Read as a variable, not through is_initialized(), by torch.utils.checkpoint: without it a checkpointed
        # block's recomputation would not set the device's RNG state back (Note [The CUDA generator's state]).
        patches.replace(WHO, "torch.cuda", "_initialized", lambda original: True)
        patches.replace(WHO, "torch", "compile", self._compile)
        # The allocator's OOM observers (the probe's: Note [Caught or not] in probe/ooms.py) hear of each OOM
        # the model raises, as the native allocator's do on PyTorch 2.x.
        patches.replace(WHO, "torch._C", "_cuda_attach_out_of_memory_observer", lambda original: model.oom_observers.append,
                        add=True)
        nvtx = {"range_push": lambda msg: 0, "range_pop": lambda: 0, "mark": lambda msg: None,
                "range_start": lambda msg: 0, "range_end": lambda rid: None, "range": _Range}
        for name in _patches.NVTX:
            patches.replace(WHO, "torch.cuda.nvtx", name, lambda original, value=nvtx[name]: value)
        self._install_accelerator(answers, patches)

    def _compile(self, original):
        """Note [torch.compile on the virtual device]
        Dynamo does not trace under a dispatch mode of the user's kind ("non-infra torch dispatch mode present,
        this is not supported today in torch.compile"): under the device's mode every compiled frame is
        skipped and runs eagerly, which is what the device models. With fullgraph=True a skipped frame is an
        error instead ("torch.compile with fullgraph=True found no compiled frames"): torchtitan compiles
        flex_attention that way. So torch.compile is asked for fullgraph=False here (what it returns is still
        torch's own: an OptimizedModule keeps _orig_mod), and the job says once that compiled code ran eagerly
        (a `divergence`, `compile`): a GPU runs fused kernels, which hold less."""
        device = self.device

        def compile(model=None, *args, **kwargs):
            if kwargs.get("fullgraph"):
                kwargs["fullgraph"] = False
            device.diverged("compile", "torch.compile ran the code eagerly (the virtual device's dispatch mode makes "
                            "Dynamo skip every frame): a GPU runs compiled, fused kernels, which hold less")
            return original(model, *args, **kwargs) if model is not None else original(*args, **kwargs)
        return compile

    def _install_accelerator(self, answers, patches):
        """torch.accelerator (PyTorch 2.x) answers as torch.cuda does."""
        devices = self.devices
        accel = {"is_available": lambda: True, "device_count": lambda: devices.count,
                 "current_accelerator": lambda check_available=False: torch.device("cuda"),
                 "current_device_index": lambda: devices.index, "current_device_idx": lambda: devices.index,
                 "set_device_index": devices.set, "set_device_idx": devices.set,
                 "synchronize": lambda device=None: None,
                 # Adam and AdamW (PyTorch >= 2.10) ask the accelerator's current stream whether a graph is
                 # being captured, before every step: the virtual device's stream never is.
                 "current_stream": lambda device=None: self.current,
                 "set_stream": answers["set_stream"],
                 "get_memory_info": lambda device=None: answers["mem_get_info"]()}
        for name in ("empty_cache", "memory_allocated", "memory_reserved", "memory_stats", "max_memory_allocated",
                     "max_memory_reserved", "reset_peak_memory_stats"):
            accel[name] = answers[name]
        for owner in ("torch.accelerator", "torch.accelerator.memory"):
            for name in _patches.ACCELERATOR:
                patches.replace(WHO, owner, name, lambda original, value=accel[name]: value)
