"""The shape-only device's safetensors files: checkpoints of fake tensors that Hugging Face's libraries write
and read (virtual_device/shape_only.py installs it through FakeState).

Note [A safetensors file of fake tensors]
safetensors' writer reads each tensor's bytes, which a fake tensor has not (Hugging Face's Trainer, PEFT and
Accelerate save model.safetensors at every checkpoint). In shape-only mode `safetensors.torch.save_file` of
a dict with fake tensors writes a valid safetensors file whose fake tensors' bytes are zeros the file never
stores: the header (names, dtypes, shapes, offsets, and `__metadata__` with the key `oomharness` saying it
came from a shape-only run), the real tensors' bytes, and the file extended to its full length as a sparse
file, so a 7B model's checkpoint costs a few kilobytes of disk. `load_file` in shape-only mode reads such a file
back as fake tensors from its header alone (booked on the device when `device` names CUDA), and `safe_open` of
such a file gives the same fakes through its own calls (keys, metadata, get_tensor, get_slice, get_tensors);
the tensors that were real when saved (listed under `__metadata__`'s `oomharness.real`) come back real, their
bytes read from the file. Any other file loads as it is. `safetensors.torch.save` of fake tensors (bytes in
memory, which would be the model's size) is a call the device cannot run: the job's error names it and the
line that made it (unsupported.py), never a traceback from inside safetensors.
"""

import json
import struct
from collections import OrderedDict

import torch

from .fake_state import is_fake
from .tensors import is_cuda as tensors_is_cuda
from .unsupported import unsupported

WHO = "device.shape_only"


class SafetensorsFiles:
    """Note [A safetensors file of fake tensors]: safetensors.torch's save_file, load_file, save and safe_open in
    shape-only mode; `state` (FakeState) keeps the counts of what was saved and loaded."""

    def __init__(self, state):
        self.state = state
        self.device = state.device

    def install(self, patches):
        patches.replace(WHO, "safetensors.torch", "save_file", self._save_file)
        patches.replace(WHO, "safetensors.torch", "load_file", self._load_file)
        patches.replace(WHO, "safetensors.torch", "save", self._save_bytes)
        for owner in ("safetensors", "safetensors.torch"):
            patches.replace(WHO, owner, "safe_open", self._safe_open)

    def _save_file(self, original):
        dev = self.device

        def save_file(tensors, filename, metadata=None):
            if not any(is_fake(t) for t in tensors.values()):
                return original(tensors, filename, metadata)
            header, chunks, real, end = {}, [], [], 0
            for name in sorted(tensors):
                t = tensors[name]
                code = _SAFETENSORS_DTYPES.get(t.dtype)
                if code is None:
                    raise TypeError("shape-only mode cannot save a %s tensor to safetensors (%s)" % (t.dtype, name))
                size = t.numel() * t.element_size()
                header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [end, end + size]}
                if not is_fake(t):
                    with dev.host_work():
                        chunks.append((end, t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()))
                    real.append(name)
                end += size
            meta = {str(k): str(v) for k, v in (metadata or {}).items()}
            meta[SAFETENSORS_KEY] = "shape-only: the fake tensors' bytes are zeros"
            meta[SAFETENSORS_REAL_KEY] = json.dumps(real, separators=(",", ":"))
            header["__metadata__"] = meta
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)
            start = 8 + len(text)
            with open(filename, "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text)
                for offset, data in chunks:
                    f.seek(start + offset)
                    f.write(data)
                f.truncate(start + end)
            self.state.saved += 1
        return save_file

    def _load_file(self, original):
        dev = self.device

        def load_file(filename, device="cpu"):
            header = _shape_only_header(filename)
            if header is None:
                return original(filename, device)
            on_device = tensors_is_cuda(device)
            with _ShapeOnlyFile(filename, header, self) as f:
                out = f.get_tensors()
            if on_device:
                for t in out.values():
                    dev.book(t)
            return out
        return load_file

    def make(self, filename, info, real):
        """A tensor of a shape-only safetensors file (its header entry `info`) on the host: real, its bytes read
        from the file, when it was real when saved; else a fake made from the header."""
        dtype, shape = _SAFETENSORS_NAMES[info["dtype"]], tuple(info["shape"])
        if real:
            start, end = info["data_offsets"]
            with open(filename, "rb") as f:
                f.seek(8 + struct.unpack("<Q", f.read(8))[0] + start)
                data = bytearray(f.read(end - start))
            with self.device.host_work():
                return torch.frombuffer(data, dtype=dtype).reshape(shape) if data else torch.empty(shape, dtype=dtype)
        with self.device.fake:
            t = torch.empty(shape, dtype=dtype)
        self.state.loaded += 1
        return t

    def _safe_open(self, original):
        def safe_open(filename, framework, device="cpu", *args, **kwargs):
            header = _shape_only_header(filename)
            if header is None or str(framework) not in ("pt", "torch", "pytorch"):
                return original(filename, framework, device, *args, **kwargs)
            return _ShapeOnlyFile(filename, header, self)  # the device's loading layer above books "cuda"
        return safe_open

    def _save_bytes(self, original):
        def save(tensors, metadata=None):
            if any(is_fake(t) for t in tensors.values()):
                raise unsupported("safetensors.torch.save() of a fake tensor",
                                  "in shape-only mode tensors have no bytes, and these would be the model's size in "
                                  "host memory; save with safetensors.torch.save_file(tensors, path), which the "
                                  "prediction writes as a sparse file")
            return original(tensors, metadata)
        return save


# safetensors' dtype names, and the metadata keys of a shape-only file.
SAFETENSORS_KEY = "oomharness"
SAFETENSORS_REAL_KEY = "oomharness.real"  # the names of the tensors that were real when saved (a JSON list)
_SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                       torch.uint8: "U8", torch.bool: "BOOL"}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        _SAFETENSORS_DTYPES[getattr(torch, _name)] = _code
_SAFETENSORS_NAMES = {v: k for k, v in _SAFETENSORS_DTYPES.items()}


def _real_names(header):
    try:
        names = json.loads(header["__metadata__"].get(SAFETENSORS_REAL_KEY, "[]"))
        return set(names) if isinstance(names, list) else set()
    except (ValueError, TypeError, AttributeError):
        return set()


class _ShapeOnlyFile:
    """safe_open of a safetensors file a shape-only run wrote (Note [A safetensors file of fake tensors]): the
    calls safetensors' handle answers, from the header, with the file's tensors made as SafetensorsFiles.make does."""

    def __init__(self, filename, header, files):
        self._filename, self._header, self._files = filename, header, files
        self._names = [k for k in header if k != "__metadata__"]
        self._real = _real_names(header)  # read from the metadata once, not per tensor

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _info(self, name):
        if name not in self._names:
            raise KeyError("File does not contain tensor %s" % name)  # safetensors' own words
        return self._header[name]

    def keys(self):
        return sorted(self._names)

    def offset_keys(self):
        return sorted(self._names, key=lambda k: self._header[k]["data_offsets"][0])

    def metadata(self):
        return dict(self._header.get("__metadata__") or {})

    def get_tensor(self, name):
        return self._files.make(self._filename, self._info(name), name in self._real)

    def get_tensors(self):
        return OrderedDict((k, self.get_tensor(k)) for k in self.offset_keys())

    def get_slice(self, name):
        return _ShapeOnlySlice(self, name, self._info(name))


class _ShapeOnlySlice:
    """safe_open(...).get_slice(name): its shape and dtype, and the part indexed as a tensor of its own."""

    def __init__(self, f, name, info):
        self._f, self._name, self._info = f, name, info

    def get_shape(self):
        return list(self._info["shape"])

    def get_dtype(self):
        return self._info["dtype"]

    def __getitem__(self, index):
        whole = self._f.get_tensor(self._name)
        return whole[index].clone()  # a tensor of its own, as safetensors' slice reads one


def _shape_only_header(filename):
    """The header of a safetensors file a shape-only run wrote, or None (any other file, or no such file)."""
    try:
        with open(filename, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > 100 << 20:
                return None
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error, TypeError):
        return None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or SAFETENSORS_KEY not in meta:
        return None
    if any(isinstance(v, dict) and v.get("dtype") not in _SAFETENSORS_NAMES for k, v in header.items() if k != "__metadata__"):
        return None
    return header
