"""What ``torch.load(weights_only=True)`` itself refuses in a pickle, and how it caches storages.

The static scan (:mod:`pickle_scan`) reads a pickle as ``_pickle.c`` does; torch's loader adds its
own rules, which :class:`TorchRules` applies to the inert graph (torch 2.13,
``torch/_weights_only_unpickler.py``, ``torch/serialization.py::_load``, ``torch/_utils.py``,
``torch/_tensor.py``; each rule checked against the real loader in
``tests/checkpoints/test_torch_rebuild_rules.py``):

* **storage cache** - ``persistent_load`` keeps one storage per key: a later reference to a key
  gets the first one's storage, so its tensors take the *first* reference's dtype and element
  count whatever storage type they name (``PersistentRef.first``; the conflict is a
  finding of its own). A persistent id is exactly ``('storage', type, key, location, numel)``.
* **rebuild arguments** - ``_rebuild_tensor``/``_v2``/``_v3``, ``_rebuild_parameter``
  (``_with_state``) and ``_rebuild_from_type_v2`` are called with the arguments as stored:
  their arity; ``set_``'s types (an ``int`` offset, sequences of ``int`` sizes and strides, never
  ``bool``); equal size and stride lengths; a non-negative offset and sizes; a storage size that
  does not overflow (a negative stride over a dimension longer than 1 does); ``requires_grad`` a
  ``bool``, and ``True`` only on floating or complex dtypes; ``metadata`` a dict when set;
  ``_rebuild_from_type_v2``'s ``args`` iterable and its ``state`` a dict or a ``(dict, slots)``
  pair.
* **BUILD** - only on an ``OrderedDict`` with dict state (``state_dict()._metadata``) or an
  allowlisted object: BUILD on a tensor (``set_(*state)``) or a Parameter (``__setstate__``)
  rebinds or refuses; on anything else the loader refuses.
* **containers** - APPEND(S) only on a ``list``; SETITEM(S) only on a dict, ``OrderedDict`` or
  ``Counter``; REDUCE only on an allowlisted function.

A storage view larger than its storage is checked where the bytes are (``tensormap``).
"""

from __future__ import annotations

from typing import Any

from ckptrescue.checkpoints.formats import dtypes
from ckptrescue.checkpoints.formats.pickle_scan import (
    Call,
    Global,
    InertDict,
    InertFrozenSet,
    InertObjDict,
    InertSet,
    PersistentRef,
    PickleError,
    PickleScan,
    TensorRef,
    scan_pickle,
)

_INT64_MAX = (1 << 63) - 1
_ARITY = {  # (min, max) positional arguments
    "_rebuild_tensor": (4, 4), "_rebuild_tensor_v2": (6, 7), "_rebuild_tensor_v3": (7, 8),
    "_rebuild_parameter": (3, 3), "_rebuild_parameter_with_state": (4, 4),
}


def _is_int(value: Any) -> bool:
    return type(value) is int


def _int_seq(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Call) and value.qualname == "torch.Size" and len(value.args) == 1:
        value = value.args[0]
    if type(value) in (tuple, list) and all(_is_int(v) for v in value):
        return tuple(value)
    return None


def _grad_ok(dtype: str | None) -> bool:
    info = dtypes.lookup(dtype)
    return info is None or info.kind in ("float", "complex") or info.name.startswith("float8")


def _view_problem(offset: Any, size: Any, stride: Any) -> str | None:
    """``Tensor.set_(storage, offset, size, stride)``: types, lengths, signs and overflow."""
    sizes, strides = _int_seq(size), _int_seq(stride)
    if not _is_int(offset) or sizes is None or strides is None:
        return "set_() received an invalid combination of arguments (offset " \
            f"{type(offset).__name__}, size {type(size).__name__}, stride " \
            f"{type(stride).__name__})"
    if len(sizes) != len(strides):
        return f"unequal size length ({len(sizes)}) and stride length ({len(strides)})"
    if offset < 0:
        return f"invalid storage offset {offset}"
    if any(s < 0 for s in sizes):
        return f"negative size in {list(sizes)}"
    if 0 in sizes:
        return None
    extent = 1
    for s, st in zip(sizes, strides, strict=True):
        if s > 1 and st < 0:
            return f"Storage size calculation overflowed with sizes={list(sizes)} and " \
                f"strides={list(strides)}"
        extent += (s - 1) * st
        if extent > _INT64_MAX:
            return f"Storage size calculation overflowed with sizes={list(sizes)} and " \
                f"strides={list(strides)}"
    if offset + extent > _INT64_MAX:
        return f"storage offset {offset} overflows"
    return None


def _state_problem(state: Any) -> str | None:
    """``torch._utils._set_obj_state``: a dict, or a ``(dict, slots)`` pair (falsy parts skip)."""
    parts = state
    if isinstance(state, tuple):
        if len(state) != 2:
            return f"Invalid serialized state: a tuple of {len(state)}"
    else:
        parts = (state, None)
    for part in parts:
        if part and not isinstance(part, dict):
            return f"'{type(part).__name__}' object has no attribute 'items' (object state)"
    return None


def _tensor_dtype(value: Any) -> str | None:
    return value.dtype if isinstance(value, TensorRef) else None


def rebuild_problem(name: str, args: tuple[Any, ...]) -> str | None:
    """Why ``torch._utils.<name>(*args)`` (or ``torch._tensor._rebuild_from_type_v2``) raises."""
    if name == "_rebuild_from_type_v2":
        if len(args) != 4:
            return f"_rebuild_from_type_v2() takes 4 positional arguments but {len(args)} " \
                "were given"
        func, new_type, inner, state = args
        if type(inner) not in (tuple, list, InertFrozenSet, InertSet):
            return "_rebuild_from_type_v2: argument after * must be an iterable, not " \
                f"{type(inner).__name__}"
        if not isinstance(new_type, Global) or new_type.qualname not in (
                "torch.Tensor", "torch.nn.parameter.Parameter"):
            return f"_rebuild_from_type_v2: {getattr(new_type, 'qualname', new_type)!r:.60} " \
                "is not a Tensor class"
        if isinstance(func, Global) and func.module == "torch._utils":
            why = rebuild_problem(func.name, tuple(inner))
            if why:
                return why
        return _state_problem(state)
    if name not in _ARITY:
        return None
    low, high = _ARITY[name]
    if not low <= len(args) <= high:
        return f"{name}() takes {low}" + (f" to {high}" if high != low else "") + \
            f" positional arguments but {len(args)} were given"
    if name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
        data, requires_grad = args[0], args[1]
        if not isinstance(data, TensorRef):
            return f"Parameter(data): {type(data).__name__} is not a tensor"
        if type(requires_grad) is not bool:
            return "Parameter(): requires_grad must be bool, not " \
                f"{type(requires_grad).__name__}"
        if requires_grad and not _grad_ok(data.dtype):
            return f"Only Tensors of floating point and complex dtype can require gradients " \
                f"({data.dtype})"
        return _state_problem(args[3]) if name == "_rebuild_parameter_with_state" else None
    storage = args[0]
    if not isinstance(storage, (PersistentRef, Call)):
        return f"{name}: the storage argument is a {type(storage).__name__}"
    why = _view_problem(args[1], args[2], args[3])
    if why or name == "_rebuild_tensor":
        return why
    requires_grad = args[4]
    dtype = storage.storage_dtype if isinstance(storage, PersistentRef) else None
    if name == "_rebuild_tensor_v3":
        d = args[6]
        if not (isinstance(d, Global) and d.module == "torch"):
            return f"_rebuild_tensor_v3: dtype argument is a {type(d).__name__}"
        dtype = dtypes.ALIASES.get(d.name, d.name)
    if type(requires_grad) is not bool:
        return "requires_grad must be a bool"
    if requires_grad and not _grad_ok(dtype):
        return f"only Tensors of floating point and complex dtype can require gradients ({dtype})"
    metadata = args[high - 1] if len(args) == high else None
    return _metadata_problem(metadata, dtype) if metadata else None


def _metadata_problem(metadata: Any, dtype: str | None) -> str | None:
    """``torch._utils.set_tensor_metadata``: a dict of ``str`` keys to values pybind reads as
    ``bool`` (None, bool, int, float); a ``conj`` key, whatever its value, asserts on a dtype
    that is not complex (a ``neg`` key sets the neg bit, whatever its value)."""
    if not isinstance(metadata, dict):
        return f"tensor metadata: expected dict, got {type(metadata).__name__}"
    for key, value in metadata.items():
        if type(key) is not str or not (value is None or type(value) in (bool, int, float)):
            return "_set_tensor_metadata(): incompatible function arguments (metadata " \
                f"{key!r:.40}: {type(value).__name__})"
    info = dtypes.lookup(dtype)
    if "conj" in metadata and info is not None and info.kind != "complex":
        return f"tensor metadata sets conj on a {dtype} tensor (isComplexType assertion)"
    return None


def scan_torch_pickle(data: Any, *, start: int = 0, pid_items: int = 5,
                      **kw: Any) -> PickleScan:
    """``pickle_scan.scan_pickle`` under torch's own rules (``pid_items``: 5 for a zip's
    ``data.pkl``, 6 for a legacy stream's main pickle); raises as ``scan_pickle`` does."""
    rules = TorchRules(pid_items)
    try:
        scan = scan_pickle(data, start=start, rules=rules, **kw)
    except PickleError as exc:
        if exc.partial is not None:
            exc.partial.storage_conflicts = rules.conflicts
        raise
    scan.storage_conflicts = rules.conflicts
    return scan


class TorchRules:
    """``torch.load(weights_only=True)``'s own rules over the inert graph (one per pickle)."""

    def __init__(self, pid_items: int = 5) -> None:
        self.pid_items = pid_items
        self.storages: dict[str, PersistentRef] = {}
        self.conflicts: list[tuple[str, str | None, str | None]] = []  # key, first, later

    def on_persistent(self, ref: PersistentRef) -> str | None:
        pid = ref.pid
        if type(pid) is not tuple:
            return None if type(pid) is int else \
                f"persistent_load id must be tuple or int, but got {type(pid).__name__}"
        if not pid or pid[0] not in ("storage", b"storage"):
            return "Only persistent_load of storage is allowed"
        if len(pid) != self.pid_items:
            return f"persistent id of {len(pid)} items (torch unpacks exactly " \
                f"{self.pid_items - 1} after 'storage')"
        key = ref.key
        first = self.storages.get(key)
        if first is None:
            self.storages[key] = ref
            numel = pid[4]
            if not _is_int(numel) or numel < 0:
                return f"storage {key}: element count {numel!r:.40} is not a non-negative int"
            return None
        if first.storage_dtype != ref.storage_dtype or first.numel != ref.numel:
            self.conflicts.append((key, first.storage_dtype, ref.storage_dtype))
        ref.first = first
        return None

    def on_call(self, func: Any, args: tuple[Any, ...]) -> str | None:
        if not isinstance(func, Global):
            return f"Trying to call reduce for unrecognized function (a {type(func).__name__})"
        if func.module == "torch._utils" or func.qualname == "torch._tensor._rebuild_from_type_v2":
            return rebuild_problem(func.name, args)
        return None

    def on_build(self, target: Any, state: Any) -> str | None:
        if isinstance(target, TensorRef):
            return "BUILD on a tensor: torch calls tensor.set_(*state), which rebinds or " \
                "refuses it"
        if isinstance(target, InertObjDict):
            return None if isinstance(state, dict) else \
                f"BUILD on an OrderedDict with {type(state).__name__} state"
        if isinstance(target, Call) and target.qualname == "torch.nn.parameter.Parameter":
            return "BUILD on a Parameter: torch calls __setstate__ with the stored state"
        if isinstance(target, Call):
            return None  # an allowlisted object: its own __setstate__ / __dict__ update
        return f"Can only build Tensor, Parameter, OrderedDict or allowlisted types, but got " \
            f"{type(target).__name__}"

    def on_append(self, target: Any) -> str | None:
        return None if type(target) is list else \
            f"Can only append to lists, but got {type(target).__name__}"

    def on_setitem(self, target: Any) -> str | None:
        return None if type(target) in (InertDict, InertObjDict) else \
            f"Can only SETITEM for dict, OrderedDict, Counter, but got {type(target).__name__}"
