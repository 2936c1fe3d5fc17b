"""The shape-only mode of the virtual CUDA device: the user's unchanged training runs with tensors that carry
shape, dtype and storage but no data, so that a 7B model's step costs seconds and no real memory, while every
"GPU" storage is still booked in the caching-allocator model through the shim (issue 31; docs/predict.md).

Note [Shape-only mode]
Only the device is fake. PyTorch's FakeTensorMode (torch/_subclasses/fake_tensor.py) runs an ATen operation on
meta storages: the outputs have the shapes, dtypes and strides the real kernels would give, and no bytes. The
device's tensors are fake tensors (their fake device is the CPU), and so is everything computed from one; the
host's tensors are real and compute for real, so a data pipeline (numpy memmaps indexed by `torch.randint`,
fake-data datasets, tokenizers, a DataLoader's collate and pins) gives the model batches of their real
shapes (issue 43: with the host faked too, nanoGPT's memmap batches came out (12, 0)). Which is which:
  - a tensor made for the device (`.cuda()`, `.to("cuda")`, a factory with device="cuda", the default
    device; the device's making()) is made under the fake mode, from a real host tensor's shape and dtype;
  - an operation with a fake input runs in the fake mode (FakeTensor's own dispatch; real inputs, such as
    a host tensor added to a device one, are taken as fakes of themselves), one with real inputs only runs
    for real;
  - model state is fake from its start: a Parameter registered on a module (`nn.Linear(...)` on the host,
    before `.cuda()`) is replaced by a fake one of its shape, so a 7B model costs no host memory and no
    initialisation time (its initialisers then run on the fake); buffers stay as the code made them.
Everything else the virtual device does stays as it is: `.cuda()` lands "on the CPU" (a fake CPU tensor),
autocast runs as CPU autocast (FakeTensors carry the CPU dispatch keys, so AutocastCPU applies), and the
caching-allocator model, the shim's caps, faults and events, the probe and its breakdowns see the same
bookings. Where the device differs from the full one:
  - a storage's identity is its StorageImpl's address (`untyped_storage()._cdata`), since a fake storage has
    no data pointer (the full device uses the data pointer, which is cheaper where there is one);
  - an operation that must produce a value for Python from a fake tensor (`_local_scalar_dense`: `.item()`,
    `float(t)`, `bool(t)`, `if torch.isnan(loss)`, a formatted print; `.tolist()`, `.numpy()`: Note [Values
    read back from a fake tensor] in fake_state.py) gets a stand-in (Note [Stand-in values]), and the run
    says so: a `values_not_computed` event, which makes every check that compares values inconclusive;
  - torch.save and torch.load of fake tensors write and read placeholders (Note [A checkpoint of fake
    tensors] in fake_state.py).

Note [Stand-in values]
A stand-in should let the training loop go on as it would on healthy numbers: a floating value is 1.0 (a
finite, positive loss), an integer 0, and a boolean False, except where the device can tell what a healthy
run computes: the outputs of isnan/isinf are all-False and of isfinite all-True, any/all/logical_not carry
that on. So both `if torch.isnan(loss).any(): skip` and `if not torch.isfinite(loss).all(): skip` go on
training. Every stand-in is counted by the user's line that asked for it.

Note [The exact peak]
The full device takes a peak breakdown when allocated first passes 17/16 of the last one (Note [The peak
breakdown] in probe/memory.py). A prediction wants the breakdown at the peak itself, and shape-only steps are cheap,
so this device takes it at each local maximum that is a new high: when a storage is about to be given back
while allocated is above the last breakdown taken (by more than 1/1024), the breakdown is gathered before the
free, without sweeping (the sweep would free storages first and change what is measured).

Note [What a prediction covers]
A prediction is the peak of what the run did, so it says what that was: the training steps it completed
(optimizer steps, as the probe counts them: `steps`), the phases it booked memory in with each one's highest
allocated (`phases`: forward, backward, optimizer, eval, checkpoint, ...), and whether `predict --steps N`
stopped it (`stopped_after`: the run raises SystemExit(0) when the probe's Nth step is done, for trainers
with no step limit of their own). A run that completed no training step predicts nothing (the runner says
why and draws no "fits on" table: runner/src/app/predict_command.cpp).

Note [Kernels a GPU runs]
Where PyTorch picks a different kernel on a GPU than on the CPU and the choice changes memory, shape-only mode
picks the GPU's by default, since it predicts a GPU run: optimizers that would default to the foreach
implementation on CUDA (Adam, AdamW, SGD, ...: all parameters on the device, not differentiable, not fused)
take it here too, and foreach keeps whole-model temporaries (Adam's sqrt(v) for every parameter at once) that
the per-tensor loop does not; scaled_dot_product_attention takes the kernel a GPU would (Note [Attention as a
GPU runs it] in kernels.py) and so does dropout (Note [Dropout as a GPU runs it]); reductions book the staging
buffer a GPU's kernel asks for (Note [A reduction's scratch on a GPU] in reductions.py), and convolutions the
workspace cuDNN asks for (Note [cuDNN's convolutions as a GPU runs them] in convolutions.py).
OOMH_SHAPE_KERNELS=cpu keeps the CPU's choices, so that a prediction compares with the full virtual device's
figure (tests/python/test_predict.py).
"""

import atexit
import sys
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from .. import _breakdown, _sites
from .. import _patches
from .host_rng import HostGenerator
from .kernels import gpu_attention, gpu_dropout
from .device import VirtualDevice
from .fake_state import FakeState
from .libraries import LIBRARY_ERRORS
from .mode import DeviceMode, seeded

WHO = _patches.SHAPE_ONLY

_aten = torch.ops.aten
_SCALAR = _aten._local_scalar_dense.default
_ALWAYS = {"isnan": False, "isinf": False, "isposinf": False, "isneginf": False, "isfinite": True}
_CARRY = {"any": False, "all": False, "logical_not": True, "bitwise_not": True}  # name -> flips the value
MAX_OOMS = 4
SNAP_FRACTION = 1024  # Note [The exact peak]


class ShapeOnlyDevice(VirtualDevice):
    """Note [Shape-only mode]."""

    values_computed = False

    def __init__(self, ctx, model):
        super().__init__(ctx, model)
        self.fake = None
        self.stand_ins = 0
        self.stand_in_sites = {}   # the user's line -> stand-ins it asked for
        self.assumed = {}          # storage key -> the boolean a healthy run computes there (Note [Stand-in values])
        self.snap_at = 0           # allocated at the last peak breakdown (Note [The exact peak])
        self.rising = False
        self.snapping = False
        self.peak = None           # the breakdown at the highest allocated seen
        self.ooms = []             # the first OOMs the model raised: where and when
        self.context = 0           # the driver's memory in use before the first segment (the CUDA context)
        self.kernels = ctx.settings.shape_kernels
        self.state = FakeState(self)
        self.phase_peaks = {}      # phase -> the highest allocated booked in it (Note [What a prediction covers])
        self.coverage = _Coverage(self, getattr(ctx.settings, "shape_steps", None))
        self.host_generator = HostGenerator(self)

    @staticmethod
    def _key(t):
        try:
            return t.untyped_storage()._cdata
        except Exception:  # noqa: BLE001 - sparse and other layouts have no plain storage
            return None

    def storage_key(self, s):
        return s._cdata

    def make_mode(self):
        return _ShapeOnlyMode(self)

    def install(self):
        # Note [Shape-only mode]: entered only where a device tensor is made; fake inputs bring it themselves.
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.ctx.hooks.register(self.coverage)
        self.ctx.patches.registered(WHO, "its part on the hook bus: the steps and phases a prediction covers, the "
                                    "stop after N steps", lambda: self.ctx.hooks.unregister(self.coverage))
        try:
            free, total = self.model.source.mem_info()
            self.context = max(0, total - free - self.model.reserved)
        except Exception:  # noqa: BLE001 - a budget without a driver
            self.context = 0
        original_oom = self.model.oom_error

        def oom_error(message):
            self._note_oom(message)
            return original_oom(message)

        self.model.oom_error = oom_error
        super().install()
        self._patch_swap()
        self._patch_checks()
        self._patch_parameters()
        self._patch_data_parallel()
        self.state.install(self.ctx.patches)
        if self.kernels == "gpu":
            self._patch_optimizer_defaults()
            # Note [Attention as a GPU runs it], Note [Dropout as a GPU runs it] (kernels.py)
            self.ctx.patches.replace(WHO, "torch.nn.functional", "scaled_dot_product_attention",
                                     lambda original: gpu_attention(self, original))
            self.ctx.patches.replace(WHO, "torch.nn.functional", "dropout", lambda original: gpu_dropout(self, original))
        self.ctx.emit("shape_only", kernels=self.kernels, context=self.context)
        atexit.register(self.write_prediction)
        self.ctx.patches.registered(WHO, "the prediction written at exit (atexit)",
                                    lambda: atexit.unregister(self.write_prediction))
        return self

    # ---- Note [The exact peak]
    def book(self, t):
        self.peak_mark = 1 << 62  # the full device's 1/16 trigger stays off: peaks are taken at local maxima
        super().book(t)
        allocated = self.model.allocated
        if allocated > self.snap_at:
            self.rising = True
        phase = self.ctx.clock.phase
        if allocated > self.phase_peaks.get(phase, -1):
            self.phase_peaks[phase] = allocated

    def _release(self, key):
        if self.rising and not self.snapping and key in self.tracked:
            self.take_peak()
        super()._release(key)

    def sweep(self, young_only=False):
        # Note [The exact peak]: every storage that died gives its block back before the next booking, not only
        # the youngest ones: a shape-only step is cheap enough, and allocated then follows the GPU's frees.
        if self.snapping:
            return
        super().sweep(False)

    def take_peak(self):
        self.rising = False
        allocated = self.model.allocated
        self.snap_at = allocated + allocated // SNAP_FRACTION
        if self.peak is not None and allocated <= self.peak["allocated"]:
            return
        self.snapping = True
        try:
            seen, clock = self.ctx.seen, self.ctx.clock
            fields = _breakdown.virtual(self, list(seen.models), list(seen.optimizers))
            fields.update(step=clock.current_step(), phase=clock.phase)
            fields["reserved_peak"] = self.model.peak_reserved
            self.peak = fields
        except Exception as e:  # noqa: BLE001 - a prediction without its breakdown still has its figures
            self.peak = {"allocated": allocated, "reserved": self.model.reserved, "error": repr(e)}
        finally:
            self.snapping = False

    # ---- what the code sees
    def stand_in(self, t):
        """Note [Stand-in values]: the value asked for from the fake tensor t."""
        self.stand_ins += 1
        site = _sites.site_text(_sites.user_site(sys._getframe(2), 1)) or "?"
        first = not self.stand_in_sites
        self.stand_in_sites[site] = self.stand_in_sites.get(site, 0) + 1
        if first:
            self.ctx.emit("values_not_computed", site=site)
        if t.dtype == torch.bool:
            return bool(self.assumed.get(self._key(t), False))
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return 1.0
        return 0

    def _note_oom(self, message, library=None):
        if len(self.ooms) >= MAX_OOMS:
            return
        clock = self.ctx.clock
        oom = {"site": _sites.site_text(_sites.user_site(sys._getframe(2))),
               "step": clock.current_step(), "phase": clock.phase,
               "allocated": self.model.allocated, "reserved": self.model.reserved, "message": message}
        if library is not None:
            oom["library"] = library  # its handle, outside the caching allocator: a RuntimeError, not an OOM
        self.ooms.append(oom)

    def library_refused(self, library):
        self._note_oom(LIBRARY_ERRORS[library], library)

    def _patch_swap(self):
        """Module._apply (`model.cuda()`, `.to(dtype)`) swaps a FakeTensor parameter with its converted copy,
        which fails when anything holds a weak reference to it (the fake mode does, for every Parameter made
        under it); then the parameter takes the copy's data in place, as `_apply` does for plain tensors."""
        def swap(original):
            def swap_tensors(t1, t2):
                try:
                    return original(t1, t2)
                except RuntimeError:
                    if not (isinstance(t1, torch.Tensor) and isinstance(t2, torch.Tensor)):
                        raise
                    with torch.no_grad():
                        t1.data = t2.detach()
            return swap_tensors
        self.ctx.patches.replace(WHO, "torch.utils", "swap_tensors", swap)

    def _patch_data_parallel(self):
        """Note [nn.DataParallel in shape-only mode]
        nn.DataParallel's forward checks that every parameter and buffer is on `src_device_obj` (cuda:0). On
        the full virtual device a tensor says cuda:0 (Note [What a tensor on the virtual device says it is] in
        tensors.py); a fake tensor's `device` is FakeTensor's own property, which says its fake device, the
        CPU, and cannot be made to say cuda:0 without the fake mode's own device logic (_find_common_device)
        reading it too. So for one device, and only when every parameter and buffer is on the device, the
        forward runs with `src_device_obj` set to the fakes' device for its duration: the check passes as it
        would on a GPU, the scatter is the device's (Note [nn.DataParallel on the virtual device]), and a
        module left on the host still gets torch's own error."""
        dev = self

        def patch(original):
            def forward(module, *inputs, **kwargs):
                ids = getattr(module, "device_ids", None) or []
                held = list(module.module.parameters()) + list(module.module.buffers()) if len(ids) == 1 else []
                if not held or not all(dev.on_device(t) for t in held):
                    return original(module, *inputs, **kwargs)
                wanted = module.src_device_obj
                module.src_device_obj = held[0].device
                try:
                    return original(module, *inputs, **kwargs)
                finally:
                    module.src_device_obj = wanted
            return forward
        self.ctx.patches.replace(WHO, "torch.nn.parallel.data_parallel.DataParallel", "forward", patch)

    def _patch_parameters(self):
        """Note [Shape-only mode]: a real Parameter registered on a module is replaced by a fake one."""
        fake = self
        made = {}  # id(real Parameter) -> (a weak reference to it, its fake): one registered twice stays one (tied)

        def make(original):
            def register_parameter(module, name, param):
                if (isinstance(param, torch.Tensor) and not isinstance(param, FakeTensor) and not param.is_meta
                        and param.layout == torch.strided):
                    real, key = param, id(param)
                    entry = made.get(key)
                    if entry is not None and entry[0]() is real:
                        param = entry[1]
                    else:
                        with fake.fake:
                            data = torch.empty_strided(tuple(real.shape), tuple(real.stride()), dtype=real.dtype)
                        param = torch.nn.Parameter(data, requires_grad=real.requires_grad)
                        made[key] = (weakref.ref(real, lambda _, k=key: made.pop(k, None)), param)
                return original(module, name, param)
            return register_parameter
        self.ctx.patches.replace(WHO, "torch.nn.Module", "register_parameter", make)

    def _patch_checks(self):
        """isfinite and isinf are composite (made of eq, abs, ne, ...): the value a healthy run computes is set
        on their result here (Note [Stand-in values])."""
        def assuming(value):
            def make(original):
                def check(*args, **kwargs):
                    out = original(*args, **kwargs)
                    if isinstance(out, torch.Tensor):
                        self.assume(out, value)
                    return out
                return check
            return make
        for owner in ("torch", "torch.Tensor"):
            for name in _patches.FINITE_CHECKS:
                self.ctx.patches.replace(WHO, owner, name, assuming(_ALWAYS[name]))

    def assume(self, t, value):
        if len(self.assumed) > 4096:  # keys of dead storages: the newest matter
            self.assumed.clear()
        self.assumed[self._key(t)] = value

    def _patch_optimizer_defaults(self):
        """Note [Kernels a GPU runs]: the foreach optimizers a GPU would run."""
        import torch.optim  # noqa: F401 - its submodules, each with its own reference to the function
        dev = self

        def gpu_default(original):
            def _default_to_fused_or_foreach(params, differentiable, use_fused=False):
                fused, foreach = original(params, differentiable, use_fused)
                if fused or foreach or differentiable or torch.jit.is_scripting():
                    return fused, foreach
                on_device = all(p is None or dev.on_device(p) for p in params)
                return False, bool(params) and on_device
            return _default_to_fused_or_foreach

        for mod in list(sys.modules.values()):
            name = getattr(mod, "__name__", "") or ""
            if name == "torch.optim" or name.startswith("torch.optim."):
                self.ctx.patches.replace_in(WHO, "torch.optim.*", mod, "_default_to_fused_or_foreach", gpu_default)

    # ---- the prediction
    def prediction(self):
        if self.rising:
            self.take_peak()
        m = self.model
        return {
            "peak_allocated": m.peak_allocated, "peak_reserved": m.peak_reserved, "context": self.context,
            # cuBLAS's and cuDNN's own handles, outside the caching allocator (Note [What libraries allocate
            # outside the caching allocator] in libraries.py): a card holds them beside reserved memory.
            "libraries": self.libraries.held(),
            "breakdown": self.peak or {}, "ooms": self.ooms, "values_computed": False,
            "stand_ins": self.stand_ins,
            "stand_in_sites": [{"site": s, "count": n} for s, n in
                               sorted(self.stand_in_sites.items(), key=lambda kv: -kv[1])[:8]],
            "kernels": self.kernels, "divergences": sorted(self.divergences),
            "segments": m.segment_count, "torch": torch.__version__,
            # Note [What a prediction covers]
            "steps": self.ctx.clock.completed,
            "phases": [{"phase": p, "peak_allocated": v} for p, v in
                       sorted(self.phase_peaks.items(), key=lambda kv: -kv[1])],
            "stopped_after": self.coverage.stopped_after,
            "saved": self.state.saved,
        }

    def write_prediction(self):
        try:
            self.ctx.emit("prediction", **self.prediction())
        except Exception as e:  # noqa: BLE001 - at exit: say it, never raise
            sys.stderr.write("oomharness: the shape-only prediction could not be written: %r\n" % (e,))


class _Coverage:
    """Note [What a prediction covers]: the steps the run completed, and the stop after N of them."""

    def __init__(self, device, stop_after):
        self.device = device
        self.stop_after = stop_after   # predict --steps N (OOMH_SHAPE_STEPS), or None
        self.stopped_after = None

    def on_step_done(self, fields):
        clock = self.device.ctx.clock
        if self.stop_after is not None and clock.completed >= self.stop_after and self.stopped_after is None:
            self.stopped_after = clock.completed
            # A BaseException: the code's `except Exception` does not swallow it; atexit writes the prediction.
            raise SystemExit(0)


class _ShapeOnlyMode(DeviceMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        dev = self.device
        if func is _SCALAR and isinstance(args[0], FakeTensor):
            return dev.stand_in(args[0])
        if seeded(func) and args and isinstance(args[0], FakeTensor) and not dev.on_device(args[0]):
            dev.host_generator.follow(func, args, kwargs)  # Note [The host generator under a fake model]
        if dev.creating() and not dev.copying_to_host():
            with dev.fake:  # a tensor made for the device: fake (Note [Shape-only mode])
                out = super().__torch_dispatch__(func, types, args, kwargs)
        else:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        if isinstance(out, FakeTensor) and out.dtype == torch.bool:
            name = func.overloadpacket.__name__.rstrip("_")
            if name in _ALWAYS:
                dev.assume(out, _ALWAYS[name])
            elif name in _CARRY and args and isinstance(args[0], torch.Tensor):
                value = dev.assumed.get(dev._key(args[0]))
                if value is not None:
                    dev.assume(out, (not value) if _CARRY[name] else value)
        return out
