"""A case's step outputs, read by type (``outputs_of``): the one reader the answer, the report,
the TUI and the provenance index share.

Read in O(outputs): the ``step.finished`` records come through the case's record index (no
replay of the log), and each output artifact is parsed once per process (artifacts are
write-once and content-addressed, so a parsed one stays true; the few most recent are kept).
What it returns is shared between readers: read it, do not change it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, TypeVar

from ckptrescue.errors import CaseError
from ckptrescue.model import JsonObject, StepOutputs

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptrescue.record.case import Case

O = TypeVar("O", bound=StepOutputs)  # noqa: E741

KEEP_PARSED = 8
_PARSED: OrderedDict[str, Any] = OrderedDict()
_MUTEX = threading.Lock()


def parsed_artifact(case: Case, sha256: str) -> Any:
    """An artifact's JSON, parsed once per process (the most recent :data:`KEEP_PARSED`)."""
    path = str(case.artifact_path(sha256).absolute())
    with _MUTEX:
        if path in _PARSED:
            _PARSED.move_to_end(path)
            return _PARSED[path]
    data = json.loads(case.read_artifact(sha256))
    with _MUTEX:
        _PARSED[path] = data
        while len(_PARSED) > KEEP_PARSED:
            _PARSED.popitem(last=False)
    return data


# Cases written before ``step.finished`` named its output type: the type of each action then
# (frozen: every later record names its type; a new action never goes here).
LEGACY_OUTPUT_TYPES: dict[str, str] = {
    **dict.fromkeys(("store.history", "store.preflight", "store.preserve", "store.restore",
                     "store.verify"), "StoreResultOutput"),
    **{a: f"S3{a[3:].title()}Output" for a in ("s3.history", "s3.preflight", "s3.preserve",
                                               "s3.restore", "s3.verify")},
    "case.verify": "CaseVerifyOutput", "collect.logs": "CollectLogsOutput",
    "confirm": "ConfirmOutput", "copy": "CopyOutput", "dataset.compare": "DatasetCompareOutput",
    "dataset.profile": "DatasetProfileOutput", "dataset.quarantine": "QuarantineOutput",
    "dataset.verify": "DatasetVerifyOutput", "device.health": "DeviceHealthOutput",
    "drill.load": "DrillLoadOutput", "exec": "ExecOutput", "extract": "ExtractOutput",
    "fs.inspect": "FsInspectOutput", "gate": "GateOutput", "hub.verify": "HubCacheOutput",
    "image": "ImageOutput", "locate": "LocateOutput", "manifest.audit": "ManifestAuditOutput",
    "manifest.build": "ManifestBuildOutput", "manifest.diff": "ManifestDiffOutput",
    "manifest.update": "ManifestUpdateOutput", "mount": "MountOutput", "probe": "ProbeOutput",
    "rank": "RankOutput", "recover": "RecoverOutput", "report": "ReportOutput",
    "resume.keys": "KeyMismatchOutput", "resume.reassemble": "ReassemblyOutput",
    "resume.safe_globals": "SafeGlobalsOutput", "resume.world_size": "WorldSizeOutput",
    "salvage": "SalvageOutput", "trainstate": "TrainStateOutput", "triage": "TriageOutput",
    "umount": "UmountOutput", "watch.pass": "WatchPassOutput",
}


def output_type_of(details: JsonObject) -> str | None:
    """The output type a ``step.finished`` record names (an older case's: by its action)."""
    name = details.get("output_type") or LEGACY_OUTPUT_TYPES.get(str(details.get("action")))
    return str(name) if name else None


def _names(kind: type[StepOutputs]) -> set[str] | None:
    """``kind``'s name and its subclasses' (None: the base, every type)."""
    if kind is StepOutputs:
        return None
    names, todo = set(), [kind]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return names


def type_modules(kind: type[StepOutputs]) -> list[str]:
    """The modules defining ``kind`` and its output-type bases (what ``step.finished`` records
    beside the type's name, so that a reader knows which domains' record types a case needs)."""
    return sorted({c.__module__ for c in kind.__mro__
                   if isinstance(c, type) and issubclass(c, StepOutputs) and c is not StepOutputs})


def recorded_modules(case: Case) -> set[str] | None:
    """The modules of every output type (and its bases) the case's finished steps recorded;
    None when a record does not name them (written before ``step.finished`` did): its type may
    then come from any module."""
    modules: set[str] = set()
    for record in case.records("step.finished"):
        details = record["details"]
        if output_type_of(details) is None:
            continue
        listed = details.get("output_modules")
        if not isinstance(listed, list):
            return None
        modules.update(str(m) for m in listed)
    return modules


CHECKPOINTS = "ckptrescue.checkpoints.outputs"
DATASETS = "ckptrescue.datasets.outputs"  # a package: its records live in its modules
STORAGE = "ckptrescue.storage.outputs"
STORES = "ckptrescue.stores.outputs"


def in_domain(module: str, domain: str) -> bool:
    """Whether records that a ``step.finished`` says come from ``module`` may be records of
    ``domain`` (one of the names above, or one module of a domain's package, e.g.
    ``ckptrescue.datasets.outputs.analysis``): the same module, a module of the package
    ``domain``, or the package itself, which cases written before the package was split name
    for all of its records."""
    return (module == domain or module.startswith(domain + ".")
            or domain.startswith(module + "."))


def domains_held(case: Case) -> Callable[[str], bool]:
    """Whether the case may hold records of an output domain (``CHECKPOINTS``, ...; or of one
    module of a domain's package): exactly, from the modules ``step.finished`` records name
    (:func:`in_domain`); for a case with older records, any module may, unless all its records
    are checkpoint records (a probe's case). A reader skips, and does not import, a domain whose
    records the case cannot hold."""
    modules = recorded_modules(case)
    if modules is not None:
        return lambda domain: any(in_domain(m, domain) for m in modules)
    others = holds_records_beyond(case, CHECKPOINTS)
    return lambda module: others or module == CHECKPOINTS


def recorded_types(case: Case) -> set[str]:
    """The output types the case's finished steps name (a reader can then import a domain's
    record types only when the case holds one)."""
    return {name for record in case.records("step.finished")
            if (name := output_type_of(record["details"])) is not None}


def holds_records_beyond(case: Case, module: str) -> bool:
    """True unless every output type the case recorded is a record class defined in
    ``module`` (e.g. ``"ckptrescue.checkpoints.outputs"``, the types of a probe's case). A
    reader of other domains' records imports their types only when this is true: a record of
    theirs (or of a subclass) can be in the case only then."""
    import importlib

    records = importlib.import_module(module)
    for name in recorded_types(case):
        kind = getattr(records, name, None)
        if not (isinstance(kind, type) and issubclass(kind, StepOutputs)
                and in_domain(kind.__module__, module)):
            return True
    return False


def outputs_of(case: Case, kind: type[O]) -> list[O]:
    """The outputs of every finished step whose record names ``kind`` (or a subclass) as its
    output type, oldest first.

    Read by type: each ``step.finished`` record names its step's output type
    (``Action.output_type``), whatever the action is called; no action registry is needed.
    """
    wanted = _names(kind)
    results: list[O] = []
    for record in case.records("step.finished"):
        details = record["details"]
        name = output_type_of(details)
        if name is None or (wanted is not None and name not in wanted) \
                or not details.get("outputs_sha256"):
            continue
        try:
            results.append(kind.from_json(parsed_artifact(case, details["outputs_sha256"])))
        except (OSError, ValueError, CaseError):
            continue  # an artifact no longer as stored (case verify names it) is not read
    return results


def latest_output(case: Case, kind: type[O]) -> O | None:
    """The newest of :func:`outputs_of` (None: no finished step has recorded one)."""
    outs = outputs_of(case, kind)
    return outs[-1] if outs else None
