"""The virtual device's loading part: torch.load(..., map_location="cuda" | "cuda:0" | torch.device("cuda") | 0
| {...: "cuda:0"} | fn) reads the storages to the host, and what was meant for the device is booked there, as
a GPU would hold it (Note [No CUDA runtime under the virtual device] in runtime.py). safetensors' readers
(`safetensors.torch.load_file(path, device="cuda")`, `safe_open(path, framework="pt", device="cuda")`, as
PEFT, Transformers and Accelerate load adapters, weights and resumed states) do the same: the file is read to
the host and each tensor taken from it is booked on the device. safetensors' own reader, asked for "cuda",
copies through pinned memory and the CUDA runtime, which the CPU has not.

Note [Where torch.save says a tensor was]
torch.save writes each storage's location ("cuda:0", "cpu"), and torch.load without map_location puts it back
there: a checkpoint of a GPU's model and optimizer state loads onto the GPU, and holds its memory there until
the code moves it. A storage on the virtual device is a host storage (Note [What a tensor on the virtual
device says it is] in tensors.py), so torch.save wrote "cpu", and a resume that loaded it plainly held
nothing on the device (and got tensors that said cpu). torch.save now writes "cuda:0" for a storage the device
holds, and torch.load with no map_location books what its location moved to CUDA (the storage's .cuda(), or
.to(device=...) on PyTorch >= 2.4, which the load calls for "cuda:0", leaves it on the host and says so). Such a file read by PyTorch outside
the harness on a machine with no GPU needs map_location="cpu", as a GPU's checkpoint does."""

import importlib.util
import threading

import torch

from .tensors import is_cuda

WHO = "device.loading"


def host_location(where):
    """(the map_location to read with, whether the result goes on the device: None when only the load can
    tell)."""
    if where is None:
        return None, None  # the file's own locations: Note [Where torch.save says a tensor was]
    if isinstance(where, (str, torch.device)) or (isinstance(where, int) and not isinstance(where, bool)):
        to_cuda = isinstance(where, int) or is_cuda(where)
        return ("cpu" if to_cuda else where), to_cuda
    if isinstance(where, dict):
        cuda = {k for k, v in where.items() if is_cuda(v)}
        return {k: ("cpu" if k in cuda else v) for k, v in where.items()}, bool(cuda)
    if callable(where):
        return where, None  # known after the load: did the function move a storage (storage.cuda())?
    return where, False


def tensors_in(obj, depth=0):
    """The tensors in what torch.load returned: nested dicts, lists and tuples (a checkpoint's shape)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 16 and isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v, depth + 1)
    elif depth < 16 and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v, depth + 1)


class Loading:
    def __init__(self, device):
        self.device = device
        # moved: the storages (by address) a load's locations or map_location function moved to "the GPU"
        self._local = threading.local()

    def install(self, torch_, patches):
        original_load = torch.load
        patches.replace(WHO, "torch", "load", self._load)
        if getattr(torch.serialization, "load", None) is original_load:
            patches.replace(WHO, "torch.serialization", "load", self._load)
        # A map_location function moves storages with storage.cuda(): on the CPU build that raises, and on a
        # CUDA build without a GPU it reaches the driver. Here it leaves the storage on the host and says so.
        for owner in ("torch.storage._StorageBase", "torch.storage.TypedStorage"):
            patches.replace(WHO, owner, "cuda", self._storage_cuda)
            # torch.load puts a "cuda:0" storage back with storage.to(device=...) (PyTorch >= 2.4's _deserialize)
            patches.replace(WHO, owner, "to", self._storage_to)
        patches.replace(WHO, "torch.serialization", "location_tag", self._location_tag)
        # Only where the job's Python has safetensors (it is imported here, once, before the job's code does).
        if importlib.util.find_spec("safetensors") is not None:
            for owner in ("safetensors", "safetensors.torch"):
                patches.replace(WHO, owner, "safe_open", self._safe_open)

    def _load(self, original):
        dev, local = self.device, self._local

        def load(f, map_location=None, *args, **kwargs):
            target, to_device = host_location(map_location)
            local.moved = set()
            out = original(f, target, *args, **kwargs)
            if to_device:
                for t in tensors_in(out):
                    dev.book(t)
            elif to_device is None and local.moved:
                for t in tensors_in(out):
                    if _storage_address(t) in local.moved:
                        dev.book(t)
            return out
        return load

    def _safe_open(self, original):
        dev = self.device

        def book(t):
            if isinstance(t, torch.Tensor):
                dev.book(t)
            return t

        def safe_open(filename, framework, device="cpu", *args, **kwargs):
            if not is_cuda(device):
                return original(filename, framework, device, *args, **kwargs)
            return _OnDevice(original(filename, framework, "cpu", *args, **kwargs), book)
        return safe_open

    def _location_tag(self, original):
        dev = self.device

        def location_tag(storage):
            # Note [Where torch.save says a tensor was]
            try:
                s = getattr(storage, "_untyped_storage", storage)
                if s.device.type == "cpu" and dev.holds_storage(s):
                    return "cuda:0"
            except Exception:  # noqa: BLE001 - the location torch would give
                pass
            return original(storage)
        return location_tag

    def _storage_to(self, original):
        local = self._local

        def storage_to(storage, *args, **kwargs):
            device = kwargs.get("device", args[0] if args else None)
            if device is not None and is_cuda(device):
                _note_moved(local, storage)
                return storage
            return original(storage, *args, **kwargs)
        return storage_to

    def _storage_cuda(self, original):
        local = self._local

        def storage_cuda(storage, device=None, non_blocking=False, **kwargs):
            _note_moved(local, storage)
            return storage
        return storage_cuda


class _BookedSlice:
    """What safe_open's get_slice gives, whose slices are booked on the device."""

    def __init__(self, inner, book):
        self._inner, self._book = inner, book

    def __getitem__(self, index):
        return self._book(self._inner[index])

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _OnDevice:
    """A safe_open opened for "cuda": the file read to the host, each tensor taken from it booked."""

    def __init__(self, inner, book):
        self._inner, self._book = inner, book

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def get_tensor(self, name):
        return self._book(self._inner.get_tensor(name))

    def get_slice(self, name):
        return _BookedSlice(self._inner.get_slice(name), self._book)

    def get_tensors(self):  # safetensors 0.8's load_file reads every tensor through it
        tensors = self._inner.get_tensors()
        for t in tensors.values():
            self._book(t)
        return tensors

    def __getattr__(self, name):  # keys(), metadata(), offset_keys(), ...
        return getattr(self._inner, name)



def _note_moved(local, storage):
    """A storage the load moved to CUDA (left on the host): its tensors are booked after the load."""
    moved = getattr(local, "moved", None)
    if moved is not None:
        try:
            moved.add(getattr(storage, "_untyped_storage", storage).data_ptr())
        except Exception:  # noqa: BLE001
            pass


def _storage_address(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001
        return None
