"""A ``torch.save``-compatible file of a salvage, with the original's key structure.

``salvage --torch-save`` (a ``torch.save`` source only): the source's ``data.pkl`` was read
statically into an inert graph (``pickle_scan``; nothing was ever unpickled); this module writes
that graph back as a new pickle - opcode by opcode, naming only globals on torch's weights-only
list - with every tensor replaced by the salvaged bytes (the source's verified bytes, or the
``--fill-from`` reference's), each in its own storage record, C-contiguous. The zip layout is
``torch.save``'s (``archive/data.pkl``, ``archive/data/<key>``, ``archive/version``,
``archive/byteorder``), stored, zip64 as needed, so ``torch.load(path, weights_only=True)``
gives back the original nesting: ``{"model": {...}, "optimizer": {...}, "step": 300}``.

What cannot be written that way is refused with the reason (:class:`Unwritable`): an object
that is not plain data or a tensor (torch.load with ``weights_only=True`` would refuse it too),
a tensor that was neither recovered nor filled.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from typing import Any, BinaryIO

from ckptrescue.checkpoints.formats import dtypes, pickle_policy, pickle_scan

_ARCHIVE = "archive"
_STORAGE_CLASS = {v: k for k, v in dtypes.STORAGE_CLASS.items()}


class Unwritable(Exception):
    """The graph holds something a weights-only ``torch.save`` file cannot carry."""


def _s(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    if -(1 << 31) <= value < (1 << 31):
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    if len(raw) > 255:
        raise Unwritable("an integer too large for LONG1")
    return b"\x8a" + bytes([len(raw)]) + raw


def _global(qualname: str) -> bytes:
    if not pickle_policy.weights_only_allowed(qualname):
        raise Unwritable(f"{qualname} is not on torch's weights-only list")
    module, _, name = qualname.rpartition(".")
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


class _Writer:
    def __init__(self, tensor: Callable[[str], tuple[str, tuple[int, ...], str] | None]) -> None:
        self.tensor = tensor  # name -> (storage key, shape, dtype) of a written tensor
        self.depth = 0

    def emit(self, obj: Any, name: str) -> bytes:  # noqa: C901 - one branch per kind
        self.depth += 1
        if self.depth > 64:
            raise Unwritable("nesting deeper than 64")
        try:
            if isinstance(obj, (pickle_scan.TensorRef, pickle_scan.PersistentRef)):
                return self._tensor(name)
            if obj is None:
                return b"N"
            if obj is True or obj is False:
                return b"\x88" if obj else b"\x89"
            if isinstance(obj, int):
                return _int(obj)
            if isinstance(obj, float):
                return b"G" + struct.pack(">d", obj)
            if isinstance(obj, str):
                return _s(obj)
            if isinstance(obj, bytes):
                return _global("_codecs.encode") + b"(" + _s(obj.decode("latin-1")) + \
                    _s("latin1") + b"tR"
            if isinstance(obj, pickle_scan.InertObjDict):
                out = _global("collections.OrderedDict") + b")R" + self._items(obj, name)
                if isinstance(obj.state, dict) and obj.state:
                    out += b"}(" + b"".join(_s(str(k)) + self.emit(v, f"{name}.{k}")
                                            for k, v in obj.state.items()) + b"ub"
                return out
            if isinstance(obj, dict):
                return b"}" + self._items(obj, name)
            if isinstance(obj, list) and not isinstance(obj, pickle_scan.InertSet):
                return b"](" + b"".join(self.emit(v, self._child(name, str(i)))
                                        for i, v in enumerate(obj)) + b"e"
            if isinstance(obj, tuple) and not isinstance(obj, pickle_scan.InertFrozenSet):
                return b"(" + b"".join(self.emit(v, self._child(name, str(i)))
                                       for i, v in enumerate(obj)) + b"t"
            if isinstance(obj, pickle_scan.Global):
                return _global(obj.qualname)
            if isinstance(obj, pickle_scan.Call) and obj.state is None and not obj.items:
                return _global(obj.qualname) + b"(" + b"".join(
                    self.emit(a, self._child(name, str(i))) for i, a in enumerate(obj.args)) \
                    + b"tR"
            raise Unwritable(f"{name or '<root>'}: a {type(obj).__name__} "
                             f"({getattr(obj, 'qualname', '')}) is not plain data")
        finally:
            self.depth -= 1

    @staticmethod
    def _child(name: str, key: str) -> str:
        return f"{name}.{key}" if name else key

    def _items(self, obj: dict[Any, Any], name: str) -> bytes:
        if not obj:
            return b""
        body = b""
        for k, v in obj.items():
            if isinstance(k, tuple):  # an identity key of the inert graph: not plain data
                raise Unwritable(f"{name}: a key that is not plain data")
            body += self.emit(k, name) + self.emit(v, self._child(name, pickle_scan_key(k)))
        return b"(" + body + b"u"

    def _tensor(self, name: str) -> bytes:
        got = self.tensor(name or "<root>")
        if got is None:
            raise Unwritable(f"tensor {name} was neither recovered nor filled")
        key, shape, dtype = got
        cls = _STORAGE_CLASS.get(dtype)
        if cls is None:
            raise Unwritable(f"tensor {name}: dtype {dtype} has no torch storage class")
        numel = 1
        for s in shape:
            numel *= s
        stride, acc = [], 1
        for s in reversed(shape):
            stride.insert(0, acc)
            acc *= max(s, 1)
        pid = b"(" + _s("storage") + _global(f"torch.{cls}") + _s(key) + _s("cpu") + \
            _int(numel) + b"tQ"
        return _global("torch._utils._rebuild_tensor_v2") + b"(" + pid + _int(0) + b"(" + \
            b"".join(_int(s) for s in shape) + b"t(" + b"".join(_int(s) for s in stride) + \
            b"t\x89" + _global("collections.OrderedDict") + b")Rt" + b"R"


def pickle_scan_key(key: Any) -> str:
    """A dict key as the static map names it (``iter_named``)."""
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


def plan(root: Any, tensors: dict[str, tuple[tuple[int, ...], str]],
         ) -> tuple[bytes, dict[str, str]]:
    """The new ``data.pkl`` for ``root`` and the storage key of each tensor name it names;
    ``tensors`` maps each static name to ``(shape, dtype)``. Raises :class:`Unwritable`."""
    keys: dict[str, str] = {}

    def tensor(name: str) -> tuple[str, tuple[int, ...], str] | None:
        if name not in tensors:
            return None
        keys.setdefault(name, str(len(keys)))
        shape, dtype = tensors[name]
        return keys[name], shape, dtype

    body = _Writer(tensor).emit(root, "")
    return b"\x80\x02" + body + b".", keys


def write(out: BinaryIO, data_pkl: bytes, keys: dict[str, str],
          copy: Callable[[str, BinaryIO], None]) -> None:
    """The zip: ``data.pkl``, one stored record per tensor (``copy(name, sink)`` writes its
    C-contiguous bytes), ``byteorder`` and ``version``, as torch.save lays them out."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        zf.writestr(f"{_ARCHIVE}/data.pkl", data_pkl)
        zf.writestr(f"{_ARCHIVE}/byteorder", "little")
        for name, key in keys.items():
            with zf.open(f"{_ARCHIVE}/data/{key}", "w", force_zip64=True) as sink:
                copy(name, sink)  # type: ignore[arg-type]
        zf.writestr(f"{_ARCHIVE}/version", "3\n")
