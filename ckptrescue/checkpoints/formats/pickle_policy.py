"""Which globals a pickle may name: the exact allowlists and the danger classification.

* ``weights_only_allowed``: what ``torch.load(weights_only=True)`` accepts by default
  (``torch/_weights_only_unpickler.py`` ``_get_allowed_globals``), exact names only;
* ``dcp_allowed``: what a torch.distributed.checkpoint ``.metadata`` is made of;
* ``ACCELERATE_RNG_ALLOWED``: what Accelerate's ``random_states_<rank>.pkl`` holds besides
  tensors (numpy's RNG state);
* ``STANDALONE_ALLOWED``: the plain-data globals of a standalone pickle (numpy arrays, sets,
  ordered dicts, dates);
* ``dangerous``: globals that run programs, code or I/O - a pickle naming one is ``unsafe``
  whatever list applies (the list names them in findings; any global a loader resolves that is
  not on the exact list makes the file ``unsafe`` too);
* ``resolved_off_list``: for loaders that resolve every global (``pickle.load``: standalone
  pickles, DCP ``.metadata``), which off-list names run (``unsafe``) and which are one edit
  from a listed name (a damaged name the unpickler cannot resolve);
* ``WEIGHTS_ONLY_OPCODES``: the opcodes torch's weights-only unpickler implements (any other
  opcode makes ``torch.load(weights_only=True)`` refuse the file).
"""

from __future__ import annotations

import functools

from ckptrescue.checkpoints.formats import dtypes

REBUILD_FUNCTIONS = {
    "_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_tensor",
    "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor",
}
ALLOWED_EXACT = {
    "collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device",
    "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    "torch._tensor._rebuild_from_type_v2", "torch.storage.UntypedStorage",
    "torch.storage.TypedStorage", "torch.per_tensor_affine", "torch.per_tensor_symmetric",
    "torch.per_channel_affine", "torch.per_channel_symmetric",
    "torch.per_channel_affine_float_qparams",
} | {f"torch._utils.{n}" for n in REBUILD_FUNCTIONS}
TORCH_DTYPE_NAMES = set(dtypes.BY_NAME) | {f"uint{i}" for i in range(1, 8)} | {
    f"int{i}" for i in range(1, 8)} | set(dtypes.ALIASES) | {
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16"}

_STORAGE_TENSOR_CLASSES = (
    "BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double", "Float",
    "Half", "Int", "Long", "Short")
TORCH_CLASSES = {f"torch.{c}{k}" for c in _STORAGE_TENSOR_CLASSES for k in ("Storage", "Tensor")
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

# The enum classes of the exact DCP list and their members (torch 2.13 source). Python 3.11.0
# to 3.11.x pickled an enum member by name, ``getattr(Class, 'MEMBER')`` (Debian 12's 3.11.2
# does: every ``.metadata`` it writes names ``builtins.getattr``); later versions pickle it by
# value, ``Class(value)``. A ``getattr`` call whose arguments are exactly a class below and one
# of its member names is the member (:func:`enum_member`); any other is ``getattr`` itself.
_MEM_FORMATS = {"TORCH_CONTIGUOUS_FORMAT": 0, "TORCH_CHANNELS_LAST": 1, "TORCH_PRESERVE_FORMAT": 2}
ENUM_MEMBERS: dict[str, dict[str, int]] = {
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING": _MEM_FORMATS,
    "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING": _MEM_FORMATS,
    "torch.distributed.checkpoint.planner.WriteItemType": {"TENSOR": 1, "SHARD": 2,
                                                           "BYTE_IO": 3},
    "torch.distributed.checkpoint.planner.LoadItemType": {"TENSOR": 1, "BYTE_IO": 2},
}


def enum_member(cls_qualname: str, name: object) -> int | None:
    """The value of member ``name`` of the listed enum class ``cls_qualname``; None when the
    class is not listed or has no such member (``getattr`` would then reach any attribute)."""
    members = ENUM_MEMBERS.get(cls_qualname)
    return members.get(name) if members is not None and type(name) is str else None


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
    # gadgets from the peer scanners' corpora (picklescan, modelscan, fickling advisories)
    "pydoc", "doctest", "idlelib", "lib2to3", "testing", "f2py", "_inductor",
    "bottleneck", "collect_env", "_dynamo", "symbolic_shapes", "datapipes",
    "unsupported_tensor_ops", "_config_module", "imaplib", "poplib", "nntplib", "xmlrpc",
    "_aix_support", "_osx_support", "_pyrepl", "linecache", "logging", "test", "httplib",
    "cgi", "zipfile", "tarfile", "sqlite3", "dbm", "pstats", "_imp", "numexpr",
    # sub-interpreters run code strings (fickling GHSA-6ggj-6f2q-f7mx)
    "_interpreters", "_xxsubinterpreters", "interpreters", "_interpqueues", "_interpchannels",
    "_xxinterpchannels", "format_utils",
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
                    "import_module", "__reduce__", "__reduce_ex__", "__setstate__",
                    "_get_command_stdout", "_popen", "runstring", "getlincoef", "compile_file",
                    "pipepager", "run_cprofile", "run_autograd_prof", "execWrapper",
                    "load_config", "evaluate_guards_expression", "basichandlers", "runctx",
                    "runcode", "runcommand", "debug_script", "_run_pip", "_run_code",
                    "make_label", "get_entity", "fetch_completions", "fetch_tip", "SetText",
                    "write_file", "create_connection", "methodcaller", "attrgetter",
                    "itemgetter", "partial", "locate", "CDLL", "FileIO", "FileHandler",
                    "getoutput", "getstatusoutput", "system_profile", "execvp", "execv",
                    # a nested torch.load without weights_only (fickling test_unpickler.py)
                    "_load_from_bytes", "torch_save_to_dcp", "dcp_to_torch_save"}


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
    # a dangerous module re-exported as an attribute (``torch.serialization.os`` is ``os``)
    return parts[-1] in DANGEROUS_MODULES or parts[-1] in _DANGEROUS_NAMES \
        or parts[-1] in _DANGEROUS_BUILTINS


def extra_allowed(qualname: str, names: frozenset[str]) -> bool:
    """True when ``qualname`` is on a family's exact extra list (``ProbeOptions.extra_allowed``)
    and not dangerous: exact names only, a dangerous name is never accepted."""
    return qualname in names and not dangerous(qualname)


def weights_only_allowed(qualname: str) -> bool:
    """True when torch's weights-only unpickler would accept this global (exact names)."""
    if qualname in ALLOWED_EXACT or qualname in TORCH_CLASSES:
        return True
    module, _, name = qualname.rpartition(".")
    return module == "torch" and name in TORCH_DTYPE_NAMES


def dcp_allowed(qualname: str) -> bool:
    """True for the globals a torch.distributed.checkpoint ``.metadata`` pickle is made of."""
    return weights_only_allowed(qualname) or qualname in DCP_ALLOWED_EXACT


def exact_allowed_globals() -> set[str]:
    """Every global an unpickler inside the sandbox may resolve (the union of the lists)."""
    return (ALLOWED_EXACT | TORCH_CLASSES | DCP_ALLOWED_EXACT
            | {f"torch.{n}" for n in TORCH_DTYPE_NAMES})




# numpy arrays and dtypes (numpy >= 2 pickles ``numpy._core``, older ``numpy.core``)
NUMPY_ARRAY_GLOBALS = {
    "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray",
    "numpy.dtype", "numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar",
}
# Accelerate's ``random_states_<rank>.pkl`` (``accelerate/checkpointing.py``: ``torch.save`` of
# ``{"step", "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
# "torch_manual_seed": torch.get_rng_state(), "torch_cuda_manual_seed": ...}``) is a torch zip
# whose pickle names, besides the weights-only list, exactly numpy's array reconstruction.
ACCELERATE_RNG_ALLOWED = NUMPY_ARRAY_GLOBALS - {"numpy._core.multiarray.scalar",
                                                "numpy.core.multiarray.scalar"}
# Plain data in a standalone pickle: containers, numbers, dates, numpy arrays and RNG states.
STANDALONE_ALLOWED = NUMPY_ARRAY_GLOBALS | {
    "builtins.set", "builtins.frozenset", "builtins.bytearray", "builtins.complex",
    "builtins.slice", "builtins.range", "builtins.dict", "builtins.list", "builtins.tuple",
    "builtins.int", "builtins.float", "builtins.str", "builtins.bytes", "builtins.bool",
    "collections.OrderedDict", "collections.defaultdict", "collections.deque",
    "collections.Counter", "datetime.datetime", "datetime.date", "datetime.time",
    "datetime.timedelta", "datetime.timezone", "decimal.Decimal", "fractions.Fraction",
    "uuid.UUID", "_codecs.encode", "numpy.random._pickle.__randomstate_ctor",
    "numpy.random._pickle.__bit_generator_ctor", "numpy.random._pickle.__generator_ctor",
    "numpy.random.mtrand.RandomState", "numpy.random._mt19937.MT19937",
    "numpy.random._pcg64.PCG64", "numpy.random._generator.Generator",
}

# The opcodes ``torch/_weights_only_unpickler.py`` implements; any other makes
# ``torch.load(weights_only=True)`` raise ``Unsupported operand``.
WEIGHTS_ONLY_OPCODES = frozenset({
    "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE",
    "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT",
    "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT",
    "LONG_BINPUT", "LONG1", "PROTO", "STOP",
})


def standalone_allowed(qualname: str) -> bool:
    """Plain data in a standalone pickle, or anything torch's weights-only list accepts."""
    return qualname in STANDALONE_ALLOWED or weights_only_allowed(qualname)


def accelerate_rng_allowed(qualname: str) -> bool:
    """Accelerate's RNG-state file: the weights-only list plus numpy array reconstruction."""
    return qualname in ACCELERATE_RNG_ALLOWED or weights_only_allowed(qualname)


def _one_edit(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ by exactly one substitution, insertion or deletion."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1:]


def near_miss(qualname: str) -> str | None:
    """The exact-list name one edit away from ``qualname`` (a damaged name such as
    ``...metadata.Metadatx``), or None. A dangerous name is never a near miss."""
    if dangerous(qualname):
        return None
    return next((name for name in _listed() if _one_edit(qualname, name)), None)


@functools.cache
def _listed() -> tuple[str, ...]:
    return tuple(sorted(exact_allowed_globals() | STANDALONE_ALLOWED))


def resolved_off_list(off_list: list[str], dotted: set[str]) -> tuple[list[str], dict[str, str]]:
    """Split the off-list globals of a pickle read by ``pickle.load`` (which resolves every
    global it meets): ``(unsafe, damaged)`` - a global the unpickler resolves runs, so it is
    unsafe; a name one edit from an exact-list name that is not dangerous (``damaged``: name
    -> the listed name) is a damaged name the unpickler cannot resolve (the load fails)."""
    damaged = {g: near for g in off_list
               if g not in dotted and (near := near_miss(g)) is not None}
    return [g for g in off_list if g not in damaged], damaged
