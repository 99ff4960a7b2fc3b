"""Orbax (JAX) step directories, verified with tensorstore (never JAX).

Layout (orbax-checkpoint 0.12, ``CheckpointManager``): ``<run>/<step>/`` holds
``_CHECKPOINT_METADATA`` (JSON: ``item_handlers`` naming each item, ``init_timestamp_nsecs``,
``commit_timestamp_nsecs``) and ``commit_success.txt``, and one directory per item (``default/``,
``state/``, ...) with ``_METADATA`` (JSON ``tree_metadata``: every array's key path and
``write_shape``; ``use_ocdbt``, ``use_zarr3``), ``_sharding``, ``array_metadatas/process_<i>``,
and the arrays: with OCDBT (the default) a ``manifest.ocdbt`` + ``d/`` data files at the item
root and under ``ocdbt.process_<i>/``; without, one zarr directory per array. A save is written
to ``<step>.orbax-checkpoint-tmp`` (older versions: ``-<timestamp>``) and renamed when
committed (``orbax/checkpoint/_src/path/atomicity.py``): a temporary directory is never
resumable (FM080) whatever it holds.

Verification: the step metadata (FM081) and its commit marker (FM085), every item it names
(FM086), each item's ``_METADATA`` (FM081), the OCDBT manifest (FM082, opened with tensorstore's
``ocdbt`` kvstore, which checks its checksums), and every array of ``tree_metadata`` read in full
through tensorstore's zarr driver (FM083 names the array and the error: a missing or torn data
file, a bad chunk). Reads are bounded (``MAX_READ`` bytes at a time). Without tensorstore the
arrays are ``unverified`` (FM084). Orbax pickles nothing: no globals are allowed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.families.base import (
    DirectoryStepFamily,
    StepLayout,
    finding,
    is_file,
    listdir,
)
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.model import Finding, JsonObject

TMP = ".orbax-checkpoint-tmp"
STEP_META = "_CHECKPOINT_METADATA"
ITEM_META = "_METADATA"
MAX_JSON = 64 * 1024 * 1024
MAX_READ = 64 * 1024 * 1024
_STEP = re.compile(r"^(?:.*?_)?(\d+)(?:\.orbax-checkpoint-tmp.*)?$")


def _json(path: Path) -> tuple[Any, str | None]:
    try:
        if path.stat().st_size > MAX_JSON:
            return None, "larger than 64 MiB"
        with open_regular(path) as fh:
            return json.loads(fh.read()), None
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({exc})"[:200]


def _is_item(d: Path) -> bool:
    return is_file(d / ITEM_META) or is_file(d / "manifest.ocdbt")


def _is_step(d: Path) -> bool:
    if not d.is_dir() or d.is_symlink():
        return False
    if is_file(d / STEP_META):
        return True
    return bool(_STEP.match(d.name)) and any(_is_item(d / n) for n in listdir(d))


def _param_names(meta: Any) -> list[str]:
    tree = meta.get("tree_metadata") if isinstance(meta, dict) else None
    names: list[str] = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            km = value.get("key_metadata") if isinstance(value, dict) else None
            if isinstance(km, list) and km:
                names.append(".".join(str(k.get("key")) for k in km if isinstance(k, dict)))
            else:
                names.append(str(key))
    return names


def _kvstore(item: Path, ocdbt: bool) -> JsonObject:
    base = {"driver": "file", "path": str(item) + "/"}
    return {"driver": "ocdbt", "base": base} if ocdbt else base


class OrbaxFamily(DirectoryStepFamily):
    """An Orbax ``CheckpointManager`` step directory (``orbax``). No pointer file: the newest
    committed step directory is it."""

    name: ClassVar[str] = "orbax"
    step_name: ClassVar[re.Pattern[str]] = _STEP
    allowed_globals: ClassVar[frozenset[str]] = frozenset()  # Orbax writes JSON, zarr, OCDBT

    is_step = staticmethod(_is_step)

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        findings: list[Finding] = []
        layout = StepLayout(cls.name, root, cls.step_of(root), findings=findings)
        if TMP in root.name:
            findings.append(finding(
                "FM080", f"{root.name} is a temporary Orbax directory: step "
                f"{layout.step} was written but never committed (renamed)", evidence=root,
                details={"step": layout.step}))
        meta, why = _json(root / STEP_META) if is_file(root / STEP_META) else (None, "missing")
        items = [n for n in listdir(root) if _is_item(root / n)]
        if meta is None or not isinstance(meta, dict):
            problem = why or "not a JSON object"
            findings.append(finding("FM081", f"{root.name}/{STEP_META}: {problem}",
                                    evidence=root / STEP_META))
        else:
            named = meta.get("item_handlers")
            if isinstance(named, dict):
                for item in named:
                    if str(item) not in items and not any(
                            n.startswith(f"{item}{TMP}") for n in listdir(root)):
                        findings.append(finding(
                            "FM086", f"{root.name}: item {item!r} named in {STEP_META} is "
                            "missing", evidence=root / str(item), ranks=[str(item)]))
            if TMP not in root.name and not meta.get("commit_timestamp_nsecs") and not is_file(
                    root / "commit_success.txt"):
                findings.append(finding(
                    "FM085", f"{root.name}: no commit marker (commit_success.txt, "
                    "commit_timestamp_nsecs)", evidence=root))
        layout.world = {"processes": max(1, len([n for n in listdir(root / items[0])
                                                 if n.startswith("ocdbt.process_")]))
                        } if items else {}
        layout.members = []
        return layout

    @classmethod
    def probe(cls, root: Path, options: ProbeOptions) -> CheckpointReport:
        from ckptrescue.checkpoints.formats import tensormap

        layout = cls.layout(root)
        report = CheckpointReport(path=str(root), format=cls.name, verdict=Verdict.INTACT,
                                  files=sorted(str(p) for p in root.rglob("*") if p.is_file()))
        findings = list(layout.findings)
        items = [n for n in listdir(root) if _is_item(root / n)]
        ranks: dict[str, str] = {}
        try:
            import tensorstore as ts
        except ImportError:
            ts = None
            findings.append(finding("FM084", "tensorstore is not installed: Orbax arrays not "
                                    "verified", evidence=root))
        for item in items:
            item_findings = _probe_item(root / item, item, ts, report)
            findings.extend(item_findings)
            bad = [f for f in item_findings if f.code in ("FM081", "FM082", "FM083")]
            ranks[item] = "damaged" if any(f.code == "FM083" for f in bad) else \
                "incomplete" if bad else "intact"
        report.findings.extend(findings)
        from ckptrescue.checkpoints.families.base import verdict_of

        verdicts = [v for v in (verdict_of(f) for f in findings) if v is not None]
        bad_ranks = sorted({r for f in findings if verdict_of(f) is not None
                            for r in f.details.get("ranks", [])} | {
            r for r, v in ranks.items() if v != "intact"})
        report.extra["family"] = {
            "family": cls.name, "step": layout.step, "world": layout.world, "ranks": ranks,
            "bad_ranks": bad_ranks, "members": len(items), "expected": len(items),
            "tensors_elided": 0, "committed": TMP not in root.name,
            "steps_recorded": [layout.step] if layout.step is not None else [],
        }
        tensormap.finalize(report, verdicts)
        return report


def _probe_item(item: Path, label: str, ts: Any, report: CheckpointReport) -> list[Finding]:
    out: list[Finding] = []
    meta, why = _json(item / ITEM_META) if is_file(item / ITEM_META) else (None, "missing")
    if not isinstance(meta, dict):
        out.append(finding("FM081", f"{label}/{ITEM_META}: {why or 'not an object'}: the "
                           "arrays cannot be named", evidence=item / ITEM_META, ranks=[label]))
        return out
    ocdbt = bool(meta.get("use_ocdbt", True))
    names = _param_names(meta)
    if ocdbt and not is_file(item / "manifest.ocdbt"):
        out.append(finding("FM082", f"{label}/manifest.ocdbt missing", evidence=item,
                           ranks=[label]))
    if ts is None:
        for n in names:
            report.tensors.append(TensorRecord(name=f"{label}/{n}", file=str(item),
                                               status="unverified"))
        return out
    keys: set[str] | None = None
    if ocdbt:
        try:
            kv = ts.KvStore.open(_kvstore(item, True)).result()
            keys = {k.decode("utf-8", "replace") for k in kv.list().result()}
        except Exception as exc:  # noqa: BLE001 - tensorstore raises ValueError & co
            out.append(finding("FM082", f"{label}/manifest.ocdbt unreadable: {exc}"[:400],
                               evidence=item / "manifest.ocdbt", ranks=[label]))
            for n in names:
                report.tensors.append(TensorRecord(name=f"{label}/{n}", file=str(item),
                                                   status="missing",
                                                   reasons=["OCDBT manifest unreadable"]))
            return out
    zarr3 = bool(meta.get("use_zarr3"))
    for n in names:
        rec = TensorRecord(name=f"{label}/{n}", file=str(item), storage=n)
        report.tensors.append(rec)
        marker = f"{n}/zarr.json" if zarr3 else f"{n}/.zarray"
        if keys is not None and marker not in keys:
            rec.status, rec.reasons = "missing", ["not in the OCDBT store"]
            out.append(finding("FM083", f"{label}/{n}: named in _METADATA but not stored",
                               evidence=item, ranks=[label], tensors=[rec.name]))
            continue
        problem = _read_array(ts, item, n, ocdbt, zarr3, rec)
        if problem:
            rec.status = "damaged"
            rec.reasons.append(problem)
            out.append(finding("FM083", f"{label}/{n}: {problem}"[:400], evidence=item,
                               ranks=[label], tensors=[rec.name]))
    return out


def _read_array(ts: Any, item: Path, name: str, ocdbt: bool, zarr3: bool,
                rec: TensorRecord) -> str | None:
    """Open and read one array through tensorstore; the error text, or None when it reads."""
    kv = _kvstore(item, ocdbt)
    kv["path"] = f"{name}/" if ocdbt else str(item / name) + "/"
    if not ocdbt:
        kv = {"driver": "file", "path": str(item / name) + "/"}
    spec = {"driver": "zarr3" if zarr3 else "zarr", "kvstore": kv}
    try:
        arr = ts.open(spec, open=True, read=True).result()
        rec.dtype = str(arr.dtype.numpy_dtype)
        rec.shape = tuple(int(d) for d in arr.shape)
        itemsize = arr.dtype.numpy_dtype.itemsize
        rec.length = math.prod(rec.shape) * itemsize
        rows = rec.shape[0] if rec.shape else 1
        row_bytes = max(1, rec.length // max(rows, 1))
        step = max(1, MAX_READ // row_bytes)
        if not rec.shape:
            arr.read().result()
        else:
            for start in range(0, rows, step):
                arr[start:min(rows, start + step)].read().result()
    except Exception as exc:  # noqa: BLE001 - any tensorstore failure is a finding
        return f"unreadable through tensorstore: {exc}"
    rec.status = "ok"
    return None


FAMILIES = [OrbaxFamily]
