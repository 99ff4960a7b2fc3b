"""``extract``: copy out only the intact checkpoints of a read-only mount, with companions.

Every checkpoint under the mount is found and probed by ``probes.checkpoints.probe_paths`` (all
formats the kit knows, static inspection only). Checkpoints whose verdict is ``intact`` are copied
— every file of the checkpoint (``CheckpointReport.files``: shards, index, data files) plus the
companion files next to it (configs, tokenizer files, index files, the TensorFlow ``checkpoint``
state file) — into ``to``, keeping their paths relative to the mount, and re-hashed on both
sides. Everything else is listed as left behind with its verdict.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects import beneath
from ckptrescue.effects.output_dirs import refuse_aliasing
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.storage.copy import sha256_stream

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

COMPANION_PATTERNS = (
    "config.json", "*config*.json", "generation_config.json", "tokenizer*", "special_tokens_map.json",
    "vocab.*", "merges.txt", "*.model", "added_tokens.json", "preprocessor_config.json",
    "*.index.json", "checkpoint", "trainer_state.json", "README.md", "*.yaml", "*.yml",
)


@dataclass
class Extracted:
    checkpoint: str
    format: str
    files: list[dict[str, str]]  # {"path": rel, "sha256": hex}

    def to_json(self) -> JsonObject:
        return {"checkpoint": self.checkpoint, "format": self.format, "files": self.files}


@dataclass
class ExtractResult(Recorded):
    mountpoint: str
    to: str
    extracted: list[Extracted] = field(default_factory=list)
    left_behind: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"mountpoint": self.mountpoint, "to": self.to,
                "extracted": [e.to_json() for e in self.extracted],
                "left_behind": self.left_behind,
                "findings": [f.to_json() for f in self.findings]}


def companions(files: list[Path]) -> list[Path]:
    """Companion files beside a checkpoint's files (same directories, known names)."""
    out: set[Path] = set()
    for d in {f.parent for f in files}:
        try:
            entries = list(d.iterdir())
        except OSError:
            continue
        for e in entries:
            if e.is_file() and not e.is_symlink() and any(
                    fnmatch.fnmatch(e.name, pat) for pat in COMPANION_PATTERNS):
                out.add(e)
    return sorted(out - set(files))


def _copy(src: Path, dst: Path, dest_root: Path) -> str:
    """Stream-copy, hashing what is written; returns the SHA-256 of the bytes written. ``dst``
    is opened beneath ``dest_root`` (no symlink or '..' below it is followed)."""
    import hashlib

    h = hashlib.sha256()
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOATIME", 0) | os.O_NOFOLLOW)
    try:
        # the copy's name appears only once it is whole: a full disk or a read error of the
        # source leaves nothing that looks extracted
        with beneath.creating(dest_root, dst) as out:
            while block := os.read(fd, 1 << 20):
                out.write(block)
                h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def extract(mountpoint: str | Path, to: str | Path, *, case: Case) -> ExtractResult:
    from ckptrescue.checkpoints.base import Verdict
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    root = Path(mountpoint).resolve()
    dest = Path(to).resolve()
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory (give the mount point)")
    if dest == root or str(dest).startswith(str(root) + "/"):
        raise UsageError(f"{dest} is inside the source {root}")
    # by identity and place: a symlink, a bind mount or an overlay layer reaching evidence
    refuse_aliasing(to, evidence=case.evidence_paths(), protected=case.protected_paths())
    from ckptrescue.storage import writeblock

    writeblock.protect_mount_source(root, case, purpose="extract source")
    beneath.makedirs(dest, dest)
    reports = probe_paths([root], case=case)
    result = ExtractResult(str(root), str(dest))
    done: set[Path] = set()
    for rep in reports:
        rel = os.path.relpath(rep.path, root)
        if rep.verdict is not Verdict.INTACT:
            result.left_behind.append({"checkpoint": rel, "format": rep.format,
                                       "verdict": str(rep.verdict),
                                       "damaged_tensors": rep.damaged_tensors[:50]})
            result.findings.append(Finding("EX002", Severity.WARNING, f"{rel} left behind: "
                                           f"{rep.verdict}", evidence=rep.path, source="extract"))
            continue
        own = [Path(f) for f in (rep.files or [rep.path]) if Path(f).is_file()]
        files = []
        for src in own + companions(own):
            if src in done:
                continue
            done.add(src)
            relf = src.relative_to(root)
            written = _copy(src, dest / relf, dest)
            again_src, again_dst = sha256_stream(src), sha256_stream(dest / relf)
            if not written == again_src == again_dst:
                result.findings.append(Finding("EX003", Severity.ERROR, f"{relf}: copy does not "
                                               "hash like its source", evidence=str(src),
                                               source="extract"))
            files.append({"path": str(relf), "sha256": again_dst})
        result.extracted.append(Extracted(rel, rep.format, files))
        result.findings.append(Finding("EX001", Severity.INFO, f"{rel} ({rep.format}) extracted "
                                       f"with {len(files) - len(own)} companion file(s)",
                                       evidence=rep.path, source="extract"))
    result.findings_here()  # the engine records the findings, then the summary
    result.record("extract.finished",
                  {k: v for k, v in result.to_json().items() if k != "findings"})
    return result
