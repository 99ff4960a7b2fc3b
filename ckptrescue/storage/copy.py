"""``copy``: read-only copy of a mounted filesystem onto other media, hashed and verified.

rsync form (reference §2): ``rsync -aHAXS --numeric-ids -x --open-noatime -i --log-file=L SRC/
DST/`` (``-a`` lacks hard links, ACLs and xattrs; ``-x`` stays on one filesystem;
``--open-noatime`` avoids atime updates; ``--read-only`` is not a client option). Then an
independent SHA-256 manifest of both sides (sha256sum format) and a verify pass
``rsync -aHAXS --numeric-ids -x -c -n -i SRC/ DST/`` whose empty output means identical.
The strongest source is a ``ro,norecovery``/``ro,noload`` mount of a read-only device
(``ckptrescue mount``); a read-write source is copied with a warning finding.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.effects import output_dirs
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import RefusedError, ToolFailedError, UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.storage import filesystem, netfs, samedisk, sysfs, walk, writeblock
from ckptrescue.storage.filesystem import CopySources

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

RSYNC_FLAGS = ("-aHAXS", "--numeric-ids", "-x")


@dataclass
class CopyResult(Recorded):
    source: str
    dest: str
    files: int
    bytes: int
    manifest_sha256: str
    verified: bool
    differences: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    source_readonly: bool = True
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"source": self.source, "dest": self.dest, "files": self.files,
                "bytes": self.bytes, "manifest_sha256": self.manifest_sha256,
                "verified": self.verified, "differences": self.differences,
                "unreadable": self.unreadable, "source_readonly": self.source_readonly,
                "findings": [f.to_json() for f in self.findings]}


def sha256_stream(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOATIME", 0) | os.O_NOFOLLOW)
    try:
        while block := os.read(fd, 1 << 20):
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def manifest(root: Path, devs: set[int] | None = None) -> dict[str, str]:
    """relative path -> SHA-256 for every regular file on ``root``'s filesystem (or on any of
    the filesystems ``devs``: the datasets of a ZFS pool mounted below ``root``)."""
    out: dict[str, str] = {}
    for p, _st in walk.regular_files(root, devs, sort=True):
        try:
            out[str(p.relative_to(root))] = sha256_stream(p)
        except OSError as exc:
            out[str(p.relative_to(root))] = f"unreadable: {exc.strerror}"
    return out


def render_manifest(m: dict[str, str]) -> bytes:
    return "".join(f"{h}  ./{p}\n" for p, h in sorted(m.items())).encode()


def copy_sources(case: Case, src: Path) -> CopySources:
    """What to copy for the mount point ``src``: a registered filesystem's own answer (the
    datasets of a ZFS pool the case imported), else ``src``'s one filesystem."""
    for fs in filesystem.registry():
        own = fs.copy_sources(case, src)
        if own is not None:
            return own
    return CopySources(media=[str(src)], mounted=[src], left_out=[], one_filesystem=True)


def copy_tree(mountpoint: str | Path, *, case: Case, dest: str | Path | None = None,
              runner: SubprocessRunner | None = None) -> CopyResult:
    src = Path(os.path.realpath(mountpoint))
    if not src.is_dir():
        raise UsageError(f"{src}: not a directory (give the mount point)")
    dst = Path(dest) if dest is not None else case.root / "copies" / (src.name or "root")
    if os.path.realpath(dst).startswith(os.path.realpath(src).rstrip("/") + "/"):
        raise UsageError(f"{dst} is inside the source {src}")
    output_dirs.claim(case, dst, purpose="copy destination")
    sources = copy_sources(case, src)
    netfs_findings: list[Finding] = []
    for m in sources.media:
        cmp = samedisk.compare(m, dst)
        case.log("copy.samedisk", {"source": m, "dest": str(dst), **cmp.to_json()})
        if cmp.verdict is samedisk.Sameness.UNKNOWN:
            # no physical disk to name: which storage (NFS export, Lustre fsname, FUSE daemon, ...)
            net = netfs.compare(m, dst)
            if net.source.network or net.dest.network:
                case.log("copy.samestorage", {"source": m, "dest": str(dst), **net.to_json()})
                if net.verdict is not samedisk.Sameness.DIFFERENT:
                    raise RefusedError(f"copy destination {dst} could be the same storage as "
                                       f"{m}: {net.verdict} ({net.reason})",
                                       hint="choose --dest on storage that is provably "
                                       "elsewhere (a local disk, another server or filesystem)")
                netfs_findings.append(Finding(
                    "NF004", Severity.INFO, f"{m} is on {net.source.describe()}; the "
                    f"destination is other storage: {net.reason}", evidence=str(src),
                    source="copy", details=net.to_json()))
                continue
        if cmp.verdict is not samedisk.Sameness.DIFFERENT:
            raise RefusedError(f"copy destination {dst} must be on other media than {m}: "
                               f"{cmp.verdict} ({cmp.reason})",
                               hint="choose --dest on another disk")
    mounted, left_out = sources.mounted, sources.left_out
    if not mounted:
        raise UsageError(sources.nothing_mounted, hint=sources.nothing_hint)
    devs = None if sources.one_filesystem else {p.stat().st_dev for p in mounted}
    need = 0
    for p in mounted:
        sv = os.statvfs(p)
        need += (sv.f_blocks - sv.f_bfree) * sv.f_frsize
    dv = os.statvfs(dst)
    free = dv.f_bavail * dv.f_frsize
    if free < need:
        raise RefusedError(f"destination {dst} has {free} bytes free; the source uses {need}")
    entries = [sysfs.mount_of(p) for p in mounted]
    for p in mounted:  # the devices under a ZFS pool's datasets were write-blocked by `mount`
        writeblock.protect_mount_source(p, case, purpose="copy source")
    findings: list[Finding] = list(netfs_findings)
    if left_out:
        findings.append(Finding("CP005", Severity.WARNING, f"{len(left_out)} dataset(s) of the "
                                "pool are not mounted and are not in the copy: "
                                + ", ".join(left_out), evidence=str(src), source="copy"))
    ro = bool(entries) and all(e is not None and e.readonly for e in entries)
    if not ro:
        findings.append(Finding("CP001", Severity.WARNING, f"{src} is mounted read-write: files "
                                "may change during the copy; freeze writers (triage) or copy "
                                "from a `ckptrescue mount`", evidence=str(src), source="copy"))
    if os.path.realpath(src) not in {os.path.realpath(p) for p in case.evidence_paths()}:
        case.add_evidence(kind="mount", source=str(src), acquired_how="copy source (read-only)",
                          details={"readonly_mount": ro})
    runner = runner or SubprocessRunner(case)
    log = output_dirs.claim(case, tempfile.mkdtemp(prefix="rsync-log-", dir=case.work_dir),
                            purpose="rsync log") / "rsync.log"
    flags = tuple(f for f in RSYNC_FLAGS if sources.one_filesystem or f != "-x")
    argv = ("rsync", *flags, "--open-noatime", "-i", f"--log-file={log}",
            f"{src}/", f"{dst}/")
    res = runner.run(ToolCall(argv=argv, timeout_s=7 * 24 * 3600, purpose="read-only copy"))
    if res.refused:
        raise RefusedError(f"rsync refused: {res.refused}")
    if log.exists():
        case.store_artifact_file(log, name="rsync.log", kind="rsync-log")
    unreadable = [ln for ln in res.stderr.splitlines() if "failed" in ln or "error" in ln]
    if res.returncode not in (0, 23, 24):
        raise ToolFailedError(f"rsync exited {res.returncode}: "
                              f"{(res.stderr.strip().splitlines() or [''])[-1]}")
    src_m, dst_m = manifest(src, devs), manifest(dst)
    man_sha = case.store_artifact(render_manifest(src_m), name="source.sha256",
                                  kind="sha256-manifest")
    case.store_artifact(render_manifest(dst_m), name="copy.sha256", kind="sha256-manifest")
    ver = runner.run(ToolCall(argv=("rsync", *flags, "-c", "-n", "-i", f"{src}/",
                                    f"{dst}/"), timeout_s=7 * 24 * 3600,
                              purpose="verify pass (checksums, dry run)"))
    diffs = [ln for ln in ver.stdout.splitlines() if ln.strip()]
    diffs += [f"sha256 differs: {p}" for p in sorted(src_m) if src_m[p] != dst_m.get(p)]
    verified = ver.returncode == 0 and not diffs and res.returncode == 0
    if unreadable or res.returncode in (23, 24):
        findings.append(Finding("CP004", Severity.ERROR, f"rsync could not copy everything (rc "
                                f"{res.returncode})", evidence=str(src), source="copy",
                                details={"stderr": unreadable[:100]}))
    if diffs:
        findings.append(Finding("CP002", Severity.ERROR, f"{len(diffs)} difference(s) between "
                                f"{src} and {dst}", evidence=str(dst), source="copy",
                                details={"differences": diffs[:200]}))
    elif verified:
        findings.append(Finding("CP003", Severity.INFO, f"copy of {src} verified ({len(src_m)} "
                                "files)", evidence=str(dst), evidence_sha256=man_sha,
                                source="copy"))
    total = sum((src / p).lstat().st_size for p in src_m)
    case.add_evidence(kind="directory", source=str(dst), acquired_how="rsync "
                      + " ".join(flags) + " --open-noatime from " + str(src), size=total,
                      sha256=man_sha, details={"from": str(src), "files": len(src_m),
                                               "verified": verified})
    result = CopyResult(str(src), str(dst), len(src_m), total, man_sha, verified, diffs,
                        unreadable, ro, findings)
    result.findings_here()  # the engine records the findings, then the summary
    result.record("copy.finished", {k: v for k, v in result.to_json().items() if k != "findings"})
    return result
