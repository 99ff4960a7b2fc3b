"""The exact ``add_safe_globals`` list a file needs before ``torch.load(weights_only=True)``
accepts it, read statically (nothing imported, nothing unpickled).

``torch.load(weights_only=True)`` names one refused global per attempt; users who meet three in
a row switch to ``weights_only=False``. This reads the file's pickle(s) once (the static scanner
of ``formats/pickle_scan.py``) and lists every global torch's weights-only unpickler would
refuse, split into:

* ``safe``: on one of the kit's exact lists (a family's classes, DCP metadata, plain data,
  numpy's dtype classes), not dangerous; each with the list and the source that justifies it;
* ``unlisted``: on no exact list: torch would import that module and call it; the kit cannot
  vouch for it (the user's own config class, typically);
* ``dangerous``: names that run programs, code or I/O (``pickle_policy.dangerous``): never
  register them; the file is unsafe;
* ``blocked``: what no registration fixes: a module torch refuses outright (``sys``, ``os``,
  ``posix``, ``nt``), a global reached through an attribute path.

Beyond the ``GLOBAL`` names: torch's unpickler ``BUILD`` accepts only objects whose *type* is
allowed, and ``numpy.dtype('f8')`` builds a ``numpy.dtypes.Float64DType``; such types are
derived from the scanned object graph (the dtype's type code) and listed as needed too.

Other reasons torch refuses the file (opcodes its unpickler does not implement, a damaged or
truncated pickle) are ``blockers``: the list alone will not make it load; the verdict of the
full probe is given with them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.formats import pickle_policy, pickle_scan, zipwalk
from ckptrescue.checkpoints.formats.torch_legacy import TorchLegacyFormat
from ckptrescue.checkpoints.formats.torch_zip import TorchZipFormat
from ckptrescue.checkpoints.formats.torch_zip_view import inflate_small
from ckptrescue.checkpoints.outputs import NO_TORCH_FILE
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

# modules torch._weights_only_unpickler refuses whatever is registered (_blocklisted_modules)
BLOCKED_MODULES = ("sys", "os", "posix", "nt")
MAX_FILES = 10_000  # torch files looked at under one directory
MAX_WALK = 2_000_000  # nodes of one pickle's object graph walked for BUILD types

# numpy's dtype classes (numpy >= 1.25, ``numpy.dtypes``) by the kind and size of a dtype
# string as pickled (``numpy.dtype('f8', False, True)``)
_NUMPY_DTYPE_CLASSES = {
    "b1": "BoolDType", "i1": "Int8DType", "i2": "Int16DType", "i4": "Int32DType",
    "i8": "Int64DType", "u1": "UInt8DType", "u2": "UInt16DType", "u4": "UInt32DType",
    "u8": "UInt64DType", "f2": "Float16DType", "f4": "Float32DType", "f8": "Float64DType",
    "c8": "Complex64DType", "c16": "Complex128DType", "f16": "LongDoubleDType",
    "c32": "CLongDoubleDType", "O8": "ObjectDType", "M8": "DateTime64DType",
    "m8": "TimeDelta64DType",
}
_NUMPY_DTYPES_BY_KIND = {"S": "BytesDType", "U": "StrDType", "V": "VoidDType"}
NUMPY_DTYPE_GLOBALS = frozenset(f"numpy.dtypes.{c}" for c in (
    *_NUMPY_DTYPE_CLASSES.values(), *_NUMPY_DTYPES_BY_KIND.values()))

# Why each family's exact list may be registered: the library code that pickles those classes.
_FAMILY_SOURCES = {
    "deepspeed": "DeepSpeed 0.19.8 pickles it into its rank files (runtime/zero/"
                 "stage_1_and_2.py and stage3.py state_dict: loss scaler, ZeroStageEnum, "
                 "utils/tensor_fragment.py fragment_address); a plain-state class or an Enum, "
                 "checked against the real library (tests/families/"
                 "test_family_f1_safe_globals.py)",
    "megatron": "megatron-core 0.16.1 megatron/core/safe_globals.py SAFE_GLOBALS, which "
                "megatron.core registers itself with torch.serialization.add_safe_globals",
    "megatron-dist": "megatron-core 0.16.1 SAFE_GLOBALS, and torch/distributed/checkpoint/"
                     "planner.py dataclasses kept in its DCP metadata",
    "lightning": "lightning/fabric/utilities/data.py AttributeDict (a dict subclass without "
                 "__reduce__/__setstate__) saved inside hyper-parameters",
    "accelerate": "accelerate/utils/other.py load(): TORCH_SAFE_GLOBALS (numpy's RNG state), "
                  "which Accelerate registers itself",
}


@dataclass(frozen=True)
class ExactList:
    name: str
    members: frozenset[str]
    source: str


def exact_lists() -> list[ExactList]:
    """The kit's exact lists, in the order a global is attributed to them."""
    from ckptrescue.checkpoints.families import families

    lists = [ExactList("plain-data", frozenset(pickle_policy.STANDALONE_ALLOWED),
                       "plain data: builtin containers, collections, datetime, decimal, uuid, "
                       "numpy arrays, scalars and RNG states (constructors that build a value "
                       "and run nothing else; pickle_policy.STANDALONE_ALLOWED)"),
             ExactList("numpy-dtypes", NUMPY_DTYPE_GLOBALS,
                       "numpy.dtypes: the class of a numpy dtype, which torch's BUILD requires "
                       "to be allowed for a pickled numpy.dtype (a type, no code runs)"),
             ExactList("dcp", frozenset(pickle_policy.DCP_ALLOWED_EXACT),
                       "torch.distributed.checkpoint: the data classes a DCP .metadata pickle "
                       "is made of (torch 2.13 dcp.save; pickle_policy.DCP_ALLOWED_EXACT)")]
    fams = sorted((f for f in families() if getattr(f, "allowed_globals", None)),
                  key=lambda f: (len(f.allowed_globals), f.name))
    for fam in fams:
        lists.append(ExactList(fam.name, frozenset(fam.allowed_globals), _FAMILY_SOURCES.get(
            fam.name, f"the {fam.name} family's exact list (ckptrescue/checkpoints/families)")))
    return lists


@dataclass
class Needed:
    """One global torch's weights-only unpickler refuses by default."""

    name: str
    status: str  # safe, unlisted, dangerous, blocked
    lists: list[str] = field(default_factory=list)
    source: str = ""
    reason: str = ""  # why it is needed (a BUILD type) or why it cannot be registered

    def to_json(self) -> JsonObject:
        return {"global": self.name, "status": self.status, "lists": list(self.lists),
                "source": self.source, "reason": self.reason}


@dataclass
class FileGlobals:
    path: str
    format: str | None = None
    verdict: str | None = None
    globals_total: int = 0
    needed: list[Needed] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def loads_with_safe_list(self) -> bool:
        """Registering the safe globals is all torch.load(weights_only=True) needs."""
        return (self.error is None and not self.blockers
                and all(n.status == "safe" for n in self.needed))

    def to_json(self) -> JsonObject:
        return {"path": self.path, "format": self.format, "verdict": self.verdict,
                "globals_total": self.globals_total,
                "needed": [n.to_json() for n in self.needed], "blockers": list(self.blockers),
                "loads_with_safe_list": self.loads_with_safe_list, "error": self.error}


@dataclass
class SafeGlobalsResult(Recorded):
    paths: list[str]
    files: list[FileGlobals] = field(default_factory=list)

    def union(self, status: str) -> list[Needed]:
        seen: dict[str, Needed] = {}
        for f in self.files:
            for n in f.needed:
                if n.status == status:
                    seen.setdefault(n.name, n)
        return [seen[k] for k in sorted(seen)]

    def snippet(self) -> str:
        """Python that registers the safe globals (and nothing else), to run before
        ``torch.load(..., weights_only=True)``."""
        safe = self.union("safe")
        if not safe:
            return ""
        lines = ["import torch"]
        entries = []
        for i, n in enumerate(safe):
            module, _, attr = n.name.rpartition(".")
            alias = f"_g{i}"
            lines.append(f"from {module} import {attr} as {alias}")
            entries.append(f'    ({alias}, "{n.name}"),')
        lines.append("torch.serialization.add_safe_globals([")
        lines += entries
        lines.append("])")
        return "\n".join(lines) + "\n"

    def answer(self) -> str:
        torch_files = [f for f in self.files if f.error is None]
        if not torch_files:
            return "no file torch.load reads"
        refused = [f for f in torch_files if f.needed or f.blockers]
        if not refused:
            return (f"{len(torch_files)} file(s) load with torch.load(weights_only=True) as "
                    "they are")
        safe, unlisted = self.union("safe"), self.union("unlisted")
        bad = self.union("dangerous") + self.union("blocked")
        parts = [f"{len(refused)} of {len(torch_files)} file(s) need globals beyond "
                 "torch's weights-only list"]
        if safe:
            parts.append(f"{len(safe)} safe to register ({', '.join(n.name for n in safe[:3])}"
                         + (", ..." if len(safe) > 3 else "") + ")")
        if unlisted:
            parts.append(f"{len(unlisted)} on no exact list ({', '.join(n.name for n in unlisted[:3])})")
        if bad:
            parts.append(f"{len(bad)} never to register ({', '.join(n.name for n in bad[:3])})")
        blocked = [f for f in torch_files if f.blockers]
        if blocked:
            parts.append(f"{len(blocked)} file(s) refused for reasons no registration fixes")
        return "; ".join(parts)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for f in self.files:
            if f.error is not None:
                out.append(Finding("SG005", Severity.INFO, f"{f.path}: {f.error}",
                                   evidence=f.path, source="resume.safe_globals"))
                continue
            by = {s: [n.name for n in f.needed if n.status == s]
                  for s in ("safe", "unlisted", "dangerous", "blocked")}
            if by["safe"] and f.loads_with_safe_list:
                out.append(Finding(
                    "SG001", Severity.INFO, f"torch.load(weights_only=True) needs "
                    f"{len(by['safe'])} global(s) beyond its defaults, all on the kit's exact "
                    "lists: registering them lets it load: " + ", ".join(by["safe"]),
                    evidence=f.path, source="resume.safe_globals",
                    details={"globals": by["safe"]}))
            if by["unlisted"]:
                out.append(Finding(
                    "SG002", Severity.WARNING, "torch.load(weights_only=True) needs globals on "
                    "no exact list (registering them imports and runs that code): "
                    + ", ".join(by["unlisted"]), evidence=f.path,
                    source="resume.safe_globals", details={"globals": by["unlisted"]}))
            if by["dangerous"] or by["blocked"]:
                names = by["dangerous"] + by["blocked"]
                out.append(Finding(
                    "SG003", Severity.CRITICAL, "the file names globals that must never be "
                    "registered (they run programs, code or I/O, or torch blocks them): "
                    + ", ".join(names), evidence=f.path, source="resume.safe_globals",
                    details={"globals": names}))
            if f.blockers:
                out.append(Finding(
                    "SG004", Severity.ERROR, "torch.load(weights_only=True) refuses the file "
                    "for reasons no add_safe_globals fixes: " + "; ".join(f.blockers),
                    evidence=f.path, source="resume.safe_globals",
                    details={"blockers": f.blockers, "verdict": f.verdict}))
        return out

    def to_json(self) -> JsonObject:
        return {"paths": list(self.paths), "files": [f.to_json() for f in self.files],
                "safe": [n.to_json() for n in self.union("safe")],
                "not_safe": [n.to_json() for s in ("unlisted", "dangerous", "blocked")
                             for n in self.union(s)],
                "snippet": self.snippet(), "snippet_lines": self.snippet().splitlines(),
                "answer": self.answer()}


# -- reading ----------------------------------------------------------------------------------

def _zip_pickle(path: Path) -> bytes | None:
    """The bytes of a torch zip's ``data.pkl`` (stored or deflated), or None."""
    with open(path, "rb") as fh:
        layout = zipwalk.read_central(fh)
        if layout is None:
            return None
        recs = [r for r in layout.records if r.name.endswith("data.pkl")
                and r.name.count("/") == 1]
        if not recs:
            return None
        rec = recs[0]
        if rec.data_offset is None or rec.compressed_size is None:
            return None
        if rec.method == 0:
            return zipwalk.pread(fh, rec.data_offset, rec.compressed_size)
        data, _why = inflate_small(fh, rec)
        return data


def _legacy_scans(path: Path) -> list[pickle_scan.PickleScan]:
    scans = []
    with open(path, "rb") as fh:
        for _ in range(5):
            pos = fh.tell()
            scan = pickle_scan.scan_pickle(fh, start=pos, mode="memory", partial=True)
            scans.append(scan)
            if scan.error:
                break
            fh.seek(pos + scan.end)
    return scans


def _dtype_class(args: Any) -> str | None:
    if not isinstance(args, tuple) or not args or not isinstance(args[0], str):
        return None
    code = args[0]
    if code in _NUMPY_DTYPE_CLASSES:
        return _NUMPY_DTYPE_CLASSES[code]
    if code[:1] in _NUMPY_DTYPES_BY_KIND and code[1:].isdigit():
        return _NUMPY_DTYPES_BY_KIND[code[:1]]
    if code[:2] in ("M8", "m8"):
        return _NUMPY_DTYPE_CLASSES[code[:2]]
    return None


def build_types(root: Any) -> set[str]:
    """Types torch's BUILD must find allowed that no GLOBAL names: the numpy dtype classes of
    every ``numpy.dtype(...)`` that is built with a state."""
    found: set[str] = set()
    stack = [root]
    seen: set[int] = set()
    walked = 0
    while stack and walked < MAX_WALK:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        walked += 1
        if isinstance(node, pickle_scan.Call):
            if node.qualname in ("numpy.dtype",) and node.state is not None:
                cls = _dtype_class(node.args)
                if cls is not None:
                    found.add(f"numpy.dtypes.{cls}")
            stack.append(node.args)
            stack.append(node.state)
            stack.extend(node.items)
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return found


def _classify(name: str, dotted: bool, lists: list[ExactList], *, why: str = "") -> Needed:
    module = name.split(".", 1)[0]
    if dotted:
        return Needed(name, "blocked", reason="named through an attribute path (getattr "
                      "chain): no registration can make torch accept it")
    if module in BLOCKED_MODULES:
        return Needed(name, "blocked", reason=f"torch refuses module {module} whatever is "
                      "registered")
    if pickle_policy.dangerous(name):
        return Needed(name, "dangerous", reason="runs programs, code or I/O: never register it")
    on = [x for x in lists if name in x.members]
    if on:
        return Needed(name, "safe", lists=[x.name for x in on], source=on[0].source,
                      reason=why)
    return Needed(name, "unlisted", reason=(why + "; " if why else "") + "on no exact list: "
                  "registering it imports that module and runs its code on load")


def _one(path: Path, lists: list[ExactList]) -> FileGlobals:
    out = FileGlobals(path=str(path))
    try:
        st = path.stat()
    except OSError as exc:
        out.error = f"cannot read: {exc.strerror or exc}"
        return out
    if not stat.S_ISREG(st.st_mode):
        out.error = "not a regular file"
        return out
    fmt: Any = None
    for candidate in (TorchZipFormat, TorchLegacyFormat):
        if candidate.detect(path):
            fmt = candidate
            break
    if fmt is None:
        out.error = "not a file torch.load reads (no torch zip or legacy torch stream)"
        return out
    out.format = fmt.name
    try:
        report = fmt.probe(path, ProbeOptions(numeric=False))
    except OSError as exc:
        out.error = f"unreadable: {exc.strerror or exc}"
        return out
    out.verdict = str(report.verdict)
    named = list(report.extra.get("globals") or [])
    out.globals_total = len(named)
    scans: list[pickle_scan.PickleScan] = []
    try:
        if fmt is TorchZipFormat:
            raw = _zip_pickle(path)
            if raw is not None:
                scans = [pickle_scan.scan_pickle(raw, partial=True)]
        else:
            scans = _legacy_scans(path)
    except (OSError, ValueError) as exc:
        out.blockers.append(f"the pickle could not be read: {exc}")
    dotted = {g for s in scans for g in s.dotted}
    refused = sorted({g for g in named if g in dotted or not pickle_policy.weights_only_allowed(g)}
                     | {g for s in scans for g in s.unsafe_globals()})
    derived = sorted({t for s in scans for t in build_types(s.root)} - set(refused))
    out.needed = [_classify(g, g in dotted, lists) for g in refused]
    out.needed += [_classify(t, False, lists, why="the type of a numpy dtype the pickle builds "
                             "(torch's BUILD checks it)") for t in derived]
    opcodes = sorted({op for s in scans for op in s.opcodes} - pickle_policy.WEIGHTS_ONLY_OPCODES)
    if opcodes:
        out.blockers.append("opcodes torch's weights-only unpickler does not implement: "
                            + ", ".join(opcodes))
    if any(s.error for s in scans) or not scans:
        err = next((s.error for s in scans if s.error), "no data.pkl found")
        out.blockers.append(f"the pickle does not parse: {err}")
    if report.verdict not in (Verdict.INTACT, Verdict.UNSAFE, Verdict.SUSPECT):
        codes = sorted({f.code for f in report.findings if f.severity.rank >= 2})
        out.blockers.append(f"the file is {report.verdict} ({', '.join(codes)}): probe it")
    return out


TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")


def _torn_torch(path: Path) -> bool:
    """A file named as torch.save names them that does not read as one, but starts as one
    (a zip's local header, a pickle's protocol opcode), is empty or zeroed, or cannot be read
    at all: a damaged checkpoint, to answer, not to pass over (a venv's text ``.pth`` or a
    protobuf ``.ckpt`` starts otherwise)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except FileNotFoundError:  # gone since it was listed
        return False
    except OSError:
        return True
    # empty or zeroed (a crash mid-save leaves these), or the start of a zip or a pickle
    return (not head.strip(b"\x00") or head.startswith(b"PK\x03\x04")
            or head[:1] == b"\x80")


def _candidates(root: Path) -> list[Path]:
    """Files under a directory (no symlink followed, bounded), in name order."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if name.endswith(".distcp"):
                continue  # DCP shards: read item by item by DCP's reader, never torch.load
            try:
                regular = stat.S_ISREG(p.lstat().st_mode)
            except FileNotFoundError:  # renamed away while listed (a live run): not there
                continue
            except OSError:  # there but unreadable: answered as such when named as one
                regular = None
            if regular is None:
                if name.endswith(TORCH_SUFFIXES):
                    found.append(p)
            elif regular and (TorchZipFormat.detect(p) or TorchLegacyFormat.detect(p)
                              or (name.endswith(TORCH_SUFFIXES) and _torn_torch(p))):
                found.append(p)
            if len(found) >= MAX_FILES:
                return found
    return found


def needed_globals(paths: list[str | os.PathLike[str]]) -> SafeGlobalsResult:
    """What each torch file under ``paths`` needs registered before
    ``torch.load(weights_only=True)`` accepts it."""
    from ckptrescue.errors import EvidenceError

    for given in paths:  # a path given that names nothing is a mistyped argument, not a file
        # the answer can speak of (a dangling or looping symlink is: it names something)
        if not os.path.lexists(given):
            raise EvidenceError(f"{os.fsdecode(given)}: no such file or directory")
    lists = exact_lists()
    result = SafeGlobalsResult(paths=[str(p) for p in paths])
    for given in paths:
        p = Path(given)
        if p.is_dir() and not p.is_symlink():
            # a file rotated away while the folder was read (a live run) is not there
            files = [f for f in _candidates(p) if os.path.lexists(f)]
            if not files:
                result.files.append(FileGlobals(path=str(p), error=NO_TORCH_FILE))
            result.files += [_one(f, lists) for f in files]
        else:
            result.files.append(_one(p, lists))
    result.record("checkpoint.safe_globals", {"files": len(result.files),
                                              "safe": [n.name for n in result.union("safe")],
                                              "answer": result.answer()})
    result.findings_here()
    return result
