"""Fake tensors that leave the device's world in shape-only mode: a checkpoint written with torch.save and read
back with torch.load, and values asked for as Python or NumPy objects (`.tolist()`, `.numpy()`). safetensors
files of fake tensors are safetensors_files.py's.

Note [A checkpoint of fake tensors]
A fake tensor has no data, so torch.save cannot write it as it is (PyTorch refuses to pickle the meta
storage under it), and a shape-only run that saves a checkpoint (most trainers do, every N steps or at their
end) used to die there. In shape-only mode torch.save writes each fake tensor as a *placeholder*: a real tensor
of the same dtype and shape whose strides are all 0 over one 32-byte storage that holds MAGIC, with a byte
saying whether the tensor was on the device. It pickles as any tensor does (whole modules, optimizer states,
weights_only loads all work), the file stays small whatever the model's size, and it is written where the
code asked, as exec's full virtual device writes its checkpoints (a shape-only checkpoint's values are not
the model's: never resume a real training from one). torch.load in shape-only mode (this run or a later one)
turns every placeholder it reads back into a fake tensor of that shape and dtype; one that was on the device
is booked there again when the load restores locations (map_location None, as torch.load puts a CUDA tensor
back on CUDA), and the device's loading part books the others when map_location names CUDA. So the bytes
booked are the checkpoint's real bytes, never 32. Placeholders are found in what torch.load returns: nested
dicts, lists and tuples, and the parameters and buffers of modules in them (loading.tensors_in's reach).

Note [A fake tensor's address]
A fake tensor's storage is a meta storage, whose data_ptr() is 0 for every one of them. Code that tells
shared tensors apart by address then finds every tensor of a model shared with every other: Transformers'
save_pretrained (remove_tied_weights_from_state_dict, through id_tensor_storage) refuses to save "shared
tensors ... which are not properly defined", and safetensors' own check would too. In shape-only mode a meta
storage's data_ptr() is the address of its storage object (the identity the shape-only device books it by),
and a fake tensor's data_ptr() that plus its offset: distinct storages have distinct addresses, views of one
storage share it, as on a GPU. Nothing reads memory there.

Note [Values read back from a fake tensor]
`.tolist()` and `.numpy()` of a fake tensor (a device tensor, or its `.cpu()` copy) give stand-ins of its shape
(Note [Stand-in values] in shape_only.py), counted as `.item()`'s are: a nested list, and a read-only NumPy
array that costs one element whatever the shape; a formatted one-element tensor (f"{loss:.4f}") formats its
stand-in, as PyTorch formats `.item()` of a real one.
"""

import importlib.util
from collections import OrderedDict

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor


MAGIC = b"oomharness:shape-only:tensor:v1"  # 31 bytes; the 32nd says where the tensor was
assert len(MAGIC) == 31
ON_DEVICE, ON_HOST = b"D", b"H"
STORAGE_BYTES = 32
WHO = "device.shape_only"


def is_fake(t):
    return isinstance(t, FakeTensor)


def placeholder(t, on_device):
    """The real tensor torch.save writes for the fake tensor t (Note [A checkpoint of fake tensors])."""
    data = bytearray(MAGIC + (ON_DEVICE if on_device else ON_HOST))
    storage = torch.frombuffer(data, dtype=torch.uint8).untyped_storage()
    if t.element_size() > STORAGE_BYTES or t.dtype.is_complex and t.element_size() > 16:
        raise TypeError("shape-only mode cannot save a %s tensor" % t.dtype)
    out = torch.empty(0, dtype=t.dtype).set_(storage, 0, tuple(t.shape), (0,) * t.dim())
    if t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex):
        out.requires_grad_(True)
    return out


def placeholder_of(t):
    """Whether t (a real tensor from torch.load) is a placeholder, and then where its tensor was: "device" or
    "host"; None otherwise."""
    if not isinstance(t, torch.Tensor) or is_fake(t) or t.layout != torch.strided or t.device.type != "cpu":
        return None
    try:
        s = t.untyped_storage()
        if s.nbytes() != STORAGE_BYTES or t.storage_offset() != 0 or any(st != 0 for st in t.stride()):
            return None
        raw = bytes(s)
    except Exception:  # noqa: BLE001 - a storage that cannot be read is no placeholder
        return None
    if raw[:len(MAGIC)] != MAGIC:
        return None
    return {ON_DEVICE: "device", ON_HOST: "host"}.get(raw[len(MAGIC):])


class FakeState:
    """torch.save, torch.load, Tensor.tolist and Tensor.numpy of a shape-only device."""

    def __init__(self, device):
        self.device = device
        self.saved = 0        # checkpoints written with fake tensors in them
        self.loaded = 0       # placeholders read back as fake tensors

    def install(self, patches):
        patches.replace(WHO, "torch", "save", self._save)
        patches.replace(WHO, "torch", "load", self._load)
        patches.replace(WHO, "torch.UntypedStorage", "data_ptr", self._storage_data_ptr)  # Note [A fake tensor's address]
        patches.replace(WHO, "torch.Tensor", "data_ptr", self._tensor_data_ptr)
        if importlib.util.find_spec("safetensors") is not None:  # Note [A safetensors file of fake tensors]
            from .safetensors_files import SafetensorsFiles  # it reads is_fake from here
            SafetensorsFiles(self).install(patches)
        # FakeTensor has its own tolist (an item() per element): the stand-in goes there.
        patches.replace(WHO, "torch._subclasses.fake_tensor.FakeTensor", "tolist", self._tolist)
        patches.replace(WHO, "torch.Tensor", "numpy", self._numpy)
        patches.replace(WHO, "torch.Tensor", "__format__", self._format)

    # ---- Note [A checkpoint of fake tensors]
    def _save(self, original):
        dev = self.device

        def save(obj, f, *args, **kwargs):
            made = [0]

            def reduce_ex(t, protocol):
                made[0] += 1
                stand = placeholder(t, dev.on_device(t))
                if getattr(t, "_is_param", False):
                    return torch._utils._rebuild_parameter, (stand, t.requires_grad, OrderedDict())
                return stand.__reduce_ex__(protocol)

            had = FakeTensor.__dict__.get("__reduce_ex__")
            FakeTensor.__reduce_ex__ = reduce_ex
            try:
                with dev.host_work():  # the placeholders are host tensors: nothing here is booked
                    result = original(obj, f, *args, **kwargs)
            finally:
                if had is None:
                    del FakeTensor.__reduce_ex__
                else:
                    FakeTensor.__reduce_ex__ = had
            if made[0]:
                self.saved += 1
            return result
        return save

    def _load(self, original):
        def load(f, map_location=None, *args, **kwargs):
            out = original(f, map_location, *args, **kwargs)
            return self.restore(out, restore_locations=map_location is None)
        return load

    def restore(self, obj, restore_locations, depth=0):
        """obj with each placeholder replaced by a fake tensor of its shape and dtype (in place for dicts, lists
        and modules; a new tuple for a tuple)."""
        if isinstance(obj, torch.Tensor):
            where = placeholder_of(obj)
            return obj if where is None else self._fake_of(obj, where == "device" and restore_locations)
        if depth >= 16:
            return obj
        if isinstance(obj, dict):
            for k in list(obj.keys()):
                v = obj[k]
                new = self.restore(v, restore_locations, depth + 1)
                if new is not v:
                    obj[k] = new
            return obj
        if isinstance(obj, list):
            for i, v in enumerate(obj):
                new = self.restore(v, restore_locations, depth + 1)
                if new is not v:
                    obj[i] = new
            return obj
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            new = tuple(self.restore(v, restore_locations, depth + 1) for v in obj)
            return obj if all(a is b for a, b in zip(new, obj)) else new
        if isinstance(obj, torch.nn.Module):
            for m in obj.modules():
                for table in (m._parameters, m._buffers):
                    for k, v in list(table.items()):
                        if v is not None:
                            new = self.restore(v, restore_locations, depth + 1)
                            if new is not v:
                                table[k] = new
            if restore_locations:  # LSTM and GRU keep a list of their weights beside the parameters
                for m in obj.modules():
                    if hasattr(m, "_flat_weights") and hasattr(m, "_flat_weights_names"):
                        m._flat_weights = [getattr(m, n) if hasattr(m, n) else None for n in m._flat_weights_names]
            return obj
        return obj

    def _fake_of(self, t, on_device):
        dev = self.device
        self.loaded += 1
        with dev.fake:
            fake = torch.empty(tuple(t.shape), dtype=t.dtype)
        if isinstance(t, torch.nn.Parameter):
            fake = torch.nn.Parameter(fake, requires_grad=t.requires_grad)
        elif t.requires_grad:
            fake.requires_grad_(True)
        if on_device:
            dev.book(fake)
        return fake

    # ---- Note [A fake tensor's address]
    def _storage_data_ptr(self, original):
        def data_ptr(storage):
            if storage.device.type == "meta":
                return storage._cdata
            return original(storage)
        return data_ptr

    def _tensor_data_ptr(self, original):
        def data_ptr(t):
            if is_fake(t):
                return t.untyped_storage()._cdata + t.storage_offset() * t.element_size()
            return original(t)
        return data_ptr

    # ---- Note [Values read back from a fake tensor]
    def _tolist(self, original):
        dev = self.device

        def tolist(t):
            if not is_fake(t):
                return original(t)
            return _nested(dev.stand_in(t), tuple(t.shape))
        return tolist

    def _format(self, original):
        dev = self.device

        def format_(t, spec):
            if is_fake(t) and t.dim() == 0:  # f"{loss:.4f}": Tensor.__format__ formats .item() of a plain Tensor only
                return format(dev.stand_in(t), spec)
            return original(t, spec)
        return format_

    def _numpy(self, original):
        dev = self.device

        def numpy(t, *args, **kwargs):
            if not is_fake(t):
                return original(t, *args, **kwargs)
            value = dev.stand_in(t)
            return np.broadcast_to(np.array(value, dtype=_numpy_dtype(t.dtype)), tuple(t.shape))
        return numpy


def _nested(value, shape):
    return value if not shape else [_nested(value, shape[1:]) for _ in range(shape[0])]


_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
          torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
          torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64,
          torch.complex128: np.complex128}


def _numpy_dtype(dtype):
    return _NUMPY.get(dtype, np.float32)  # bfloat16 has no NumPy type: .numpy() of a real one fails too
