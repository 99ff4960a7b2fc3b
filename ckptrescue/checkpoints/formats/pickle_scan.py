"""Static pickle inspection: an opcode interpreter that never imports and never calls anything.

Used by the torch zip, legacy, DCP and standalone-pickle formats to learn what a pickle holds
(globals, persistent storage references, tensors and their dotted names) without running it.
The opcodes come from :mod:`ckptrescue.checkpoints.formats.pickle_ops`, which reads the bytes exactly as
CPython's C unpickler does (framing, text arguments, lengths); this module applies the
unpickler's stack, mark and memo semantics (``Modules/_pickle.c``) to an inert object graph:

* ``GLOBAL``/``STACK_GLOBAL``/``INST`` produce a :class:`Global` (a name, nothing imported;
  ``STACK_GLOBAL`` takes module and name from the stack, so memo ``GET``s are followed);
  ``EXT1/2/4`` name an entry of copyreg's extension registry (recorded in ``ext_codes``);
* ``REDUCE``/``NEWOBJ``/``NEWOBJ_EX``/``OBJ``/``INST`` produce a :class:`Call`, except for the
  torch rebuild functions it understands, which become :class:`TensorRef`, dicts, tuples;
* ``BINPERSID``/``PERSID`` produce a :class:`PersistentRef` (torch storages).

An error stops the scan where the unpickler stops: everything named before it was resolved and
called by the real unpickler, so the partial result is kept (``PickleScan.error``;
``PickleError.partial``). Work is linear in the input, memory bounded (``MAX_MARKS``,
``MAX_OBJECTS``; hitting one sets ``PickleScan.limit``). Policy (which globals are allowed)
lives in :mod:`ckptrescue.checkpoints.formats.pickle_policy` and is re-exported here.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ckptrescue.checkpoints.formats import dtypes, pickle_ops
from ckptrescue.checkpoints.formats.pickle_policy import (  # noqa: F401 - re-exported
    ACCELERATE_RNG_ALLOWED,
    ALLOWED_EXACT,
    DANGEROUS_MODULES,
    DCP_ALLOWED_EXACT,
    ENUM_MEMBERS,
    REBUILD_FUNCTIONS,
    STANDALONE_ALLOWED,
    TORCH_CLASSES,
    TORCH_DTYPE_NAMES,
    WEIGHTS_ONLY_OPCODES,
    accelerate_rng_allowed,
    dangerous,
    dcp_allowed,
    enum_member,
    exact_allowed_globals,
    standalone_allowed,
    weights_only_allowed,
)

MAX_PICKLE_BYTES = 512 * 1024 * 1024
MAX_MARKS = 100_000  # open MARKs (nesting); no real pickle comes near
MAX_OBJECTS = 4_000_000  # containers and values created
_MAX_WALK_NODES = 2_000_000
_MAX_DEPTH = 64


def _compat_maps() -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, str]]:
    import _compat_pickle

    return dict(_compat_pickle.NAME_MAPPING), dict(_compat_pickle.IMPORT_MAPPING)


_NAME_MAPPING, _IMPORT_MAPPING = _compat_maps()
_BUILTIN_TYPES = (int, float, str, bytes, bytearray, bool, type(None), list, tuple, dict)


class PickleError(Exception):
    """The pickle could not be parsed; ``position`` is where parsing stopped."""

    def __init__(self, message: str, position: int | None,
                 partial: PickleScan | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.partial = partial  # what was read before the error (its globals ran first)


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

    @property
    def merged_state(self) -> Any:
        """The BUILD state with a ``(dict, slots)`` pair merged into one dict (any other state
        as it is)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[Any, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            return merged
        return state

    def attr(self, name: str, default: Any = None) -> Any:
        """A field from the BUILD state (dict state or (dict, slots) state)."""
        state = self.merged_state
        if isinstance(state, dict):
            return state.get(name, default)
        return default


@dataclass(eq=False)
class PersistentRef:
    """A persistent id (torch: ``('storage', type, key, location, numel[, view])``)."""

    pid: Any
    # torch caches storages by key: a later reference to the same key gets the first one's
    # storage (its dtype and numel), whatever type it names (set by the torch rules)
    first: PersistentRef | None = None

    @property
    def is_storage(self) -> bool:
        pid = self.pid
        return isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")

    @property
    def key(self) -> str:
        return str(self.pid[2])

    @property
    def storage_dtype(self) -> str | None:
        if self.first is not None:
            return self.first.storage_dtype
        stype = self.pid[1]
        if isinstance(stype, Global):
            if stype.name in ("UntypedStorage", "TypedStorage"):
                return None
            return dtypes.STORAGE_CLASS.get(stype.name)
        return None

    @property
    def numel(self) -> int | None:
        if self.first is not None:
            return self.first.numel
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
    problem: str | None = None  # why torch's rebuild refuses this tensor (the torch rules)
    # torch's view bits from the rebuild's metadata ("neg", "conj"): the loaded tensor holds
    # the stored values negated / conjugated (``torch._C._set_tensor_metadata``)
    bits: tuple[str, ...] = ()

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
    """A plain dict (EMPTY_DICT/DICT); BUILD on it fails as on a real dict."""

    state: Any = None


class InertObjDict(InertDict):
    """The result of ``OrderedDict(...)``/``Counter(...)``: a dict that also takes BUILD."""


class InertSet(list):  # type: ignore[type-arg]
    """A set (EMPTY_SET); ADDITEMS adds to it."""


class InertFrozenSet(tuple):  # type: ignore[type-arg]
    """A frozenset (FROZENSET)."""


@dataclass
class PickleScan:
    """Result of :func:`scan_pickle`."""

    root: Any
    globals: list[str]
    end: int  # offset just past STOP, relative to the start of the scanned bytes
    protocol: int | None
    persistent_refs: list[PersistentRef]
    dotted: set[str] = field(default_factory=set)  # globals named through an attribute path
    raw_globals: list[tuple[str, str]] = field(default_factory=list)  # as find_class gets them
    opcodes: set[str] = field(default_factory=set)
    error: str | None = None  # where the unpickler stops (the globals before it ran)
    error_position: int | None = None
    limit: str | None = None  # a scan limit was hit (PK006)
    frame_violations: list[tuple[int, str]] = field(default_factory=list)  # PK005
    ext_codes: list[int] = field(default_factory=list)  # EXT1/2/4 (copyreg registry)
    rewrites: list[str] = field(default_factory=list)  # BUILD on a global (PK010)
    refusals: list[tuple[int, str]] = field(default_factory=list)  # the loader's rules (PK011)
    # storage keys referenced with different types: (key, first dtype, later dtype) (PK012)
    storage_conflicts: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    # enum members pickled by name (``getattr(Class, 'MEMBER')``, pickle_policy.ENUM_MEMBERS),
    # each scanned as the member itself; ``getattr_calls`` counts every call of getattr
    member_lookups: list[str] = field(default_factory=list)
    getattr_calls: int = 0
    getattr_refs: int = 0  # times the getattr global reached the stack (named, memo GET, DUP)

    def getattr_only_for_members(self) -> bool:
        """Every appearance of ``builtins.getattr`` in the pickle (there is one at least) is
        the function of a call that looks up a member of a listed enum class by its name: never
        an argument, a value or a state, never called otherwise. For an unpickler that resolves
        every global (``pickle.load``), ``getattr`` then reaches nothing else."""
        return _members_only(self.member_lookups, self.getattr_calls, self.getattr_refs)

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
            at = {"_rebuild_tensor_v2": 6, "_rebuild_tensor_v3": 7}.get(name)  # metadata
            meta = args[at] if at is not None and len(args) > at else None
            # torch sets the bit for a key that is present, whatever its value
            bits = tuple(k for k in ("neg", "conj") if isinstance(meta, dict) and k in meta)
            return TensorRef(storage, offset, size, stride, dtype, bits=bits)
    return Call(func, args)



_SCALARS = (str, bytes, int, float, bool, type(None))


class KeyRef:
    """A dict key the scan keeps by identity (hashing a deep tuple recurses); named as Python
    shows the key (``str``), as the loaded dict names it."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def _hashable(key: Any) -> Any:
    """Dict keys: plain scalars, stubs and flat tuples of scalars as themselves (equal tuples
    are one key, as in the real dict: ``{(1, 2): a}``), anything else by identity."""
    if isinstance(key, (*_SCALARS, Global, Call)):
        return key
    if type(key) is tuple and len(key) <= 64 and all(type(k) in _SCALARS for k in key):
        return key
    return KeyRef(key)


def _unhashable(value: Any) -> bool:
    return isinstance(value, (list, dict, bytearray)) and not isinstance(value, InertFrozenSet)


def _is_stub(value: Any) -> bool:
    """An object the real unpickler got from ``find_class``/a call: it accepts any operation."""
    return isinstance(value, (Global, Call, PersistentRef, TensorRef, InertObjDict))


class _Stop(Exception):
    pass


class _Interpreter:
    """Stack, mark and memo semantics of ``_pickle.c`` ``load()`` over an inert graph."""

    def __init__(self, *, ext_registered: bool, rules: Rules | None = None) -> None:
        self.rules = rules
        self.refusals: list[tuple[int, str]] = []
        self.pos = 0
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.globals: list[str] = []
        self.member_lookups: list[str] = []
        self.getattr_calls = 0
        self.getattr_refs = 0  # each time the getattr global reaches the stack (named, GET, DUP)
        self.raw: list[tuple[str, str]] = []
        self.dotted: set[str] = set()
        self.prefs: list[PersistentRef] = []
        self.opcodes: set[str] = set()
        self.ext_codes: list[int] = []
        self.rewrites: list[str] = []
        # (module, name) -> what a BUILD on that module/class wrote: find_class returns it
        self.overrides: dict[tuple[str, str], Any] = {}
        self.protocol: int | None = None
        self.proto = 0
        self.objects = 0
        self.root: Any = None
        self.ext_registered = ext_registered

    # -- helpers -----------------------------------------------------------------------------
    def push(self, value: Any) -> None:
        self.objects += 1
        if self.objects > MAX_OBJECTS:
            raise _Limit(f"more than {MAX_OBJECTS} objects")
        self.stack.append(value)

    def pop(self) -> Any:
        if not self.stack:
            raise ValueError("unpickling stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise ValueError("unpickling stack underflow")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise ValueError("could not find MARK")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def add_global(self, module: str, name: str) -> Any:
        self.raw.append((module, name))
        if self.proto < 3:
            module, name = _NAME_MAPPING.get((module, name), (module, name))
            module = _IMPORT_MAPPING.get(module, module)
        qual = f"{module}.{name}"
        self.globals.append(qual)
        if qual == "builtins.getattr":
            self.getattr_refs += 1
        if "." in name:
            self.dotted.add(qual)
        if (module, name) in self.overrides:  # a BUILD rewrote this attribute: find_class
            return self.overrides[(module, name)]  # returns what it wrote
        return Global(module, name)

    def rewrite(self, target: Global, state: Any) -> None:
        """BUILD on a module or class object: ``setattr`` of each state key (its ``__dict__``
        or slot state), so later ``find_class(target, key)`` returns the written value."""
        self.rewrites.append(target.qualname)
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
        for part in parts:
            if isinstance(part, dict):
                for key, value in part.items():
                    if type(key) is str:
                        self.overrides[(target.qualname, key)] = value

    def call(self, func: Any, args: Any, *, newobj: bool = False) -> Any:
        """``func(*args)``, inert (``newobj``: ``func.__new__(func, *args)``, which a function
        such as ``getattr`` fails)."""
        if not isinstance(args, tuple):
            raise TypeError("argument list must be a tuple")
        if not _is_stub(func):
            raise TypeError(f"{type(func).__name__} object is not callable")
        why = self.rules.on_call(func, args) if self.rules is not None else None
        self.refuse(why)
        if isinstance(func, Global) and func.qualname == "builtins.getattr":
            self.getattr_calls += 1
            owner = args[0] if len(args) == 2 and isinstance(args[0], Global) \
                and not newobj else None
            value = enum_member(owner.qualname, args[1]) if owner is not None else None
            if owner is not None and value is not None:  # a member by name: the member
                self.member_lookups.append(f"{owner.qualname}.{args[1]}")
                return Call(owner, (value,))
        if isinstance(func, Global):
            out = _reduce(func, args)
            if why and isinstance(out, TensorRef):
                out.problem = why
            return out
        return Call(func, args)

    def refuse(self, why: str | None) -> None:
        """Record what the real loader's own rules refuse here (it stops; the scan goes on to
        keep the tensor map)."""
        if why and len(self.refusals) < 100:
            self.refusals.append((self.pos, why))

    # -- one opcode --------------------------------------------------------------------------
    def step(self, name: str, arg: Any) -> None:
        """One opcode, as ``_pickle.c`` does it (on inert values): the handler of its group."""
        self.opcodes.add(name)
        if name in _PUSH_ARG:
            self.push(arg)
        elif name in _PUSH_CONST:
            self.push(_PUSH_CONST[name]())
        else:
            _HANDLERS.get(name, _Interpreter.out_of_band)(self, name, arg)

    def op_frame(self, name: str, arg: Any) -> None:
        """PROTO, FRAME, STOP."""
        if name == "PROTO":
            self.protocol = self.proto = arg
        elif name == "STOP":
            self.root = self.pop()
            raise _Stop

    def op_stack(self, name: str, arg: Any) -> None:
        """MARK, POP, POP_MARK, DUP, TUPLE1-3."""
        st = self.stack
        if name == "MARK":
            if len(self.metastack) >= MAX_MARKS:
                raise _Limit(f"more than {MAX_MARKS} nested MARKs")
            self.metastack.append(self.stack)
            self.stack = []
        elif name == "POP":
            if st:
                st.pop()
            else:
                self.pop_mark()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            top = self.top()
            if top.__class__ is Global and top.qualname == "builtins.getattr":
                self.getattr_refs += 1
            self.push(top)
        else:
            n = int(name[-1])
            if len(st) < n:
                raise ValueError("unpickling stack underflow")
            items = tuple(st[-n:])
            del st[-n:]
            self.push(items)

    def op_container(self, name: str, arg: Any) -> None:
        """LIST, TUPLE, FROZENSET, DICT: a container from the items above the MARK."""
        items = self.pop_mark()
        if name == "DICT":
            d = InertDict()
            _setitems(d, items)
            self.push(d)
            return
        if name == "FROZENSET" and any(_unhashable(v) for v in items):
            raise TypeError("unhashable type in FROZENSET")
        self.push({"LIST": list, "TUPLE": tuple, "FROZENSET": InertFrozenSet}[name](items))

    def op_fill(self, name: str, arg: Any) -> None:
        """APPEND, APPENDS, ADDITEMS, SETITEM, SETITEMS: items into the object below."""
        st = self.stack
        if name == "APPEND":
            value = self.pop()
            if self.rules is not None:
                self.refuse(self.rules.on_append(self.top()))
            _append(self.top(), [value])
        elif name == "APPENDS":  # the target must exist below the MARK, even with no items
            items = self.pop_mark()
            target = self.top()
            if self.rules is not None:
                self.refuse(self.rules.on_append(target))
            if items:
                _append(target, items)
        elif name == "ADDITEMS":
            items = self.pop_mark()
            target = self.top()
            if items:
                _additems(target, items)
        elif name == "SETITEM":
            if len(st) < 3:
                raise ValueError("unpickling stack underflow")
            value, key = st.pop(), st.pop()
            if self.rules is not None:
                self.refuse(self.rules.on_setitem(st[-1]))
            _setitems(st[-1], [key, value])
        else:  # SETITEMS
            items = self.pop_mark()
            self.top()  # CPython: stack underflow before the odd-count check
            if len(items) % 2:
                raise ValueError("odd number of items for SETITEMS")
            if self.rules is not None:
                self.refuse(self.rules.on_setitem(self.top()))
            if items:
                _setitems(self.top(), items)

    def op_memo(self, name: str, arg: Any) -> None:
        """GET, PUT and MEMOIZE in their spellings."""
        if name in ("GET", "BINGET", "LONG_BINGET"):
            if arg not in self.memo:
                raise KeyError(f"Memo value not found at index {arg}")
            value = self.memo[arg]
            if value.__class__ is Global and value.qualname == "builtins.getattr":
                self.getattr_refs += 1  # (inline: a memo GET is the commonest opcode)
            self.push(value)
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.top()
        else:
            self.memo[arg] = self.top()

    def op_global(self, name: str, arg: Any) -> None:
        """GLOBAL, INST, STACK_GLOBAL, EXT1/2/4: a global named (never imported)."""
        if name in ("GLOBAL", "INST"):
            if name == "INST" and not self.metastack:
                raise ValueError("could not find MARK")
            g = self.add_global(*arg)
            if name == "INST":
                self.push(self.call(g, tuple(self.pop_mark())))
            else:
                self.push(g)
        elif name == "STACK_GLOBAL":
            gname, module = self.pop(), self.pop()
            if type(gname) is not str or type(module) is not str:
                raise TypeError("STACK_GLOBAL requires str")
            self.push(self.add_global(module, gname))
        else:
            if arg <= 0:
                raise ValueError("EXT specifies code <= 0")
            self.ext_codes.append(arg)
            if not self.ext_registered:
                raise ValueError(f"unregistered extension code {arg}")
            self.push(Global("copyreg._extension_registry", str(arg)))

    def op_call(self, name: str, arg: Any) -> None:
        """REDUCE, NEWOBJ, NEWOBJ_EX, OBJ: a call recorded, never made."""
        if name == "REDUCE":
            args = self.pop()
            func = self.pop()
            self.push(self.call(func, args))
        elif name == "OBJ":
            items = self.pop_mark()
            if not items:
                raise ValueError("unpickling stack underflow")
            self.push(self.call(items[0], tuple(items[1:])))
        else:
            kwargs = self.pop() if name == "NEWOBJ_EX" else InertDict()
            args = self.pop()
            cls = self.pop()
            if not isinstance(cls, Global):
                raise TypeError(f"{name} class argument isn't a type object")
            if not isinstance(args, tuple) or not isinstance(kwargs, dict):
                raise TypeError(f"{name} expected an arg tuple")
            self.push(self.call(cls, args, newobj=True))

    def op_build(self, name: str, arg: Any) -> None:
        """BUILD: state set on the object below (a global's rewrite recorded)."""
        state = self.pop()
        if self.rules is not None:
            why = self.rules.on_build(self.top(), state)
            self.refuse(why)
            if why and isinstance(self.top(), TensorRef):
                self.top().problem = why
        if isinstance(self.top(), Global):
            self.rewrite(self.top(), state)
        else:
            _build(self.top(), state)

    def op_persistent(self, name: str, arg: Any) -> None:
        """BINPERSID, PERSID: a persistent id (a torch storage) recorded."""
        ref = PersistentRef(self.pop() if name == "BINPERSID" else arg)
        if self.rules is not None:
            self.refuse(self.rules.on_persistent(ref))
        self.prefs.append(ref)
        self.push(ref)

    def op_buffer(self, name: str, arg: Any) -> None:
        """READONLY_BUFFER."""
        if not isinstance(self.top(), (bytes, bytearray)):
            raise TypeError("READONLY_BUFFER needs a buffer")

    def out_of_band(self, name: str, arg: Any) -> None:
        """NEXT_BUFFER: no out-of-band buffers are ever given."""
        raise ValueError("pickle stream refers to out-of-band data but no *buffers* "
                         "argument was given")


# opcode -> the handler of its group (_Interpreter.step)
_HANDLERS: dict[str, Callable[[_Interpreter, str, Any], None]] = {
    **dict.fromkeys(("PROTO", "FRAME", "STOP"), _Interpreter.op_frame),
    **dict.fromkeys(("MARK", "POP", "POP_MARK", "DUP", "TUPLE1", "TUPLE2", "TUPLE3"),
                    _Interpreter.op_stack),
    **dict.fromkeys(("LIST", "TUPLE", "FROZENSET", "DICT"), _Interpreter.op_container),
    **dict.fromkeys(("APPEND", "APPENDS", "ADDITEMS", "SETITEM", "SETITEMS"),
                    _Interpreter.op_fill),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"),
                    _Interpreter.op_memo),
    **dict.fromkeys(("GLOBAL", "INST", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4"),
                    _Interpreter.op_global),
    **dict.fromkeys(("REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ"), _Interpreter.op_call),
    "BUILD": _Interpreter.op_build,
    **dict.fromkeys(("BINPERSID", "PERSID"), _Interpreter.op_persistent),
    "READONLY_BUFFER": _Interpreter.op_buffer,
}


class _Limit(Exception):
    pass


class Rules(Protocol):
    """A loader's own unpickler rules beyond ``_pickle.c`` (``torch_rebuild.TorchRules``): each
    hook returns why the loader refuses the operation, or None."""

    def on_call(self, func: Any, args: tuple[Any, ...]) -> str | None: ...
    def on_build(self, target: Any, state: Any) -> str | None: ...
    def on_append(self, target: Any) -> str | None: ...
    def on_setitem(self, target: Any) -> str | None: ...
    def on_persistent(self, ref: PersistentRef) -> str | None: ...


_PUSH_ARG = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING",
             "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
             "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "FLOAT", "BINFLOAT"}
_PUSH_CONST: dict[str, Any] = {
    "NONE": lambda: None, "NEWTRUE": lambda: True, "NEWFALSE": lambda: False,
    "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_DICT": InertDict, "EMPTY_SET": InertSet,
}


def _reduce(func: Global, args: tuple[Any, ...]) -> Any:
    """Inert result of calling a global: torch rebuilds become TensorRefs, the rest a Call."""
    q = func.qualname
    if func.module == "torch._utils" and func.name in REBUILD_FUNCTIONS:
        return _build_tensor(func, args)
    if q in ("collections.OrderedDict", "collections.Counter"):
        out = InertObjDict()
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
        if isinstance(inner, Global):
            inner_args = args[2] if isinstance(args[2], tuple) else ()
            return _reduce(inner, inner_args)
    return Call(func, args)


def _append(target: Any, items: list[Any]) -> None:
    if type(target) is list:
        target.extend(items)
    elif isinstance(target, Call):
        target.items.extend(items)
    elif not _is_stub(target):
        raise AttributeError(f"{type(target).__name__} object has no attribute 'append'")


def _additems(target: Any, items: list[Any]) -> None:
    if isinstance(target, InertSet):
        if any(_unhashable(v) for v in items):
            raise TypeError("unhashable type in ADDITEMS")
        target.extend(items)
    elif not _is_stub(target):
        raise AttributeError(f"{type(target).__name__} object has no attribute 'add'")


def _setitems(target: Any, items: list[Any]) -> None:
    if len(items) % 2:
        raise ValueError("odd number of items for DICT/SETITEMS")
    if isinstance(target, dict):
        for i in range(0, len(items), 2):
            if _unhashable(items[i]):
                raise TypeError("unhashable dict key")
            target[_hashable(items[i])] = items[i + 1]
    elif isinstance(target, Call):
        target.items.extend(items)
    elif type(target) is list:
        for i in range(0, len(items), 2):
            key = items[i]
            if type(key) not in (int, bool) or not -len(target) <= key < len(target):
                raise IndexError("list assignment index out of range")
            target[key] = items[i + 1]
    elif not _is_stub(target):
        raise TypeError(f"{type(target).__name__} object does not support item assignment")


def _build(target: Any, state: Any) -> None:
    if isinstance(target, (Call, InertObjDict)):
        target.state = state
        return
    if _is_stub(target):
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state is not None or slots is not None:
        raise AttributeError(f"{type(target).__name__} object has no attribute '__dict__'")


def _members_only(lookups: list[str], calls: int, refs: int) -> bool:
    """Every appearance of getattr (``refs``) is the function of a call (``calls``) that looks
    up an enum member (``lookups``), and there is one at least."""
    return 0 < len(lookups) == calls == refs


def _read_all(data: bytes | io.BufferedIOBase | Any) -> tuple[bytes, Any, int]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), None, 0
    base = data.tell()
    return data.read(MAX_PICKLE_BYTES), data, base


def _interpret(raw: bytes, mode: str, encoding: str, ext_registered: bool,
               rules: Rules | None = None,
               ) -> tuple[_Interpreter, pickle_ops.Source, str | None, int | None, str | None]:
    it = _Interpreter(ext_registered=ext_registered, rules=rules)
    src = pickle_ops.Source(raw, mode)
    error: str | None = None
    error_pos: int | None = None
    limit: str | None = None
    pos = 0
    try:
        for name, arg, op_pos in pickle_ops.read_ops(raw, source=src, encoding=encoding):
            pos = it.pos = op_pos
            it.step(name, arg)
        error, error_pos = "pickle ended without STOP", len(raw)
    except _Stop:
        pass
    except pickle_ops.OpError as exc:
        error, error_pos = str(exc), exc.position
    except _Limit as exc:
        limit, error, error_pos = str(exc), f"scan limit: {exc}", pos
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            MemoryError) as exc:
        error, error_pos = f"{type(exc).__name__}: {exc}", pos
    return it, src, error, error_pos, limit


def scan_pickle(data: bytes | io.BufferedIOBase | Any, *, start: int = 0, mode: str = "stream",
                encoding: str = "utf-8", partial: bool = False,
                ext_registered: bool = True, rules: Rules | None = None) -> PickleScan:
    """Interpret one pickle (up to its STOP) without importing or calling anything.

    ``data`` is bytes or a binary file positioned at the pickle; ``start`` is added to the
    reported positions. ``mode`` is how the real loader feeds the unpickler (``"stream"``: a
    ``BytesIO``, as ``torch.load`` does with ``data.pkl``; ``"memory"``: bytes or a peekable
    file); when an opcode overruns its FRAME, the other model is scanned too and its globals
    are added. On damage, raises :class:`PickleError` (position, and ``partial``: the scan up
    to the error) unless ``partial=True``, which returns the scan with ``error`` set.
    ``rules``: the real loader's own unpickler rules (``torch_rebuild.TorchRules`` for
    ``torch.load``); what they refuse is kept in ``refusals`` and the scan goes on.
    """
    raw, stream, base = _read_all(data)
    it, src, error, error_pos, limit = _interpret(raw, mode, encoding, ext_registered, rules)
    end = src.pos if error is None else (error_pos or 0)
    scan = PickleScan(root=it.root, globals=it.globals, end=end, protocol=it.protocol,
                      persistent_refs=it.prefs, dotted=it.dotted, raw_globals=it.raw,
                      opcodes=it.opcodes, error=error,
                      error_position=None if error_pos is None else error_pos + start,
                      limit=limit, frame_violations=[(p + start, m) for p, m in src.violations],
                      ext_codes=it.ext_codes, rewrites=it.rewrites,
                      refusals=[(p + start, m) for p, m in it.refusals],
                      member_lookups=it.member_lookups, getattr_calls=it.getattr_calls,
                      getattr_refs=it.getattr_refs)
    if src.violations:
        other = "memory" if mode == "stream" else "stream"
        alt = _interpret(raw, other, encoding, ext_registered)[0]
        for q in alt.globals:
            if q not in scan.globals:
                scan.globals.append(q)
        scan.dotted |= alt.dotted
        scan.ext_codes += alt.ext_codes
        scan.rewrites += alt.rewrites
        if alt.getattr_refs and not _members_only(alt.member_lookups, alt.getattr_calls,
                                                  alt.getattr_refs):
            scan.getattr_refs += 1  # (either reading may be the unpickler's: both must hold)
    if stream is not None:
        try:
            stream.seek(base + scan.end)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
    if error is not None and not partial:
        raise PickleError(error, scan.error_position, scan)
    return scan


def _key_str(key: Any) -> str:
    if isinstance(key, KeyRef):
        key = key.key
        return str(key) if type(key) is tuple else "?"
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def unique_names(named: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """``named`` with every name made unique: a name met again (``{"a.b": x, "a": {"b": y}}``,
    ``{0: x, "0": y}``) gets ``#1``, ``#2``... in walk order - the order the sandbox child's
    ``tensor_map`` walks the loaded object too, so both sides name the same tensor alike."""
    seen: dict[str, int] = {}
    for name, value in named:
        n = seen.get(name)
        if n is None:
            seen[name] = 0
            yield name, value
            continue
        while True:
            n += 1
            candidate = f"{name}#{n}"
            if candidate not in seen:
                break
        seen[name] = n
        seen[candidate] = 0
        yield candidate, value


def iter_named(root: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(dotted_name, value)`` for every TensorRef and bare PersistentRef in the graph,
    each name once (:func:`unique_names`).

    Iterative (no recursion limit), visits shared objects once per path but guards cycles;
    bounded (depth 64, 2M nodes) against hostile pickles.
    Dict keys become name parts, list/tuple items their index; an unknown object's BUILD state
    is walked like a dict, its constructor args by index.
    """
    return unique_names(_walk_named(root))


def _walk_named(root: Any) -> Iterator[tuple[str, Any]]:
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
