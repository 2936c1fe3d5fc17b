"""The patch table: every function of torch (and of Python) that the in-job parts replace, in one place.

Note [The patch table]
The virtual device and the probe replace functions that user code calls (torch.load, Tensor.to,
torch.cuda.empty_cache, ...), and some are replaced by both: torch.load is the device's (it reads storages
meant for the GPU to the host and books them) and the probe's (it records what was loaded). What a call then
does depends on which replacement is outside the other, so the order is not left to the order of
installation: SITES lists every replaced attribute once, with its owner, and the layers that replace it,
innermost first. A part installs its replacement with PatchTable.replace(who, owner, name, make), where
make(original) returns the replacement; the table refuses a (owner, name, who) it does not list, so the list
stays complete, and stacks the layers of a site in the listed order whatever the order of the calls (a layer
added under one already installed is put beneath it, and the ones above are made again on top). What is not
a replacement (a global hook torch offers, a dispatch mode entered, a callback at exit) is registered with
PatchTable.registered(who, what, undo), whose `what` must be a row of REGISTRATIONS. uninstall(who) takes
away the layers and registrations of the parts whose name starts with `who` (all with None) and leaves every
attribute as it was before them: tests/python/test_patches.py installs the device and the probe, uninstalls
them, and checks that every attribute of every site is its original object again.
"""

import importlib
import sys
import types

from ._boot import after_exec, spec_elsewhere

DEVICE, SHAPE_ONLY = "device", "device.shape_only"

# The factories the virtual device answers for (device="cuda", or the default device).
FACTORIES = ("zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye", "tensor",
             "as_tensor", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
             "randint_like", "randperm", "normal", "empty_strided", "scalar_tensor")
# Tensor methods that make a tensor where their `device=` says (else where the tensor is).
NEW_TENSOR_METHODS = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")
# torch.cuda's functions the virtual device answers from its model and its host objects.
CUDA_RUNTIME = ("is_available", "device_count", "current_device", "set_device", "synchronize", "is_initialized",
                "init", "get_device_name", "get_device_properties", "memory_allocated", "memory_reserved",
                "max_memory_allocated", "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
                "mem_get_info", "set_per_process_memory_fraction", "memory_summary", "get_device_capability",
                "is_bf16_supported", "is_current_stream_capturing", "manual_seed", "manual_seed_all", "seed", "initial_seed",
                "seed_all", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
                "Event", "Stream", "ExternalStream", "StreamContext", "stream", "current_stream", "default_stream",
                "set_stream", "device", "device_of", "_exchange_device", "_maybe_exchange_device", "_lazy_init",
                "CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle")
# torch.cuda's submodules that define what torch.cuda re-exports: code may call them there.
CUDA_MIRRORS = (
    ("torch.cuda.graphs", ("is_current_stream_capturing", "CUDAGraph", "graph", "make_graphed_callables",
                           "graph_pool_handle")),
    ("torch.cuda.random", ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
                           "get_rng_state_all", "set_rng_state_all")),
    ("torch.cuda.memory", ("memory_allocated", "memory_reserved", "memory_stats", "mem_get_info",
                           "max_memory_allocated", "reset_peak_memory_stats", "memory_summary")),
    ("torch.cuda.streams", ("Event", "Stream", "ExternalStream")),
)
ACCELERATOR = ("is_available", "device_count", "current_accelerator", "current_device_index", "current_device_idx",
               "set_device_index", "set_device_idx", "synchronize", "current_stream", "set_stream", "empty_cache",
               "memory_allocated", "memory_reserved", "memory_stats", "max_memory_allocated", "max_memory_reserved",
               "reset_peak_memory_stats", "get_memory_info")
NVTX = ("range_push", "range_pop", "mark", "range_start", "range_end", "range")
FINITE_CHECKS = ("isnan", "isinf", "isposinf", "isneginf", "isfinite")

# (owner, names, layers innermost first). An owner is a dotted path: a module, or a class in one.
SITES = (
    # The virtual device (virtual_device/).
    ("torch", FACTORIES, ("device.tensors",)),
    ("torch.Tensor", ("cuda", "to", "cpu", "pin_memory", "record_stream", "device") + NEW_TENSOR_METHODS,
     ("device.tensors",)),
    ("torch", ("set_default_device", "get_default_device"), ("device.tensors",)),
    ("torch.utils._device.DeviceContext", ("__torch_function__",), ("device.tensors",)),
    ("torch.nn.parameter.UninitializedTensorMixin", ("materialize",), ("device.tensors",)),
    # Note [A storage resized on the device] (virtual_device/tensors.py): FSDP2 frees and gets back a parameter's memory.
    ("torch.UntypedStorage", ("resize_",), ("device.tensors",)),
    ("torch.autograd", ("grad",), ("device.libraries",)),
    ("torch.autograd", ("backward",), ("device.libraries", "probe.steps")),
    ("torch.amp.autocast_mode.autocast", ("__init__",), ("device.amp",)),
    ("torch.amp.grad_scaler.GradScaler", ("__init__",), ("device.amp",)),
    ("torch.cuda.amp.GradScaler", ("__init__",), ("device.amp",)),
    ("torch.cuda", CUDA_RUNTIME, ("device.runtime",)),
    # Note [The CUDA generator's state] (virtual_device/runtime.py): CUDA counts as initialised, as
    # is_initialized() says, so activation checkpointing saves and restores the device's RNG state.
    ("torch.cuda", ("_initialized",), ("device.runtime",)),
    ("torch", ("compile",), ("device.runtime",)),
    ("torch.cuda", ("empty_cache",), ("device.runtime", "probe.memory")),
    ("torch.cuda.memory", ("empty_cache",), ("device.runtime", "probe.memory")),
    ("torch.cuda.nvtx", NVTX, ("device.runtime",)),
    ("torch._C", ("_cuda_emptyCache", "_cuda_attach_out_of_memory_observer"), ("device.runtime",)),
    ("torch.accelerator", ACCELERATOR, ("device.runtime",)),
    ("torch.accelerator.memory", ACCELERATOR, ("device.runtime",)),
    ("torch", ("load",), (SHAPE_ONLY, "device.loading", "probe.checkpoints")),
    ("torch.serialization", ("load",), ("device.loading",)),
    ("torch.serialization", ("location_tag",), ("device.loading",)),
    ("torch.storage._StorageBase", ("cuda", "to"), ("device.loading",)),
    ("torch.storage.TypedStorage", ("cuda", "to"), ("device.loading",)),
    ("safetensors", ("safe_open",), (SHAPE_ONLY, "device.loading")),
    ("safetensors.torch", ("safe_open",), (SHAPE_ONLY, "device.loading")),
    ("safetensors.torch", ("save_file", "load_file", "save"), (SHAPE_ONLY,)),
    ("torch.UntypedStorage", ("data_ptr",), (SHAPE_ONLY,)),
    ("torch.Tensor", ("data_ptr",), (SHAPE_ONLY,)),
    ("torch.nn.parallel.scatter_gather", ("Scatter",), ("device.parallel",)),
    ("torch.distributed", ("init_process_group", "new_group"), ("device.parallel",)),
    ("torch.distributed.distributed_c10d", ("init_process_group", "new_group"), ("device.parallel",)),
    # Its shape-only mode (virtual_device/shape_only.py).
    ("torch.utils", ("swap_tensors",), (SHAPE_ONLY,)),
    ("torch", FINITE_CHECKS, (SHAPE_ONLY,)),
    ("torch.Tensor", FINITE_CHECKS, (SHAPE_ONLY,)),
    ("torch.optim.*", ("_default_to_fused_or_foreach",), ("device.tensors", SHAPE_ONLY)),
    # Note [Attention as a GPU runs it], Note [Dropout as a GPU runs it] (virtual_device/kernels.py).
    ("torch.nn.functional", ("scaled_dot_product_attention", "dropout"), (SHAPE_ONLY,)),
    ("torch.nn.Module", ("register_parameter",), (SHAPE_ONLY,)),
    ("torch.nn.parallel.data_parallel.DataParallel", ("forward",), (SHAPE_ONLY,)),
    ("torch.Tensor", ("numpy", "__format__"), (SHAPE_ONLY,)),
    ("torch._subclasses.fake_tensor.FakeTensor", ("tolist",), (SHAPE_ONLY,)),
    # The probe (probe/).
    ("torch", ("save",), (SHAPE_ONLY, "probe.checkpoints")),
    ("torch.optim.Optimizer", ("__init__",), ("probe.steps",)),
    ("torch.optim.Optimizer", ("_optimizer_step_code",), ("probe.steps",)),
    ("torch.optim.Optimizer", ("zero_grad",), ("probe.grads",)),
    ("torch.nn.Module", ("zero_grad",), ("probe.grads",)),
    ("torch.utils.data.dataloader._BaseDataLoaderIter", ("_next_index", "__next__"), ("probe.batches",)),
    # Note [What a resume restored] (probe/checkpoints.py): each part of a training state restored.
    ("torch.optim.Optimizer", ("load_state_dict",), ("probe.checkpoints",)),
    ("torch.optim.lr_scheduler.*", ("load_state_dict",), ("probe.checkpoints",)),
    ("torch.amp.grad_scaler.GradScaler", ("load_state_dict",), ("probe.checkpoints",)),
    ("torch.cuda.amp.GradScaler", ("load_state_dict",), ("probe.checkpoints",)),
    ("torch", ("set_rng_state",), ("probe.checkpoints",)),
    ("torch.random", ("set_rng_state",), ("probe.checkpoints",)),
    ("random", ("setstate",), ("probe.checkpoints",)),
    # Note [A DCP checkpoint is one checkpoint] (probe/checkpoints.py), once the job imports the module.
    ("torch.distributed.checkpoint", ("save", "load"), ("probe.checkpoints",)),
    ("sys", ("excepthook",), ("device.unsupported", "probe.ooms")),
    # Note [Stacks a job's signal handler cannot take away] (_boot.py).
    ("signal", ("signal",), ("job.stacks",)),
) + tuple((owner, names, ("device.runtime",)) for owner, names in CUDA_MIRRORS)

# What is installed without replacing an attribute: (who, what).
REGISTRATIONS = (
    ("job", "the control block's event count, added at exit (atexit)"),
    ("job", "a process outside the shim that held device memory, said at exit (atexit)"),
    ("device", "the device's TorchDispatchMode, entered on the thread that imported torch"),
    ("device.amp", "CUDA's autocast lists for the CPU's autocast (AutocastCPU kernels)"),
    (SHAPE_ONLY, "its part on the hook bus: the steps and phases a prediction covers, the stop after N steps"),
    (SHAPE_ONLY, "the prediction written at exit (atexit)"),
    ("probe.forwards", "the global module forward pre-hook and forward hook"),
    ("probe.forwards", "the training model's class's __call__ (Note [One model's forwards])"),
    ("probe.steps", "the global optimizer step pre-hook and post-hook"),
    ("probe.checkpoints", "a finder that installs its replacements once the job imports their module"),
    ("probe.ooms", "the process's end (atexit)"),
    ("probe", "work at CUDA initialisation (torch.cuda._lazy_call): the OOM observer, the memory history"),
)

_LAYERS = {}
for _owner, _names, _layers in SITES:
    for _name in _names:
        if (_owner, _name) in _LAYERS:
            raise AssertionError("the patch table lists %s.%s twice" % (_owner, _name))
        _LAYERS[(_owner, _name)] = _layers
_REGISTERED = {(who, what) for who, what in REGISTRATIONS}


def resolve(path):
    """The object at a dotted path ("torch.cuda.memory", "torch.optim.Optimizer"), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


class _Site:
    __slots__ = ("owner", "name", "original", "own", "layers")

    def __init__(self, owner, name):
        self.owner, self.name = owner, name
        self.original = getattr(owner, name, None)
        # A class's attribute may be inherited (Tensor.cuda is TensorBase's), and an added one (add=True) is
        # nobody's: then the owner gets none back.
        self.own = hasattr(owner, name) and (not isinstance(owner, type) or name in vars(owner))
        self.layers = []  # [(position, who, make)], innermost first


class PatchTable:
    """Note [The patch table]."""

    def __init__(self):
        self._sites = {}          # (id(owner object), name) -> _Site
        self._registrations = []  # (who, what, undo)

    def replace(self, who, owner, name, make, add=False):
        """Replaces `owner.name` (owner: the dotted path of a SITES row) with make(the layer beneath). Nothing
        happens when the owner lacks the attribute, unless `add` (make then gets None): a CPU build of torch
        lacks torch._C's CUDA entries, which the virtual device provides."""
        return self.replace_in(who, owner, resolve(owner), name, make, add)

    def replace_in(self, who, row, obj, name, make, add=False):
        """As replace(), for an owner object `obj` that the row `row` of SITES stands for (a row such as
        "torch.optim.*" covers several modules)."""
        layers = _LAYERS.get((row, name))
        if layers is None or who not in layers:
            raise KeyError("the patch table (oomharness/_patches.py) lists no replacement of %s.%s by %s" % (row, name, who))
        if obj is None or not (add or hasattr(obj, name)):
            return False
        key = (id(obj), name)
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = _Site(obj, name)
        position = layers.index(who)
        if any(p == position for p, _, _ in site.layers):
            return False  # installed already
        site.layers.append((position, who, make))
        site.layers.sort(key=lambda layer: layer[0])
        self._rebuild(site)
        return True

    def registered(self, who, what, undo):
        """Records something installed without a replacement, and how to undo it."""
        if (who, what) not in _REGISTERED:
            raise KeyError("the patch table (oomharness/_patches.py) lists no registration %r by %s" % (what, who))
        self._registrations.append((who, what, undo))

    def when_imported(self, who, module, install):
        """Runs install() once the job has imported `module` (now, if it has): for replacements in a module
        that costs too much to import for every job (torch.distributed.checkpoint: half a second). Note [A
        module patched once the job imports it]."""
        if module in sys.modules:
            install()
            return
        finder = _after_import()
        finder.waiting.setdefault(module, []).append(install)
        self.registered(who, "a finder that installs its replacements once the job imports their module",
                        lambda: finder.forget(module, install))

    def installed(self, who=None):
        """[(owner, name, who)] of the layers in place (who: a prefix of the parts' names)."""
        return [(site.owner, site.name, w) for site in self._sites.values() for _, w, _ in site.layers
                if who is None or w.startswith(who)]

    def uninstall(self, who=None):
        """Takes away the layers and registrations of the parts whose name starts with `who` (every one with
        None), newest first."""
        def mine(w):
            return who is None or w == who or w.startswith(who + ".")
        for entry in reversed(list(self._registrations)):
            if mine(entry[0]):
                self._registrations.remove(entry)
                try:
                    entry[2]()
                except Exception:
                    pass
        for key, site in list(self._sites.items()):
            kept = [layer for layer in site.layers if not mine(layer[1])]
            if len(kept) != len(site.layers):
                site.layers = kept
                self._rebuild(site)
            if not site.layers:
                del self._sites[key]

    @staticmethod
    def _rebuild(site):
        if not site.layers and not site.own:
            delattr(site.owner, site.name)
            return
        value = site.original
        for _, _, make in site.layers:
            value = _mark(make(value), value)
        setattr(site.owner, site.name, value)


# Note [A module patched once the job imports it]
# One sys.meta_path finder for the process, answering nothing itself: when a module something waits for is
# imported, it asks the other finders for the module's spec and wraps its loader's exec_module, so that the
# waiting installs run once the module has been executed (as _boot.py's TorchFinder waits for torch: a lookup
# alone, importlib.util.find_spec, runs nothing). A find_spec for any other name costs a dictionary look-up.
class _AfterImport:
    def __init__(self):
        self.waiting = {}   # module name -> [install]
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.waiting or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = spec_elsewhere(self, name, path, target)
        except Exception:
            return None
        finally:
            self._busy.discard(name)
        return after_exec(spec, lambda module: self.installs(name))

    def installs(self, name):
        for install in self.waiting.pop(name, ()):
            try:
                install()
            except Exception:
                pass

    def forget(self, module, install):
        waiting = self.waiting.get(module, [])
        if install in waiting:
            waiting.remove(install)
        if not waiting:
            self.waiting.pop(module, None)


_finder = []


def _after_import():
    if not _finder:
        _finder.append(_AfterImport())
    if _finder[0] not in sys.meta_path:
        sys.meta_path.insert(0, _finder[0])
    return _finder[0]


def _mark(replacement, original):
    """A replacement function says what it replaces (__wrapped__, as functools.wraps sets it)."""
    if isinstance(replacement, types.FunctionType) and not hasattr(replacement, "__wrapped__"):
        replacement.__wrapped__ = original
    return replacement
