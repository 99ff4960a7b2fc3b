"""Keras 3 sharded weights: ``NAME.weights.json`` + ``NAME_00000.weights.h5``, ``_00001`` ...

Who calls it: the generic checkpoint probe through ``FORMATS`` (``model.save_weights(...,
max_shard_size=...)`` writes these). The JSON's ``weight_map`` maps each variable group
(``/layers/dense/vars``) to the shard files holding it. Checks: the JSON parses; every shard it
names exists (KR005) and holds the groups mapped to it (KR006); every shard is walked as HDF5
(:mod:`h5weights`: structure, offsets, numerics — HDF5 has no checksums, H5001).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats.h5weights import H5WeightsFormat, walk_h5
from ckptrescue.checkpoints.formats.jsondepth import too_deep
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tf_findings import verdict_from
from ckptrescue.model import Finding, Severity

FORMAT = "keras-sharded"
JSON_CAP = 64 * 1024 * 1024


def read_weight_map(path: Path) -> dict[str, list[str]] | None:
    """The ``weight_map`` of a sharded-weights JSON, or None when it is not one."""
    try:
        if path.stat().st_size > JSON_CAP:
            return None
        raw = path.read_bytes()
        if too_deep(raw, 64) is not None:
            return None  # not a weights map (one is two levels deep); never recurse into it
        data: Any = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in wmap.values()):
        return None
    if not any(x.endswith(".h5") for v in wmap.values() for x in v):
        return None
    return {str(k): list(v) for k, v in wmap.items()}


def _shard_files(path: Path, wmap: dict[str, list[str]]) -> list[Path]:
    names = sorted({x for v in wmap.values() for x in v})
    return [path.parent / Path(n).name for n in names]


def probe_sharded(path: Path, options: ProbeOptions) -> CheckpointReport:
    report = CheckpointReport(path=str(path), format=FORMAT, verdict=Verdict.INTACT,
                              files=[str(path)])
    wmap = read_weight_map(path) or {}
    by_shard: dict[str, list[str]] = {}
    for group, shards in wmap.items():
        for s in shards:
            by_shard.setdefault(Path(s).name, []).append(group.strip("/"))
    for shard in _shard_files(path, wmap):
        groups = by_shard.get(shard.name, [])
        if not shard.is_file():
            report.findings.append(Finding(
                "KR005", Severity.CRITICAL, f"shard {shard.name} is missing ({len(groups)} "
                "variable group(s) lost)", evidence=str(shard), source="keras",
                tensors=tuple(groups)))
            report.missing_tensors.extend(groups)
            continue
        report.files.append(str(shard))
        with open_regular(shard) as raw:
            walk = walk_h5(str(shard), evidence=str(shard), raw=raw, base=0,
                           limit=shard.stat().st_size, numeric=options.numeric)
        report.tensors.extend(walk.tensors)
        report.findings.extend(f for f in walk.findings if f.code != "H5001")
        report.suspect_tensors.extend(walk.suspect)
        report.damaged_tensors.extend(walk.unreadable)
        held = {t.name.rsplit("/", 1)[0] for t in walk.tensors}
        absent = [g for g in groups if g not in held] if walk.opened else []
        if absent:
            report.findings.append(Finding(
                "KR006", Severity.ERROR, f"{shard.name} lacks {len(absent)} variable group(s) "
                "the weight map puts in it", evidence=str(shard), source="keras",
                tensors=tuple(absent)))
            report.missing_tensors.extend(absent)
    report.findings.insert(0, Finding(
        "H5001", Severity.INFO, "HDF5 stores no checksums: a changed byte is invisible to "
        "every reader; only structure and numerics were checked", evidence=str(path),
        source="hdf5"))
    report.extra = {"shards": len(by_shard), "groups": len(wmap), "checksums": False}
    report.verdict = verdict_from(report)
    return report


class KerasShardedFormat:
    """``*.weights.json`` + its ``.weights.h5`` shards (one checkpoint)."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 25

    @classmethod
    def detect(cls, path: Path) -> bool:
        return path.is_file() and path.name.endswith(".json") and \
            read_weight_map(path) is not None

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return sorted(p for p in directory.glob("*.json") if cls.detect(p))

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        return [root, *(p for p in _shard_files(root, read_weight_map(root) or {})
                        if p.exists())]

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        return probe_sharded(path, options)

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        return H5WeightsFormat.iter_verified_tensors(path, report)


FORMATS = [KerasShardedFormat]
