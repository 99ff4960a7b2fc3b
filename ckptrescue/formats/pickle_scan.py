"""Static pickle inspection: an opcode interpreter that never imports and never calls anything.

Used by the torch zip, legacy and DCP formats to learn what a pickle holds (globals, persistent
storage references, tensors and their dotted names) without running it. The interpreter walks
``pickletools.genops`` and builds an inert object graph:

* ``GLOBAL``/``STACK_GLOBAL``/``INST``/``EXT*`` produce a :class:`Global` (a name, nothing imported);
* ``REDUCE``/``NEWOBJ``/``OBJ``/``INST`` produce a :class:`Call` (callable + args), except for the
  few torch rebuild functions it understands (``_rebuild_tensor*``, ``_rebuild_parameter*``,
  ``OrderedDict``, ``torch.Size``), which become :class:`TensorRef`, pass-throughs, dicts, tuples;
* ``BINPERSID``/``PERSID`` produce a :class:`PersistentRef` (torch storages).

An ``os.system`` payload is therefore a ``Call(Global("posix", "system"), ("touch x",))`` value:
it is recorded, named in the verdict, and never executed. Every global is compared with the
weights-only allowlist (``torch/_weights_only_unpickler.py`` ``_get_allowed_globals``).

Damage shows up as :class:`PickleError` carrying the byte position where parsing stopped.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.formats import dtypes

MAX_PICKLE_BYTES = 512 * 1024 * 1024
_MAX_WALK_NODES = 2_000_000
_MAX_DEPTH = 64

# Python 2 names used by protocol 0-2 pickles (subset of ``_compat_pickle``).
_NAME_MAPPING = {("__builtin__", "set"): ("builtins", "set"),
                 ("__builtin__", "frozenset"): ("builtins", "frozenset"),
                 ("__builtin__", "bytearray"): ("builtins", "bytearray"),
                 ("__builtin__", "complex"): ("builtins", "complex"),
                 ("copy_reg", "_reconstructor"): ("copyreg", "_reconstructor")}
_IMPORT_MAPPING = {"__builtin__": "builtins", "copy_reg": "copyreg"}

_REBUILD_FUNCTIONS = {
    "_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_tensor",
    "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor",
}
_ALLOWED_EXACT = {
    "collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device",
    "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    "torch._tensor._rebuild_from_type_v2", "torch.storage.UntypedStorage",
    "torch.storage.TypedStorage", "torch.per_tensor_affine", "torch.per_tensor_symmetric",
    "torch.per_channel_affine", "torch.per_channel_symmetric",
    "torch.per_channel_affine_float_qparams",
} | {f"torch._utils.{n}" for n in _REBUILD_FUNCTIONS}
_TORCH_DTYPE_NAMES = set(dtypes.BY_NAME) | {f"uint{i}" for i in range(1, 8)} | {
    f"int{i}" for i in range(1, 8)} | set(dtypes.ALIASES) | {
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16"}

_STORAGE_TENSOR_CLASSES = (
    "BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double", "Float",
    "Half", "Int", "Long", "Short")
_TORCH_CLASSES = {f"torch.{c}{k}" for c in _STORAGE_TENSOR_CLASSES for k in ("Storage", "Tensor")
                  } | {f"torch.cuda.{c}{k}" for c in _STORAGE_TENSOR_CLASSES
                       for k in ("Storage", "Tensor")} | {
    "torch.QInt32Storage", "torch.QInt8Storage", "torch.QUInt2x4Storage", "torch.QUInt4x2Storage",
    "torch.QUInt8Storage", "torch.Storage", "torch.Tensor", "torch.TypedStorage",
    "torch.UntypedStorage"}
_TORCH_LAYOUTS = {"torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc",
                  "torch.sparse_bsr", "torch.sparse_bsc", "torch._mkldnn", "torch.jagged"}
_TORCH_MEMORY_FORMATS = {"torch.contiguous_format", "torch.channels_last",
                         "torch.preserve_format", "torch.channels_last_3d"}

# The exact globals a torch.distributed.checkpoint ``.metadata`` pickle is made of, collected
# from real saves (torch 2.13 ``dcp.save`` of model/optimizer state, nested dicts, lists, bytes,
# every dtype) plus the other data classes of the same modules and the pre-2.2 locations of
# ``TensorProperties``. Exact qualified names only: no module prefix is trusted (a prefix let
# ``torch.distributed.checkpoint.filesystem.os.system`` through).
DCP_ALLOWED_EXACT = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "torch.distributed.checkpoint.filesystem._StoragePrefix",
    "torch.distributed.checkpoint._hf_utils._HFStorageInfo",
    "torch.distributed.checkpoint.planner.WriteItemType",
    "torch.distributed.checkpoint.planner.LoadItemType",
    "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
    "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
    "torch.distributed._shard.metadata.ShardMetadata",
    "torch.serialization._get_layout", "torch.Size", "builtins.set", "builtins.frozenset",
    "collections.OrderedDict", "_codecs.encode", "builtins.bytearray", "pathlib.PosixPath",
    "pathlib.Path", "pathlib.PurePosixPath", "pathlib.WindowsPath", "pathlib.PureWindowsPath",
} | _TORCH_LAYOUTS | _TORCH_MEMORY_FORMATS

# What a global that is not on an exact list can do: these run programs, open the network,
# evaluate code, import or unpickle more, or reach arbitrary attributes. Any component of the
# qualified name (dotted attribute paths included) is checked.
DANGEROUS_MODULES = {
    "os", "posix", "nt", "subprocess", "_posixsubprocess", "pty", "socket", "_socket",
    "socketserver", "ssl", "http", "urllib", "urllib2", "ftplib", "smtplib", "telnetlib",
    "requests", "httpx", "aiohttp", "asyncio", "multiprocessing", "runpy", "importlib",
    "imp", "pkgutil", "code", "codeop", "ctypes", "_ctypes", "cffi", "sys", "shutil", "pickle",
    "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve", "webbrowser",
    "platform", "signal", "threading", "_thread", "pdb", "bdb", "timeit", "trace", "cProfile",
    "profile", "tempfile", "glob", "io", "_io", "fcntl", "mmap", "resource", "commands",
    "popen2", "spawn", "distutils", "setuptools", "pip", "venv", "ensurepip", "zipimport",
    "types", "operator", "functools", "inspect", "gc", "weakref", "builtins", "__builtin__",
}
_DANGEROUS_BUILTINS = {
    "exec", "eval", "compile", "open", "getattr", "setattr", "delattr", "__import__",
    "globals", "locals", "vars", "input", "breakpoint", "exit", "quit", "help", "memoryview",
    "type", "object", "super", "classmethod", "staticmethod", "property", "apply",
    "execfile", "reload", "file",
}
_DANGEROUS_NAMES = {"load", "loads", "system", "popen", "spawn", "exec", "eval", "_load",
                    "load_state_dict", "save", "unsafe_load", "run", "call", "check_call",
                    "check_output", "Popen", "connect", "urlopen", "write_text", "write_bytes",
                    "import_module", "__reduce__", "__reduce_ex__", "__setstate__"}


def dangerous(qualname: str) -> bool:
    """True when a global can run programs, code or I/O (see ``DANGEROUS_MODULES``).

    ``builtins.set`` and the like are not dangerous; ``builtins.exec`` is; any qualified name
    with a dangerous module as a component (``torch.distributed.checkpoint.filesystem.os.system``)
    or a loader/exec-like final name (``torch.load``, ``numpy.load``) is.
    """
    parts = qualname.split(".")
    if len(parts) >= 2 and parts[0] in ("builtins", "__builtin__"):
        return parts[1] in _DANGEROUS_BUILTINS or len(parts) > 2
    if any(p in DANGEROUS_MODULES for p in parts[:-1]):
        return True
    return parts[-1] in _DANGEROUS_NAMES or parts[-1] in _DANGEROUS_BUILTINS


def weights_only_allowed(qualname: str) -> bool:
    """True when torch's weights-only unpickler would accept this global (exact names)."""
    if qualname in _ALLOWED_EXACT or qualname in _TORCH_CLASSES:
        return True
    module, _, name = qualname.rpartition(".")
    return module == "torch" and name in _TORCH_DTYPE_NAMES


def dcp_allowed(qualname: str) -> bool:
    """True for the globals a torch.distributed.checkpoint ``.metadata`` pickle is made of."""
    return weights_only_allowed(qualname) or qualname in DCP_ALLOWED_EXACT


def exact_allowed_globals() -> set[str]:
    """Every global an unpickler inside the sandbox may resolve (the union of the lists)."""
    return (_ALLOWED_EXACT | _TORCH_CLASSES | DCP_ALLOWED_EXACT
            | {f"torch.{n}" for n in _TORCH_DTYPE_NAMES})


class PickleError(Exception):
    """The pickle could not be parsed; ``position`` is where parsing stopped."""

    def __init__(self, message: str, position: int | None) -> None:
        super().__init__(message)
        self.position = position


@dataclass(eq=False)
class Global:
    """A global the pickle names (never imported)."""

    module: str
    name: str

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(eq=False)
class Call:
    """An inert stand-in for ``func(*args)`` (REDUCE/NEWOBJ/OBJ/INST), plus any BUILD state."""

    func: Any
    args: tuple[Any, ...]
    state: Any = None
    items: list[Any] = field(default_factory=list)

    @property
    def qualname(self) -> str:
        return self.func.qualname if isinstance(self.func, Global) else "?"

    def attr(self, name: str, default: Any = None) -> Any:
        """A field from the BUILD state (dict state or (dict, slots) state)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[Any, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            state = merged
        if isinstance(state, dict):
            return state.get(name, default)
        return default


@dataclass(eq=False)
class PersistentRef:
    """A persistent id (torch: ``('storage', type, key, location, numel[, view])``)."""

    pid: Any

    @property
    def is_storage(self) -> bool:
        pid = self.pid
        return isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")

    @property
    def key(self) -> str:
        return str(self.pid[2])

    @property
    def storage_dtype(self) -> str | None:
        stype = self.pid[1]
        if isinstance(stype, Global):
            if stype.name in ("UntypedStorage", "TypedStorage"):
                return None
            return dtypes.STORAGE_CLASS.get(stype.name)
        return None

    @property
    def numel(self) -> int | None:
        value = self.pid[4]
        return value if isinstance(value, int) else None

    @property
    def view(self) -> Any:
        return self.pid[5] if len(self.pid) > 5 else None


@dataclass(eq=False)
class TensorRef:
    """What ``_rebuild_tensor*`` would rebuild: a view of one storage."""

    storage: PersistentRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str | None

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    @property
    def extent(self) -> int:
        """Elements of the storage this view touches (from ``offset``)."""
        if any(s == 0 for s in self.size):
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride, strict=False))


class InertDict(dict):  # type: ignore[type-arg]
    """A dict (also stands in for OrderedDict) that keeps BUILD state aside."""

    state: Any = None


@dataclass
class PickleScan:
    """Result of :func:`scan_pickle`."""

    root: Any
    globals: list[str]
    end: int  # offset just past STOP, relative to the start of the scanned bytes
    protocol: int | None
    persistent_refs: list[PersistentRef]
    dotted: set[str] = field(default_factory=set)  # globals named through an attribute path

    def unsafe_globals(self, allowed: Any = weights_only_allowed) -> list[str]:
        """Globals not on the exact list ``allowed``; an attribute path (``GLOBAL 'torch.x
        os.system'``, resolved by ``getattr`` chains) is never on a list."""
        return sorted({g for g in self.globals if g in self.dotted or not allowed(g)})


def _as_int_tuple(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Call) and value.qualname == "torch.Size" and value.args:
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, Global) and value.module == "torch":
        return dtypes.ALIASES.get(value.name, value.name)
    return None


def _build_tensor(func: Global, args: tuple[Any, ...]) -> Any:
    """Inert result of a torch rebuild function (a TensorRef when understood)."""
    name = func.name
    if name in ("_rebuild_parameter", "_rebuild_parameter_with_state") and args:
        return args[0]
    if name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3") and len(args) >= 4:
        storage, offset = args[0], args[1]
        size, stride = _as_int_tuple(args[2]), _as_int_tuple(args[3])
        if isinstance(storage, PersistentRef) and isinstance(offset, int) and size is not None \
                and stride is not None and len(size) == len(stride):
            dtype = storage.storage_dtype if storage.is_storage else None
            if name == "_rebuild_tensor_v3" and len(args) >= 7:
                dtype = _dtype_name(args[6]) or dtype
            return TensorRef(storage, offset, size, stride, dtype)
    return Call(func, args)


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return ("<unhashable>", id(key))
    return key


def scan_pickle(data: bytes | io.BufferedIOBase, *, start: int = 0) -> PickleScan:  # noqa: C901
    """Interpret one pickle (up to its STOP) without importing or calling anything.

    ``data`` is bytes or a binary file positioned at the pickle; ``start`` is added to the
    reported positions. Raises :class:`PickleError` with the failing position on damage.
    """
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    base = stream.tell()
    stack: list[Any] = []
    metastack: list[list[Any]] = []
    memo: dict[int, Any] = {}
    found_globals: list[str] = []
    dotted: set[str] = set()
    prefs: list[PersistentRef] = []
    protocol: int | None = None
    pos = base

    def pop_mark() -> list[Any]:
        nonlocal stack
        items = stack
        stack = metastack.pop()
        return items

    def add_global(module: str, name: str) -> Global:
        module, name = _NAME_MAPPING.get((module, name), (module, name))
        module = _IMPORT_MAPPING.get(module, module)
        found_globals.append(f"{module}.{name}")
        if "." in name:
            dotted.add(f"{module}.{name}")
        return Global(module, name)

    def reduce(func: Any, args: Any) -> Any:
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        if isinstance(func, Global):
            q = func.qualname
            if func.module == "torch._utils" and func.name in _REBUILD_FUNCTIONS:
                return _build_tensor(func, args)
            if q == "collections.OrderedDict":
                out = InertDict()
                if args and isinstance(args[0], (list, tuple)):
                    for pair in args[0]:
                        if isinstance(pair, (list, tuple)) and len(pair) == 2:
                            out[_hashable(pair[0])] = pair[1]
                return out
            if q == "torch.Size" and args:
                tup = _as_int_tuple(args[0])
                if tup is not None:
                    return tup
            if q == "torch._tensor._rebuild_from_type_v2" and len(args) >= 3:
                inner = args[0]
                if isinstance(inner, Global) and len(args) >= 3:
                    inner_args = args[2] if isinstance(args[2], tuple) else ()
                    return reduce(inner, inner_args)
        return Call(func, args)

    try:
        for opcode, arg, opos in pickletools.genops(stream):
            pos = opos if opos is not None else pos
            name = opcode.name
            if name == "PROTO":
                protocol = arg
            elif name in ("FRAME",):
                pass
            elif name == "STOP":
                break
            elif name == "MARK":
                metastack.append(stack)
                stack = []
            elif name == "POP":
                if stack:
                    stack.pop()
                else:
                    pop_mark()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name in ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                          "STRING", "BINSTRING", "SHORT_BINSTRING", "BINBYTES",
                          "SHORT_BINBYTES", "BINBYTES8", "UNICODE", "BINUNICODE",
                          "SHORT_BINUNICODE", "BINUNICODE8", "FLOAT", "BINFLOAT"):
                stack.append(arg)
            elif name == "BYTEARRAY8":
                stack.append(bytearray(arg))
            elif name == "NONE":
                stack.append(None)
            elif name == "NEWTRUE":
                stack.append(True)
            elif name == "NEWFALSE":
                stack.append(False)
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_DICT":
                stack.append(InertDict())
            elif name == "EMPTY_SET":
                stack.append([])
            elif name == "LIST":
                items = pop_mark()
                stack.append(list(items))
            elif name == "TUPLE":
                items = pop_mark()
                stack.append(tuple(items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise PickleError(f"{name} on a short stack", pos)
                items = stack[-n:]
                del stack[-n:]
                stack.append(tuple(items))
            elif name == "DICT":
                items = pop_mark()
                d = InertDict()
                for i in range(0, len(items) - 1, 2):
                    d[_hashable(items[i])] = items[i + 1]
                stack.append(d)
            elif name == "FROZENSET":
                items = pop_mark()
                stack.append(list(items))
            elif name == "APPEND":
                value = stack.pop()
                _append(stack[-1], [value])
            elif name == "APPENDS" or name == "ADDITEMS":
                items = pop_mark()
                _append(stack[-1], items)
            elif name == "SETITEM":
                value = stack.pop()
                key = stack.pop()
                _setitems(stack[-1], [key, value])
            elif name == "SETITEMS":
                items = pop_mark()
                _setitems(stack[-1], items)
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise PickleError(f"memo key {arg} not defined", pos)
                stack.append(memo[arg])
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name == "GLOBAL":
                module, _, gname = str(arg).partition(" ")
                stack.append(add_global(module, gname))
            elif name == "STACK_GLOBAL":
                gname = stack.pop()
                module = stack.pop()
                stack.append(add_global(str(module), str(gname)))
            elif name in ("EXT1", "EXT2", "EXT4"):
                stack.append(add_global("copyreg.extension", str(arg)))
            elif name == "REDUCE":
                args = stack.pop()
                func = stack.pop()
                stack.append(reduce(func, args))
            elif name == "NEWOBJ":
                args = stack.pop()
                cls = stack.pop()
                stack.append(reduce(cls, args))
            elif name == "NEWOBJ_EX":
                stack.pop()  # kwargs
                args = stack.pop()
                cls = stack.pop()
                stack.append(reduce(cls, args))
            elif name == "OBJ":
                items = pop_mark()
                stack.append(reduce(items[0], tuple(items[1:])))
            elif name == "INST":
                module, _, gname = str(arg).partition(" ")
                cls = add_global(module, gname)
                items = pop_mark()
                stack.append(reduce(cls, tuple(items)))
            elif name == "BUILD":
                state = stack.pop()
                target = stack[-1]
                if isinstance(target, (Call, InertDict)):
                    target.state = state
            elif name == "BINPERSID":
                ref = PersistentRef(stack.pop())
                prefs.append(ref)
                stack.append(ref)
            elif name == "PERSID":
                ref = PersistentRef(arg)
                prefs.append(ref)
                stack.append(ref)
            else:  # NEXT_BUFFER, READONLY_BUFFER and anything newer
                raise PickleError(f"unsupported opcode {name}", pos)
        else:
            raise PickleError("pickle ended without STOP", pos)
    except PickleError as exc:
        exc.position = (exc.position - base + start) if exc.position is not None else None
        raise
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, EOFError,
            UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise PickleError(f"{type(exc).__name__}: {exc}", pos - base + start) from None
    root = stack[-1] if stack else None
    end = stream.tell() - base
    return PickleScan(root=root, globals=found_globals, end=end, protocol=protocol,
                      persistent_refs=prefs, dotted=dotted)


def _append(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, Call):
        target.items.extend(items)
    else:
        raise PickleError(f"APPEND to {type(target).__name__}", None)


def _setitems(target: Any, items: list[Any]) -> None:
    if isinstance(target, dict):
        for i in range(0, len(items) - 1, 2):
            target[_hashable(items[i])] = items[i + 1]
    elif isinstance(target, Call):
        target.items.extend(items)
    else:
        raise PickleError(f"SETITEM on {type(target).__name__}", None)


def _key_str(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2 and key[0] == "<unhashable>":
        return "?"
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def iter_named(root: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(dotted_name, value)`` for every TensorRef and bare PersistentRef in the graph.

    Iterative (no recursion limit), visits shared objects once per path but guards cycles;
    bounded (depth 64, 2M nodes) against hostile pickles.
    Dict keys become name parts, list/tuple items their index; an unknown object's BUILD state
    is walked like a dict, its constructor args by index.
    """
    todo: list[tuple[str, Any, frozenset[int]]] = [("", root, frozenset())]
    visited = 0
    while todo:
        path, obj, seen = todo.pop()
        visited += 1
        if visited > _MAX_WALK_NODES:
            return
        if len(seen) > _MAX_DEPTH:  # no checkpoint nests this deep; a hostile pickle might
            continue
        if isinstance(obj, (TensorRef, PersistentRef)):
            yield path, obj
            continue
        if not isinstance(obj, (dict, list, tuple, Call)):
            continue
        oid = id(obj)
        if oid in seen:
            continue
        seen = seen | {oid}
        children: list[tuple[str, Any]] = []
        if isinstance(obj, dict):
            children = [(_key_str(k), v) for k, v in obj.items()]
        elif isinstance(obj, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(obj)]
        else:
            state = obj.state
            if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
                state = state[0]
            if isinstance(state, dict):
                children.extend((_key_str(k), v) for k, v in state.items())
            children.extend((str(i), v) for i, v in enumerate(obj.args))
            items = obj.items
            children.extend((str(i), v) for i, v in enumerate(items))
        for key, child in reversed(children):
            todo.append((f"{path}.{key}" if path else key, child, seen))
