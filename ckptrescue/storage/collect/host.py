"""What ``collect.logs`` gathers beyond dmesg: a plan of read-only tool runs and log files.

``tool_calls(window, slurm_jobs, k8s)`` — argv lists, each allowed by the guard
(``guard/tools/logs.py``, ``guard/tools/cluster.py``); tools that are not installed are
skipped by the caller. ``read_logs(paths)`` — the tail (``MAX_LOG_BYTES``) of each readable log
file, as artifact data named by the file (kind ``log:<name>``, or ``cloudtrail`` for a raw
CloudTrail file), with what was read recorded (size, offset, truncated), never modifying the
file (opened read-only, ``O_NOATIME`` where allowed).
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.effects.files import open_read_only
from ckptrescue.model import ArtifactData, JsonObject

MAX_LOG_BYTES = 64 * 1024 * 1024
SYSTEM_LOGS = ("/var/log/messages", "/var/log/syslog", "/var/log/kern.log",
               "/var/log/slurm/slurmd.log", "/var/log/slurmd.log", "/var/log/slurm/slurmctld.log")
JOURNAL_LINES = "200000"


@dataclass(frozen=True)
class Window:
    """The time window around the incident (journalctl ``--since``/``--until`` syntax)."""

    since: str | None = None
    until: str | None = None


@dataclass(frozen=True)
class Kube:
    namespace: str
    pods: tuple[str, ...] = ()
    context: str | None = None


def tool_calls(window: Window = Window(), slurm_jobs: Iterable[str] = (),
               k8s: Kube | None = None, *, journal: bool = True) -> list[tuple[str, ...]]:
    """The read-only runs for the incident (argv tuples, in order)."""
    calls: list[tuple[str, ...]] = [("dmesg", "-x", "--time-format", "iso")]
    if journal:
        span = tuple(a for pair in (("--since", window.since), ("--until", window.until))
                     if pair[1] for a in pair)
        calls.append(("journalctl", "-k", "-o", "json", "--no-pager", "-n", "20000", *span))
        if span:  # the whole journal (all units) for the window, not only the kernel
            calls.append(("journalctl", "-o", "json", "--no-pager", "-n", JOURNAL_LINES, *span))
    for job in slurm_jobs:
        calls += [("sacct", "-j", job, "-P", "--format=JobID,JobName,State,ExitCode,Start,End,"
                   "Elapsed,NodeList,Reason"),
                  ("scontrol", "-o", "show", "job", job)]
    if slurm_jobs:
        calls.append(("scontrol", "-o", "show", "node"))
    if k8s is not None:
        ctx = ("--context", k8s.context) if k8s.context else ()
        calls.append(("kubectl", *ctx, "-n", k8s.namespace, "get", "events", "-o", "json"))
        for pod in k8s.pods:
            calls += [("kubectl", *ctx, "-n", k8s.namespace, "describe", "pod", pod),
                      ("kubectl", *ctx, "-n", k8s.namespace, "logs", pod, "--all-containers",
                       "--timestamps", "--tail=100000"),
                      ("kubectl", *ctx, "-n", k8s.namespace, "logs", pod, "--all-containers",
                       "--timestamps", "--previous", "--tail=100000")]
    return calls


@dataclass
class LogRead:
    path: str
    kind: str
    size: int = 0
    offset: int = 0
    read: int = 0
    truncated: bool = False
    sha256: str | None = None
    error: str | None = None
    data: ArtifactData | None = field(default=None, repr=False)

    def to_json(self) -> JsonObject:
        return {"path": self.path, "kind": self.kind, "size": self.size, "offset": self.offset,
                "read": self.read, "truncated": self.truncated, "sha256": self.sha256,
                "error": self.error}


def _is_cloudtrail(path: str, head: bytes) -> bool:
    text = head[:4096]
    if text[:2] == b"\x1f\x8b":
        try:
            text = gzip.GzipFile(fileobj=io.BytesIO(head)).read(4096)
        except (OSError, EOFError):
            text = b""
        if not text:
            return "cloudtrail" in path.lower()
    return b'"Records"' in text and (b"eventSource" in text or b"eventName" in text)


def read_logs(paths: Iterable[str], *, max_bytes: int = MAX_LOG_BYTES) -> list[LogRead]:
    """The tail of each log file (missing files are skipped silently when they are system
    defaults, reported when they were asked for)."""
    out: list[LogRead] = []
    for path in dict.fromkeys(paths):
        name = os.path.basename(path.rstrip("/")) or path
        entry = LogRead(path=path, kind=f"log:{name}")
        try:
            fd = open_read_only(path, os.O_NONBLOCK)
        except FileNotFoundError:
            if path not in SYSTEM_LOGS:
                entry.error = "no such file"
                out.append(entry)
            continue
        except OSError as exc:
            entry.error = exc.strerror or str(exc)
            out.append(entry)
            continue
        try:
            import stat

            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                entry.error = "not a regular file"
                out.append(entry)
                continue
            entry.size = st.st_size
            entry.offset = max(0, st.st_size - max_bytes)
            entry.truncated = entry.offset > 0
            head = os.pread(fd, 65536, 0)  # what the file is: judged from its start
            chunks: list[bytes] = []
            pos = entry.offset
            while pos < st.st_size:
                block = os.pread(fd, min(1 << 20, st.st_size - pos), pos)
                if not block:
                    break
                chunks.append(block)
                pos += len(block)
            data = b"".join(chunks)
        finally:
            os.close(fd)
        entry.read = len(data)
        if _is_cloudtrail(path, head):
            entry.kind = "cloudtrail"
        entry.data = ArtifactData.of_bytes(data, name=name, kind=entry.kind)
        entry.sha256 = entry.data.sha256
        out.append(entry)
    return out


def default_logs(extra: Iterable[str] = ()) -> list[str]:
    return [*SYSTEM_LOGS, *(str(Path(p)) for p in extra)]
