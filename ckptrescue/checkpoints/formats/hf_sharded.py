"""Hugging Face sharded checkpoints: ``*.index.json`` weight map + shard files (reference §3).

``model.safetensors.index.json`` / ``pytorch_model.bin.index.json`` hold ``{"metadata":
{"total_size"}, "weight_map": {tensor: shard}}``; shards are named ``...-0000i-of-0000N...``.
Checks: every shard listed exists (HF001); each weight-map entry is in its shard (HF002), or, when
it sits in another shard, the index is stale (HF008: not lost); shard
tensors absent from the map (HF003) or present in several shards (HF004); ``-of-N`` numbering
and ``total_size`` (HF007, warning: producer-dependent); each shard with its own format's probe.
A shard set without its index is reported as incomplete (HF006).

The index (or, without an index, the first shard) is the checkpoint root; the walker treats the
shards as its companions. Without an index a ``-NNNNN-of-NNNNN`` set is claimed only when it holds
weights (a weights extension and safetensors/torch bytes): dataset shards use the same names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import (
    CheckpointReport,
    ProbeOptions,
    TensorRecord,
    Verdict,
    first_detecting,
    worst_verdict,
)
from ckptrescue.checkpoints.formats import tensormap
from ckptrescue.checkpoints.formats.jsondepth import too_deep
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.model import JsonObject

_SHARD = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})(?P<ext>\.[A-Za-z0-9_.]+)$")
MAX_INDEX = 64 * 1024 * 1024
# the index names the HF libraries write (model.safetensors.index.json, pytorch_model.bin...)
_WEIGHTS_INDEX = re.compile(r"^.+\.(safetensors|bin|pt|pth)\.index\.json$")


def _plain_name(name: str) -> bool:
    """A shard name that stays in the index's directory (no separator, not '.' or '..')."""
    return bool(name) and "/" not in name and "\\" not in name and name not in {".", ".."} \
        and "\x00" not in name


def _read_index(path: Path) -> JsonObject | None:
    try:
        if path.stat().st_size > MAX_INDEX:
            return None
        raw = path.read_bytes()
        if too_deep(raw, 64) is not None:  # an index is 3 levels deep; json.loads recurses
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("weight_map"), dict) else None


def _shard_groups(directory: Path) -> dict[tuple[str, str, str], list[Path]]:
    groups: dict[tuple[str, str, str], list[Path]] = {}
    for p in sorted(directory.iterdir()):
        m = _SHARD.match(p.name)
        if m and p.is_file():
            groups.setdefault((m.group("stem"), m.group("n"), m.group("ext")), []).append(p)
    return groups


def _shard_format(path: Path) -> Any:
    from ckptrescue.checkpoints.formats.safetensors import SafetensorsFormat
    from ckptrescue.checkpoints.formats.torch_legacy import TorchLegacyFormat
    from ckptrescue.checkpoints.formats.torch_zip import TorchZipFormat

    return first_detecting((SafetensorsFormat, TorchZipFormat, TorchLegacyFormat), path,
                           passing=(OSError, ValueError, OverflowError))


# Shard extensions of Hugging Face weight files (``save_pretrained``'s names).
WEIGHT_EXTS = {".safetensors", ".bin", ".pt", ".pth", ".ckpt"}


def _weight_shards(ext: str, shards: list[Path]) -> bool:
    """An ``X-NNNNN-of-NNNNN.ext`` set without an index is a sharded checkpoint only when its
    files are weights: a weights extension and at least one shard whose bytes are a
    safetensors or torch file. Dataset shards (``train-00000-of-00012.parquet``,
    ``data_tfrecord-00000-of-00012.gz``) share the naming scheme and are not checkpoints."""
    if ext.lower() not in WEIGHT_EXTS:
        return False
    return any(_shard_format(p) is not None for p in shards[:8])


class HfShardedFormat:
    """Hugging Face sharded checkpoint (``hf-sharded``)."""

    name: ClassVar[str] = "hf-sharded"
    priority: ClassVar[int] = 10

    @classmethod
    def detect(cls, path: Path) -> bool:
        # a weights index by its name is one even when it cannot be read (then: HF005)
        return path.is_file() and path.name.endswith(".index.json") and (
            _WEIGHTS_INDEX.match(path.name) is not None or _read_index(path) is not None)

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        roots: list[Path] = []
        covered: set[str] = set()
        for p in sorted(directory.glob("*.index.json")):
            idx = _read_index(p)
            if idx is not None:
                roots.append(p)
                covered |= {str(v) for v in idx["weight_map"].values() if _plain_name(str(v))}
            elif _WEIGHTS_INDEX.match(p.name) and p.is_file():
                roots.append(p)  # unreadable: probed, and reported, as the broken index it is
        for (_, _, ext), shards in _shard_groups(directory).items():
            if not any(s.name in covered for s in shards) and _weight_shards(ext, shards):
                roots.append(shards[0])
        return roots

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        directory = root.parent
        out = [root]
        idx = _read_index(root) if root.name.endswith(".index.json") else None
        names = {str(v) for v in idx["weight_map"].values() if _plain_name(str(v))} \
            if idx else set()
        for _key, shards in _shard_groups(directory).items():
            if idx is None and root not in shards:
                continue
            if idx is not None and not any(s.name in names for s in shards):
                continue
            out.extend(shards)
        out.extend(directory / n for n in names if (directory / n).exists())
        return sorted(set(out))

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """The index (or the shard group without one), each shard probed by its own format,
        the tensors set against the weight map, the shard numbering and the total size."""
        report = CheckpointReport(path=str(path), format=cls.name, verdict=Verdict.INTACT)
        verdicts: list[Verdict] = []
        idx = _read_index(path) if path.name.endswith(".index.json") else None
        if path.name.endswith(".index.json") and idx is None:
            report.findings.append(finding("HF005", f"{path.name}: not a readable index",
                                           evidence=str(path)))
            report.verdict = Verdict.INCOMPLETE
            return report
        if idx is None:
            weight_map, shard_names = _without_index(report, path, verdicts)
        else:
            weight_map, shard_names = _index_weight_map(report, path, idx, verdicts)
        report.files = [str(path)] + [str(path.parent / s) for s in shard_names]
        shards = _ShardScan(report, path, weight_map, with_index=idx is not None)
        for shard in shard_names:
            verdicts += shards.probe(shard, options)
        verdicts += shards.stale_index()
        if idx is not None:
            cls._numbering(report, shard_names, path.parent, str(path))
            _total_size(report, idx, str(path))
        uniq: dict[tuple[str, str], Any] = {}
        for f in report.findings:
            uniq.setdefault((f.code, f.title), f)
        report.findings = list(uniq.values())
        tensormap.finalize(report, verdicts)
        report.verdict = worst_verdict([report.verdict, *verdicts])
        return report

    @staticmethod
    def _numbering(report: CheckpointReport, shards: list[str], directory: Path,
                   spath: str) -> None:
        ns = {m.group("n") for s in shards if (m := _SHARD.match(s))}
        if len(ns) > 1:
            report.findings.append(finding("HF007", "shards disagree on -of-N: "
                                           + ", ".join(sorted(ns)), evidence=spath))
        elif ns:
            n = int(ns.pop())
            if n != len(shards):
                report.findings.append(finding("HF007", f"index lists {len(shards)} shards but "
                                               f"names say -of-{n:05d}", evidence=spath))


FORMATS = [HfShardedFormat]


def _without_index(report: CheckpointReport, path: Path, verdicts: list[Verdict]
                   ) -> tuple[dict[str, str], list[str]]:
    """Shards with no index: incomplete, every numbered shard of the group not there named."""
    directory = path.parent
    m = _SHARD.match(path.name)
    group = next((g for k, g in _shard_groups(directory).items() if path in g), [path])
    report.findings.append(finding("HF006", f"shards {m.group('stem') if m else ''}-*"
                                   " have no index file", evidence=str(path)))
    verdicts.append(Verdict.INCOMPLETE)
    n_total = int(m.group("n")) if m else len(group)
    present = {int(_SHARD.match(p.name).group("i")) for p in group  # type: ignore[union-attr]
               if _SHARD.match(p.name)}
    for i in range(1, n_total + 1):
        if i not in present and m:
            name = f"{m.group('stem')}-{i:05d}-of-{m.group('n')}{m.group('ext')}"
            report.findings.append(finding("HF001", f"shard {name} is missing",
                                           evidence=str(directory / name)))
    return {}, [p.name for p in group]


def _index_weight_map(report: CheckpointReport, path: Path, idx: dict[str, Any],
                      verdicts: list[Verdict]) -> tuple[dict[str, str], list[str]]:
    """The index's weight map, without the entries naming files outside its directory."""
    weight_map = {str(k): str(v) for k, v in idx["weight_map"].items()}
    outside = sorted({v for v in weight_map.values() if not _plain_name(v)})
    if outside:
        # HF loaders join the name to the index's directory: an absolute path or a path with
        # separators or '..' reaches files outside the checkpoint
        report.findings.append(finding(
            "HF009", f"{path.name} names shard files outside its directory: "
            + ", ".join(repr(v) for v in outside[:5]), evidence=str(path),
            details={"names": outside[:50]}))
        verdicts.append(Verdict.DAMAGED)
        weight_map = {k: v for k, v in weight_map.items() if _plain_name(v)}
    return weight_map, sorted(set(weight_map.values()))


def _total_size(report: CheckpointReport, idx: dict[str, Any], spath: str) -> None:
    """The index's ``total_size`` against the bytes of the tensors found (producer-dependent:
    a finding, no verdict)."""
    total = (idx.get("metadata") or {}).get("total_size")
    have = sum(t.length or 0 for t in report.tensors if t.status != "missing")
    if isinstance(total, int) and not any(t.status == "missing" for t in report.tensors) \
            and total != have:
        report.findings.append(finding("HF007", f"index total_size {total} != {have} "
                                       "bytes of tensors (producer-dependent)", evidence=spath))


class _ShardScan:
    """The shards of one checkpoint probed in turn: which shard holds each tensor, and what
    the weight map expected of each shard that is not there."""

    def __init__(self, report: CheckpointReport, path: Path, weight_map: dict[str, str], *,
                 with_index: bool) -> None:
        self.report, self.path, self.weight_map = report, path, weight_map
        self.with_index = with_index
        self.seen: dict[str, str] = {}
        self.absent_by_shard: dict[str, tuple[Path, list[str]]] = {}

    def _unreadable(self, shard_path: Path, expected: list[str], status: str,
                    reason: str) -> None:
        for name in expected:
            self.report.tensors.append(TensorRecord(name=name, file=str(shard_path),
                                                    status=status, reasons=[reason]))

    def probe(self, shard: str, options: ProbeOptions) -> list[Verdict]:
        """One shard: missing, unrecognised, or probed by its format (its tensors and
        findings taken in); returns its verdicts."""
        report, shard_path = self.report, self.path.parent / shard
        expected = sorted(k for k, v in self.weight_map.items() if v == shard)
        if not shard_path.is_file():
            report.findings.append(finding("HF001", f"shard {shard} is missing "
                                           f"({len(expected)} tensors)", evidence=str(shard_path),
                                           tensors=expected[:500]))
            self._unreadable(shard_path, expected, "missing", f"shard {shard} missing")
            return [Verdict.INCOMPLETE]
        fmt = _shard_format(shard_path)
        if fmt is None:
            report.findings.append(finding("TZ020", f"shard {shard} is not a recognised "
                                           "checkpoint", evidence=str(shard_path)))
            self._unreadable(shard_path, expected, "damaged", f"shard {shard} unreadable")
            return [Verdict.DAMAGED]
        sub = fmt.probe(shard_path, options)
        report.findings.extend(sub.findings)
        report.extra.setdefault("strides", {}).update(sub.extra.get("strides", {}))
        if sub.extra.get("unsafe_globals"):
            report.extra.setdefault("unsafe_globals", []).extend(sub.extra["unsafe_globals"])
        names = {t.name for t in sub.tensors}
        for t in sub.tensors:
            if t.name in self.seen:
                report.findings.append(finding("HF004", f"{t.name} is in {self.seen[t.name]} "
                                               f"and {shard}", evidence=str(shard_path),
                                               tensors=[t.name]))
            self.seen[t.name] = shard
            report.tensors.append(t)
        if self.with_index:
            self.absent_by_shard[shard] = (shard_path, [n for n in expected if n not in names])
            stale = sorted(names - set(expected))
            if stale:
                report.findings.append(finding("HF003", f"{len(stale)} tensor(s) in {shard}"
                                               " not in the weight map", evidence=str(self.path),
                                               tensors=stale[:500]))
        return [sub.verdict]

    def stale_index(self) -> list[Verdict]:
        """A weight-map entry absent from its shard but present in another one: the index is
        stale (re-sharded), the tensor is not lost; only the rest are missing."""
        verdicts = []
        for shard, (shard_path, absent) in self.absent_by_shard.items():
            moved = {n: self.seen[n] for n in absent if n in self.seen}
            lost = [n for n in absent if n not in self.seen]
            if moved:
                self.report.findings.append(finding(
                    "HF008", f"{len(moved)} tensor(s) the weight map puts in {shard} are in "
                    "another shard (stale index: loaders following it fail; the bytes are "
                    "there)", evidence=str(self.path), tensors=sorted(moved)[:500],
                    details={"found_in": dict(sorted(moved.items())[:500])}))
                verdicts.append(Verdict.SUSPECT)
            if lost:
                self.report.findings.append(finding("HF002", f"{len(lost)} tensor(s) of the "
                                                    f"weight map missing from {shard}",
                                                    evidence=str(shard_path),
                                                    tensors=lost[:500]))
                verdicts.append(Verdict.INCOMPLETE)
                self._unreadable(shard_path, lost, "missing", f"not in shard {shard}")
        return verdicts
