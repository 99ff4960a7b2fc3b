"""torch.distributed.checkpoint (DCP) directories: ``.metadata`` + ``__{rank}_{n}.distcp``.

Reference §4. ``.metadata`` is written last (temp file + rename): absent means the save never
finished. It is a plain pickle of DCP dataclasses, inspected with ``pickle_scan`` (never
executed; globals outside DCP's own classes and the weights-only allowlist make it ``unsafe``:
DCP's reader resolves every global; a name one edit from a listed one is a damaged name).
Checks: every referenced file exists and is long enough; per tensor, chunks tile the global
shape exactly; every chunk has a storage item; each item is a complete nested ``torch.save`` zip
whose records' CRC-32s are verified (``formats/torch_zip.probe_zip`` on the byte window), with
the nested tensor's shape equal to the chunk's; orphan ``.distcp`` files are reported.
Tensor names are the stored FQNs (a multi-chunk tensor's chunks are ``fqn@o1,o2``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import (
    CheckpointReport,
    ProbeOptions,
    TensorRecord,
    Verdict,
    worst_verdict,
)
from ckptrescue.checkpoints.formats import dcp_metadata_rules, pickle_policy, pickle_scan, tensormap
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tensormap import StorageSalvage, finding
from ckptrescue.checkpoints.formats.torch_zip import probe_zip


def _allowed(qualname: str) -> bool:
    return pickle_scan.dcp_allowed(qualname)


def _tuple(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, pickle_scan.Call) and value.args:
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _dtype(props: Any) -> str | None:
    state = props.state if isinstance(props, pickle_scan.Call) else None
    if isinstance(state, tuple) and state and isinstance(state[0], pickle_scan.Global):
        return state[0].name
    if isinstance(props, pickle_scan.Call):
        d = props.attr("dtype")
        if isinstance(d, pickle_scan.Global):
            return d.name
    return None


def _tiles(size: tuple[int, ...], chunks: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> str | None:
    """None when the chunks tile ``size`` exactly, else the reason."""
    total = 1
    for s in size:
        total *= s
    covered = 0
    for off, sz in chunks:
        if len(off) != len(size) or len(sz) != len(size):
            return "chunk rank differs from the tensor's"
        if any(o < 0 or o + s > d for o, s, d in zip(off, sz, size, strict=False)):
            return f"chunk at {list(off)} extends outside the tensor"
        n = 1
        for s in sz:
            n *= s
        covered += n
    for i, (oa, sa) in enumerate(chunks):
        for ob, sb in chunks[i + 1:]:
            if all(a < b + lb and b < a + la for a, la, b, lb in zip(oa, sa, ob, sb,
                                                                        strict=False)):
                return f"chunks at {list(oa)} and {list(ob)} overlap"
    if covered != total:
        return f"chunks cover {covered} of {total} elements"
    return None


class DcpFormat(StorageSalvage):
    """A torch.distributed.checkpoint directory (``dcp``)."""

    name: ClassVar[str] = "dcp"
    priority: ClassVar[int] = 10

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_dir():
            return False
        try:
            return (path / ".metadata").is_file() or any(
                p.suffix == ".distcp" for p in path.iterdir())
        except OSError:
            return False

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return [directory] if cls.detect(directory) else []

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        return [p for p in root.iterdir() if p.is_file()]

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """``.metadata`` (the pickle DCP's reader unpickles: its globals judged, then its
        shape), the data files it references, then every tensor's chunks: do they tile the
        tensor, is each one's storage item there and whole."""
        spath = str(path)
        files = sorted(p for p in path.iterdir() if p.is_file())
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[str(p) for p in files])
        verdicts: list[Verdict] = []
        meta_path = _metadata_file(path, files, report)
        if meta_path is None:
            return report
        with open_regular(meta_path) as fh:
            scan = pickle_scan.scan_pickle(fh.read(pickle_scan.MAX_PICKLE_BYTES),
                                           mode="memory", partial=True)
        verdicts += _judge_metadata(scan, meta_path, report, options)
        state = _metadata_state(scan, meta_path, report, verdicts)
        if state is None:
            return report
        items = _storage_items(state.get("storage_data") or {})
        sizes = _data_files(path, files, items, report, verdicts)
        short_files: set[str] = set()
        for fqn, tmeta in state["state_dict_metadata"].items():
            fqn = str(fqn)
            if not isinstance(tmeta, pickle_scan.Call) or \
                    not tmeta.qualname.endswith("TensorStorageMetadata"):
                key = (fqn, None)
                if key in items:
                    cls._item(path, key, items[key], sizes, short_files, report, None, None,
                              options, verdicts, tensor=False)
                continue
            cls._tensor(path, fqn, tmeta, items, sizes, short_files, report, options, verdicts)
        if short_files:
            verdicts.append(Verdict.TRUNCATED)
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def _tensor(cls, path: Path, fqn: str, tmeta: Any, items: dict[Any, dict[str, Any]],
                sizes: dict[str, int | None], short_files: set[str], report: CheckpointReport,
                options: ProbeOptions, verdicts: list[Verdict]) -> None:
        """One tensor of the metadata: its chunks tile it, and each chunk's storage item."""
        size = _tuple(tmeta.attr("size")) or ()
        dtype = _dtype(tmeta.attr("properties"))
        chunks = []
        for ch in tmeta.attr("chunks") or []:
            if isinstance(ch, pickle_scan.Call):
                off, sz = _tuple(ch.attr("offsets")), _tuple(ch.attr("sizes"))
                if off is not None and sz is not None:
                    chunks.append((off, sz))
        why = _tiles(size, chunks)
        if why:
            report.findings.append(finding("DC005", f"{fqn}: {why}", evidence=report.path,
                                           tensors=[fqn]))
            verdicts.append(Verdict.INCOMPLETE)
        for off, sz in chunks:
            name = fqn if len(chunks) == 1 else f"{fqn}@{','.join(map(str, off))}"
            key = (fqn, off)
            if key not in items:
                report.tensors.append(TensorRecord(name=name, dtype=dtype, shape=sz,
                                                   status="missing",
                                                   reasons=["no storage item"]))
                report.findings.append(finding("DC005", f"{name}: chunk has no storage "
                                               "item", evidence=report.path, tensors=[name]))
                continue
            cls._item(path, key, items[key], sizes, short_files, report, name, (dtype, sz),
                      options, verdicts, tensor=True)

    @classmethod
    def _item(cls, path: Path, key: Any, item: dict[str, Any], sizes: dict[str, int | None],
              short_files: set[str], report: CheckpointReport, name: str | None,
              expect: tuple[str | None, tuple[int, ...]] | None, options: ProbeOptions,
              verdicts: list[Verdict], *, tensor: bool) -> None:
        rel, off, length = item["file"], item["offset"], item["length"]
        fpath = path / rel
        label = name or key[0]
        if sizes.get(rel) is None:
            if tensor:
                dtype, sz = expect or (None, None)
                report.tensors.append(TensorRecord(name=label, dtype=dtype, shape=sz,
                                                   file=str(fpath), offset=off, length=length,
                                                   status="missing",
                                                   reasons=[f"{rel} missing"]))
            return
        fsize = sizes[rel] or 0
        if not isinstance(off, int) or not isinstance(length, int):
            return
        if off + length > fsize:
            if rel not in short_files:
                short_files.add(rel)
                report.findings.append(finding(
                    "DC004", f"{rel} is {fsize} bytes; its items need at least "
                    f"{off + length}", evidence=str(fpath), offset=fsize))
            if tensor:
                dtype, sz = expect or (None, None)
                lost = off >= fsize
                report.tensors.append(TensorRecord(
                    name=label, dtype=dtype, shape=sz, file=str(fpath), offset=off,
                    length=length, status="missing" if lost else "truncated",
                    reasons=[f"{rel} ends {'before' if lost else 'inside'} this item"]))
            return
        with open_regular(fpath) as fh:
            part = probe_zip(fh, str(fpath), start=off, end=off + length,
                             do_numeric=options.numeric and tensor, name_prefix=label)
        if part.unsafe_globals:
            report.findings.extend(f for f in part.findings if f.code == "PK001")
            verdicts.append(Verdict.UNSAFE)
        bad = [f for f in part.findings if f.severity in ("error", "critical")
               and f.code != "PK001"]
        if bad:
            report.findings.append(finding(
                "DC007", f"{label} ({rel} @ {off}): " + "; ".join(f.title for f in bad[:3]),
                evidence=str(fpath), offset=off, length=length, tensors=[label]))
            verdicts.append(Verdict.DAMAGED)
        report.findings.extend(f for f in part.findings if f.code.startswith("NM"))
        if not tensor:
            return
        recs = list(part.tensors)
        if not recs:
            dtype, sz = expect or (None, None)
            report.tensors.append(TensorRecord(name=label, dtype=dtype, shape=sz,
                                               file=str(fpath), offset=off, length=length,
                                               status="damaged",
                                               reasons=["item holds no readable tensor"]))
            return
        for t in recs[:1]:
            t.name = label
            t.storage = f"{rel}@{off}"
            if expect is not None and t.shape is not None and tuple(t.shape) != expect[1]:
                t.status = "damaged"
                t.reasons.append(f"item shape {list(t.shape)} != chunk {list(expect[1])}")
            if label in part.strides or "" in part.strides:
                report.extra.setdefault("strides", {})[label] = \
                    part.strides.get(label) or part.strides.get("")
            report.tensors.append(t)


FORMATS = [DcpFormat]


def _metadata_file(path: Path, files: list[Path], report: CheckpointReport) -> Path | None:
    """``.metadata`` (or a rank-local ``__N.metadata``); None when the save never finished
    (the report says so)."""
    meta_path = path / ".metadata"
    if meta_path.is_file():
        return meta_path
    local = sorted(path.glob("__*.metadata"))
    if local:
        return local[0]
    report.findings.append(finding(
        "DC001", ".metadata missing: the save never finished (data files: "
        + ", ".join(p.name for p in files if p.suffix == ".distcp") + ")",
        evidence=report.path))
    report.verdict = Verdict.INCOMPLETE
    return None


def _judge_metadata(scan: pickle_scan.PickleScan, meta_path: Path, report: CheckpointReport,
                    options: ProbeOptions) -> list[Verdict]:
    """The globals of ``.metadata``. DCP's reader unpickles it with pickle.load (no
    weights_only): it resolves and calls every global, so one off the exact list is unsafe; a
    name one edit from a listed one is a damaged name it cannot resolve (unreadable). Globals
    named before a parse error count: the unpickler resolved them before it stopped.
    ``builtins.getattr`` is the exception where its every call looks up a member of a listed
    enum by name (how Python 3.11.0-x pickled enum members; pickle_policy.ENUM_MEMBERS)."""
    verdicts = []
    members = scan.getattr_only_for_members()  # enum members pickled by name (Python 3.11.0-x)
    off_list = scan.unsafe_globals(lambda g: _allowed(g) or pickle_policy.extra_allowed(
        g, options.extra_allowed) or (members and g == "builtins.getattr"))
    if members:
        report.extra["member_lookups"] = sorted(set(scan.member_lookups))
    unsafe, damaged = pickle_policy.resolved_off_list(off_list, scan.dotted)
    unsafe += [f"copyreg._extension_registry[{c}]" for c in scan.ext_codes]
    report.extra["unsafe_globals"] = unsafe
    report.extra["unknown_globals"] = list(damaged)
    if unsafe:
        report.findings.append(finding(
            "PK001", f"{meta_path.name} references globals outside the exact DCP list "
            "(DCP's reader resolves and calls them: it unpickles without weights_only): "
            + ", ".join(unsafe), evidence=str(meta_path), details={"globals": unsafe}))
        verdicts.append(Verdict.UNSAFE)
    if scan.rewrites:
        report.findings.append(finding(
            "PK010", f"{meta_path.name} rewrites attributes of "
            + ", ".join(sorted(set(scan.rewrites))), evidence=str(meta_path)))
        verdicts.append(Verdict.UNSAFE)
    if scan.frame_violations:
        report.findings.append(finding(
            "PK005", f"{meta_path.name}: {scan.frame_violations[0][1]}",
            evidence=str(meta_path), offset=scan.frame_violations[0][0]))
        verdicts.append(Verdict.UNSAFE)
    if damaged:
        report.findings.append(finding(
            "PK004", f"{meta_path.name} names " + ", ".join(
                f"{g} (one edit from {n})" for g, n in damaged.items())
            + ": a damaged name DCP's reader cannot resolve (the load fails)",
            evidence=str(meta_path), details={"globals": list(damaged)}))
        verdicts.append(Verdict.UNREADABLE)
    return verdicts


def _metadata_state(scan: pickle_scan.PickleScan, meta_path: Path, report: CheckpointReport,
                    verdicts: list[Verdict]) -> dict[Any, Any] | None:
    """The Metadata object's state; None when ``.metadata`` is unreadable or not DCP
    Metadata (the report's verdict then set)."""
    if scan.error:
        report.findings.append(finding("DC002", f"{meta_path.name} unreadable at byte "
                                       f"{scan.error_position}: {scan.error}",
                                       evidence=str(meta_path), offset=scan.error_position))
        report.verdict = worst_verdict([Verdict.INCOMPLETE, *verdicts])
        return None
    root = scan.root
    state = root.state if isinstance(root, pickle_scan.Call) else None
    if not isinstance(state, dict) or not isinstance(state.get("state_dict_metadata"), dict):
        report.findings.append(finding("DC002", f"{meta_path.name} is not DCP Metadata",
                                       evidence=str(meta_path)))
        report.verdict = worst_verdict([Verdict.INCOMPLETE, *verdicts])
        return None
    wrong = dcp_metadata_rules.problems(root)
    if wrong:
        report.findings.append(finding(
            "DC008", f"{meta_path.name} parses but does not load as saved: "
            + "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3
                                      else ""), evidence=str(meta_path),
            details={"problems": wrong}))
        verdicts.append(Verdict.UNREADABLE)
    return state


def _storage_items(storage_data: dict[Any, Any]
                   ) -> dict[tuple[str, tuple[int, ...] | None], dict[str, Any]]:
    """(fqn, chunk offset) -> where its bytes are: file, offset, length."""
    items: dict[tuple[str, tuple[int, ...] | None], dict[str, Any]] = {}
    for idx, info in storage_data.items():
        if not isinstance(idx, pickle_scan.Call) or not isinstance(info, pickle_scan.Call):
            continue
        items[(str(idx.attr("fqn")), _tuple(idx.attr("offset")))] = {
            "file": str(info.attr("relative_path")), "offset": info.attr("offset"),
            "length": info.attr("length")}
    return items


def _data_files(path: Path, files: list[Path], items: dict[Any, dict[str, Any]],
                report: CheckpointReport, verdicts: list[Verdict]) -> dict[str, int | None]:
    """The size of each data file the metadata references (None: missing); the ``.distcp``
    files nothing references (orphans)."""
    referenced = {it["file"] for it in items.values()}
    sizes: dict[str, int | None] = {}
    for rel in sorted(referenced):
        p = path / rel
        sizes[rel] = p.stat().st_size if p.is_file() else None
        if sizes[rel] is None:
            report.findings.append(finding("DC003", f"data file {rel} is missing",
                                           evidence=str(p)))
            verdicts.append(Verdict.INCOMPLETE)
    for p in files:
        if p.suffix == ".distcp" and p.name not in referenced:
            report.findings.append(finding("DC006", f"{p.name} is not referenced by "
                                           ".metadata (orphan)", evidence=str(p)))
    return sizes
