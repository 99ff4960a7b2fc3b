"""``triage``: who is writing to the affected volume right now, and what to stop (never kills).

* processes with files open for writing under the volume (psutil ``open_files`` modes w/a/r+/a+),
  and every process's write rate over ``seconds`` (``io_counters().write_bytes`` deltas);
* classification: training jobs (torchrun, deepspeed, accelerate, horovod, python with
  libtorch / TensorFlow mapped), backup/sync agents (rsync, rclone, restic, borg, aws s3 sync,
  gsutil, azcopy, ...), orchestration (kubelet, containerd-shim, slurmstepd, raylet, ...);
* kernel log scan (``dmesg -x --time-format iso``: read-only; ``-c``/``-C`` are refused by the
  guard) for I/O errors, filesystem corruption (each registered filesystem's patterns:
  XFS, ext4) and NVMe errors;
* the freeze checklist.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.storage import sysfs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

WRITE_MODES = {"w", "a", "r+", "a+", "w+"}
TRAINING_WORDS = ("torchrun", "deepspeed", "accelerate", "horovodrun", "torch.distributed",
                  "lightning", "megatron", "colossalai", "composer")
TRAINING_LIBS = ("libtorch", "_pywrap_tensorflow", "libtensorflow", "libjax", "xla_extension")
SYNC_AGENTS = {"rsync", "rclone", "restic", "borg", "duplicity", "rdiff-backup", "gsutil",
               "azcopy", "s3cmd", "s5cmd", "syncthing", "unison", "lsyncd", "rsnapshot",
               "bacula-fd", "bareos-fd", "veeamagent", "duplicati", "kopia", "mc", "juicesync"}
ORCHESTRATION = {"kubelet", "containerd-shim", "containerd-shim-runc-v2", "dockerd", "containerd",
                 "slurmstepd", "slurmd", "raylet", "gcs_server", "nomad", "airflow", "mlflow",
                 "crond", "cron", "systemd-tmpfiles", "snapd"}
# kernel log patterns, tried in order (the first that matches classifies a line): block I/O, then
# each registered filesystem's own (``storage/filesystems/``: xfs, ext4, ...), then NVMe
IO_PATTERN = ("io", re.compile(r"I/O error|blk_update_request|critical medium error|Buffer I/O "
                               r"error|Medium Error|Unrecovered read error|UNC\b|failed command: "
                               r"READ", re.IGNORECASE))
NVME_PATTERN = ("nvme", re.compile(r"nvme\d+.*(timeout|I/O error|reset|failed|critical|Abort)",
                                   re.IGNORECASE))


def kernel_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """(kind, pattern) in the order they are tried."""
    from ckptrescue.storage import filesystem

    return [IO_PATTERN, *filesystem.kernel_patterns(), NVME_PATTERN]


def __getattr__(name: str) -> Any:
    if name == "KERNEL_PATTERNS":  # compatibility
        return kernel_patterns()
    raise AttributeError(name)


FREEZE_CHECKLIST = [
    "Isolate the node from the network, keep it powered: cordon or drain it from the scheduler "
    "and cut its network (switch port, security group) so no job, sync or remote hand writes "
    "to it; do not power it off or reboot (volatile state and a failing disk's last spin-up "
    "are lost).",
    "Stop the writers listed here (training jobs first, then sync/backup agents): pause or "
    "cancel them through their scheduler; do not kill -9 a job that is mid-checkpoint unless "
    "you accept a torn file.",
    "Suspend sync and backup schedules (rclone/rsync/restic crons, aws s3 sync jobs, lifecycle "
    "rules) so that damaged files are not propagated over good copies.",
    "Stop orchestration from restarting jobs (scale to zero, hold the Slurm job, cordon the "
    "node) so nothing resumes from a damaged checkpoint.",
    "Do not restart services, reboot, remount read-write, run fsck/xfs_repair, or drop caches.",
    "Do not delete or rewrite checkpoints; write nothing to the affected volume.",
    "Preserve first: `ckptrescue image` (block device) or `ckptrescue copy` (mounted volume) "
    "onto separate media, before any diagnostic (SMART/NVMe health reads too), then inspect "
    "read-only.",
]


@dataclass
class ProcessInfo:
    pid: int
    name: str
    cmdline: list[str]
    user: str | None
    kind: str  # training, sync, orchestration, other
    open_for_write: list[str] = field(default_factory=list)
    write_rate_bps: float | None = None
    cwd_on_volume: bool = False

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass
class TriageResult(Recorded):
    volume: str | None
    seconds: float
    processes: list[ProcessInfo]
    kernel_messages: list[dict[str, str]]
    checklist: list[str]
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"volume": self.volume, "seconds": self.seconds,
                "processes": [p.to_json() for p in self.processes],
                "writers": [p.pid for p in self.processes if p.open_for_write],
                "kernel_messages": self.kernel_messages, "checklist": self.checklist,
                "findings": [f.to_json() for f in self.findings], "notes": self.notes}


def classify(name: str, cmdline: list[str], maps_text: str = "") -> str:
    """training, sync, orchestration or other (pure)."""
    joined = " ".join(cmdline)
    base = os.path.basename(cmdline[0]) if cmdline else name
    if any(w in joined for w in TRAINING_WORDS) or any(lib in maps_text for lib in TRAINING_LIBS):
        return "training"
    if base in SYNC_AGENTS or name in SYNC_AGENTS:
        return "sync"
    if base == "aws" and len(cmdline) > 2 and cmdline[1] == "s3" and cmdline[2] in {"sync", "cp",
                                                                                     "mv"}:
        return "sync"
    if base in {"gcloud"} and "storage" in cmdline:
        return "sync"
    if base in ORCHESTRATION or name in ORCHESTRATION or name.startswith("containerd-shim"):
        return "orchestration"
    return "other"


def volume_roots(volume: str) -> list[str]:
    """The paths a volume is reached by: itself, and for a block device the mount points of
    every filesystem on it (its partitions, and the device-mapper/loop devices above it)."""
    import stat as stat_mod

    from ckptrescue.storage import sysfs

    try:
        is_device = stat_mod.S_ISBLK(os.stat(volume).st_mode)
    except OSError:
        return [volume]
    if not is_device:
        return [volume]
    try:
        disk = sysfs.parent_disk(sysfs.dev_name(volume))
    except (OSError, ValueError):
        return [volume]
    roots = [volume]
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return roots
    for line in mounts:
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith("/dev/"):
            continue
        try:
            name = sysfs.dev_name(parts[0])
            on_disk = sysfs.parent_disk(name) == disk or disk in _below(name)
        except (OSError, ValueError, AttributeError):
            continue
        if on_disk:
            roots.append(parts[1].replace("\\040", " "))
    return roots


def _below(name: str, depth: int = 0) -> set[str]:
    """The whole disks under a device-mapper/loop/md device (its slaves, recursively)."""
    from ckptrescue.storage import sysfs

    out: set[str] = set()
    if depth > 8:
        return out
    for slave in sysfs.slaves(name):
        out.add(sysfs.parent_disk(slave))
        out |= _below(slave, depth + 1)
    return out


def _under(path: str, volume: str | None) -> bool:
    if volume is None:
        return not path.startswith(("/proc/", "/sys/", "/dev/"))
    return path == volume or path.startswith(volume.rstrip("/") + "/")


LOOP_ATTACHED = re.compile(r"(?<![\w-])(loop\d+): detected capacity change from 0 to [1-9]")
_LOOP_NAMED = re.compile(r"(?<![\w-])(loop\d+)(?:p\d+)?(?![\w-])")
# block/genhd.c set_capacity_and_notify: pr_info_ratelimited, one rate limit for every device
# (DEFAULT_RATELIMIT_INTERVAL 5 s, DEFAULT_RATELIMIT_BURST 10); what it dropped is counted in a
# "callbacks suppressed" line printed with the next message that gets through
CAPACITY_CHANGE = re.compile(r"(?<![\w-])[\w-]+: detected capacity change from \d+ to \d+")
_CAPACITY_SUPPRESSED = re.compile(r"set_capacity_and_notify: \d+ callbacks suppressed")
RATELIMIT_BURST, RATELIMIT_INTERVAL_S = 10, 5.0
RATELIMIT_SLACK_S = 1.0  # the log's times are converted from the kernel's clock
_LOG_TIME = re.compile(r"\b(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](\d{1,9}))?")


def _log_seconds(line: str) -> float | None:
    """The time of a ``dmesg --time-format iso`` / ``journalctl -o short-iso`` line, in seconds
    (None when it has none)."""
    m = _LOG_TIME.search(line)
    if m is None:
        return None
    try:
        whole = datetime.fromisoformat(m[1]).timestamp()
    except ValueError:
        return None
    return whole + (int(m[2]) / 10 ** len(m[2]) if m[2] else 0.0)


def rate_limit_mark(line: str) -> str:
    """``"change"`` for a capacity-change line, ``"notice"`` for its "callbacks suppressed"
    line, ``""`` for any other."""
    if _CAPACITY_SUPPRESSED.search(line):
        return "notice"
    return "change" if CAPACITY_CHANGE.search(line) else ""


def spent_windows(marks: list[tuple[float | None, str]]) -> list[tuple[int, float]]:
    """The rate limit's windows in which the kernel may have dropped capacity-change lines, as
    (index of the window's 10th printed line, time the window ended), from each line's time and
    :func:`rate_limit_mark`. A window that printed 10 within 5 s was spent; it dropped nothing
    when the next capacity change after it was logged without a "callbacks suppressed" line (the
    kernel prints that line with the first message after a window that dropped some). A
    "callbacks suppressed" line after no spent window counts as one ending at it."""
    span = RATELIMIT_INTERVAL_S + RATELIMIT_SLACK_S
    changes = [(i, t) for i, (t, mark) in enumerate(marks) if mark == "change" and t is not None]
    notices = [i for i, (_, mark) in enumerate(marks) if mark == "notice"]
    out: list[tuple[int, float]] = []
    j = 0  # the first change after the window (the log is in time order: it only moves on)
    for k in range(len(changes) - RATELIMIT_BURST + 1):
        (_, first), (last_i, last) = changes[k], changes[k + RATELIMIT_BURST - 1]
        if last - first > span:
            continue
        j = max(j, k + RATELIMIT_BURST)
        while j < len(changes) and changes[j][1] <= first + span:
            j += 1
        nxt = bisect.bisect_right(notices, last_i)
        announced = nxt < len(notices) and (j == len(changes) or notices[nxt] < changes[j][0])
        if j < len(changes) and not announced:
            continue
        out.append((last_i, first + span))
    first_spent = min((last_i for last_i, _ in out), default=len(marks))
    for n in notices:  # a drop announced after no window seen spent (a log without times, or
        if n <= first_spent:  # one missing its lines): lines before it
            t = marks[n][0]
            out.append((n - 1, float("-inf") if t is None else t))
    return out


def attach_lines_may_be_missing(lines: list[str]) -> list[bool]:
    """For each line: whether the kernel may have dropped a capacity-change line (a loop
    device's attach) after it: before the end of a spent window (:func:`spent_windows`)."""
    times = [_log_seconds(line) for line in lines]
    marks = [(t, rate_limit_mark(line)) for t, line in zip(times, lines, strict=True)]
    doubt_before = -1  # lines before this index: an attach after them may be missing
    doubt_until = float("-inf")  # lines logged up to this time: likewise
    for last_i, end in spent_windows(marks):
        doubt_before = max(doubt_before, last_i + 1)
        doubt_until = max(doubt_until, end)
    return [i < doubt_before or (t is not None and t <= doubt_until)
            for i, t in enumerate(times)]


def scan_kernel_log(text: str) -> list[dict[str, str]]:
    """The storage messages of a kernel log, in order. A message about a loop device that was
    attached again after it (``loopN: detected capacity change from 0 to ...``) concerns the
    file an earlier user had behind that number: those devices are listed in
    ``earlier_use_of``, and ``attribute`` does not count the message as the volume's. Where the
    kernel may have dropped attach lines after the message (its rate limit:
    :func:`attach_lines_may_be_missing`), a loop device it names with no attach line after it
    is listed in ``uncertain_use_of``: the message may concern an earlier user's file."""
    lines = text.splitlines()
    last_attach = {m[1]: i for i, line in enumerate(lines) if (m := LOOP_ATTACHED.search(line))}
    missing = attach_lines_may_be_missing(lines)
    out = []
    patterns = kernel_patterns()
    for i, line in enumerate(lines):
        for kind, pat in patterns:
            if pat.search(line):
                msg = {"kind": kind, "line": line.strip()}
                loops = set(_LOOP_NAMED.findall(line))
                earlier = sorted(d for d in loops if last_attach.get(d, -1) > i)
                if earlier:
                    msg["earlier_use_of"] = ",".join(earlier)
                if missing[i] and (unsure := sorted(loops - set(earlier))):
                    msg["uncertain_use_of"] = ",".join(unsure)
                out.append(msg)
                break
    return out


def _loop_of(name: str) -> str | None:
    """``loop1`` of ``loop1`` or ``loop1p2``; None for any other device."""
    m = _LOOP_NAMED.fullmatch(name)
    return m[1] if m else None


def attribute(messages: list[dict[str, str]], names: set[str]) -> None:
    """Mark each kernel message with the block devices of ``names`` it mentions (``devices``);
    a message naming no device at all gets none (it may or may not concern the volume)."""
    if not names:
        return
    pat = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in sorted(names, key=len,
                                                                            reverse=True))
                     + r")(?![\w-])")
    any_dev = re.compile(r"(?<![\w-])(sd[a-z]+\d*|nvme\d+(?:c\d+)?(?:n\d+(?:p\d+)?)?|dm-\d+|"
                         r"md\d+|loop\d+|vd[a-z]+\d*|xvd[a-z]+\d*)(?![\w-])")
    for m in messages:
        earlier = set(filter(None, m.get("earlier_use_of", "").split(",")))
        unsure = set(filter(None, m.get("uncertain_use_of", "").split(",")))
        hits = sorted({h for h in pat.findall(m["line"]) if _loop_of(h) not in earlier})
        m["devices"] = ",".join(hits)
        if any(_loop_of(h) not in unsure for h in hits):
            m["scope"] = "volume"
        elif hits:
            m["scope"] = "uncertain"  # only loop devices whose attach the kernel may have hidden
        else:
            m["scope"] = "other" if any_dev.search(m["line"]) else "unknown"


def volume_device_names(volume: str) -> set[str]:
    """Kernel names of the block devices under the filesystem holding ``volume``: the mounted
    node, its partitions' disk, dm/md slaves (recursively), a loop device's backing filesystem,
    and an NVMe namespace's controller (``nvme0`` of ``nvme0n1``)."""
    entry = sysfs.mount_of(volume)
    if entry is None or not entry.source.startswith("/dev/"):
        return set()
    names: set[str] = set()
    todo = [Path(os.path.realpath(entry.source)).name]
    while todo and len(names) < 64:
        name = todo.pop()
        if name in names or not (sysfs.SYS_BLOCK / name).exists():
            continue
        names.add(name)
        disk = sysfs.parent_disk(name)
        todo.append(disk)
        todo.extend(sysfs.slaves(disk))
        todo.extend(sysfs.partitions(disk))  # same physical disk: its errors concern us too
        if disk.startswith("nvme"):
            names |= nvme_controllers(disk)
        if disk.startswith("loop"):
            backing = sysfs.loop_backing_file(disk)
            if backing and os.path.exists(backing):
                names |= volume_device_names(backing)
    return names


def nvme_controllers(disk: str) -> set[str]:
    """Controllers (``nvmeN``) serving an NVMe namespace disk, from sysfs: its ``device`` is the
    controller, or with native multipath the subsystem, whose controllers are its children.
    (``nvme0n1``'s 0 is the subsystem's instance, not necessarily controller nvme0's.)"""
    dev = sysfs.sys_dir(disk) / "device"
    try:
        real = Path(os.path.realpath(dev))
    except OSError:
        return set()
    if re.fullmatch(r"nvme\d+", real.name):
        return {real.name}
    if real.name.startswith("nvme-subsys"):
        return {p.name for p in real.iterdir() if re.fullmatch(r"nvme\d+", p.name)}
    return set()


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return ""


def triage(*, case: Case, volume: str | Path | None = None, seconds: float = 3.0,
           runner: SubprocessRunner | None = None) -> TriageResult:
    import psutil

    if volume is not None:
        try:
            os.stat(volume)
        except (OSError, ValueError) as exc:  # a mistyped mount point would be answered "0
            # writers": a false all-clear (ValueError: a NUL in the name)
            from ckptrescue.errors import EvidenceError

            why = "no such file or directory" if isinstance(exc, FileNotFoundError) \
                else (getattr(exc, "strerror", None) or str(exc))
            raise EvidenceError(f"{os.fsdecode(volume)}: {why}",
                                hint="--volume names the mount point of the affected volume "
                                     "(or its image or device)") from None
    vol = os.path.realpath(volume) if volume is not None else None
    roots = volume_roots(vol) if vol is not None else []
    first: dict[int, int] = {}
    procs: dict[int, ProcessInfo] = {}
    me = os.getpid()
    for p in psutil.process_iter(["pid", "name", "cmdline", "username"]):
        if p.pid == me:
            continue
        try:
            with p.oneshot():
                first[p.pid] = p.io_counters().write_bytes
                writes = [f.path for f in p.open_files() if f.mode in WRITE_MODES
                          and (_under(f.path, None) if vol is None else
                               any(_under(f.path, root) for root in roots))]
                cmd = p.info["cmdline"] or []
                name = p.info["name"] or ""
                maps = _maps(p.pid) if "python" in name or (cmd and "python" in cmd[0]) else ""
                kind = classify(name, cmd, maps)
                try:
                    cwd_on = vol is not None and any(_under(p.cwd(), r) for r in roots)
                except (psutil.Error, OSError):
                    cwd_on = False
                if writes or kind != "other" or cwd_on:
                    procs[p.pid] = ProcessInfo(p.pid, name, cmd, p.info["username"], kind,
                                               writes, cwd_on_volume=cwd_on)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    time.sleep(max(0.0, seconds))
    for pid, info in procs.items():
        try:
            now = psutil.Process(pid).io_counters().write_bytes
            info.write_rate_bps = round((now - first.get(pid, now)) / max(seconds, 1e-6), 1)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            info.write_rate_bps = None
    runner = runner or SubprocessRunner(case)
    res = runner.run(ToolCall.of("dmesg", "-x", "--time-format", "iso", timeout_s=60,
                                 purpose="kernel log scan (read-only)"))
    notes = []
    kmsgs: list[dict[str, str]] = []
    if res.returncode == 0:
        kmsgs = scan_kernel_log(res.stdout)
    else:
        notes.append(f"dmesg unavailable (rc {res.returncode}): {res.stderr.strip()[:200]}")
        jres = runner.run(ToolCall.of("journalctl", "-k", "-o", "short-iso", "--no-pager",
                                      timeout_s=120, purpose="kernel log scan (journal)"))
        if jres.returncode == 0:
            kmsgs = scan_kernel_log(jres.stdout)
        else:
            notes.append(f"journalctl -k unavailable (rc {jres.returncode})")
    if vol is not None:
        from ckptrescue.storage import writeblock

        try:
            block = writeblock.protect_mount_source(vol, case, purpose="triage of a volume")
        except OSError as exc:
            block = {"target": vol, "enforced": False, "reason": str(exc)}
        if block is not None:
            notes.append(f"write block of {block['target']}: "
                         + ("kernel-enforced (" + str(block.get("how")) + ")"
                            if block.get("enforced") else f"not enforced ({block.get('reason')})"))
        try:
            names = volume_device_names(vol)
        except OSError:
            names = set()
        attribute(kmsgs, names)
        if names:
            notes.append("devices under the volume: " + ", ".join(sorted(names)))
    result = TriageResult(volume=vol, seconds=seconds,
                          processes=sorted(procs.values(), key=lambda p: p.pid),
                          kernel_messages=kmsgs, checklist=list(FREEZE_CHECKLIST), notes=notes)
    result.findings = findings_of(result)
    result.findings_here()  # the engine records the findings, then the summary
    result.record("triage.finished",
                  {k: v for k, v in result.to_json().items() if k != "findings"})
    return result


def findings_of(r: TriageResult) -> list[Finding]:
    out: list[Finding] = []
    where = r.volume or "any volume"
    if r.volume is None:
        # no volume named: every writer on the host is a lead, not a verdict — one summary
        # finding with the list in its details, and the way to scope it
        writers = [p for p in r.processes if p.open_for_write]
        if writers:
            names = sorted({p.name for p in writers})
            out.append(Finding(
                "TR001", Severity.INFO, f"{len(writers)} process(es) on this host have files "
                f"open for writing ({', '.join(names[:8])}{' …' if len(names) > 8 else ''}); "
                "no volume was given, so none is known to touch the evidence: run triage "
                "--volume MOUNTPOINT|DEVICE to name the ones that do", evidence=where,
                source="triage", details={"processes": [p.to_json() for p in writers][:200],
                                          "count": len(writers)}))
    for p in r.processes:
        who = f"pid {p.pid} {p.name} ({' '.join(p.cmdline)[:200]})"
        if p.open_for_write and r.volume:
            out.append(Finding("TR001", Severity.CRITICAL, f"{who} has {len(p.open_for_write)} "
                               f"file(s) open for writing under {where}: stop it",
                               evidence=where, source="triage", details=p.to_json()))
        if r.volume is None:
            continue  # summarised above
        if p.kind == "training" and (p.open_for_write or p.cwd_on_volume):
            out.append(Finding("TR002", Severity.WARNING, f"training job {who}", evidence=where,
                               source="triage", details=p.to_json()))
        if p.kind == "sync" and (p.open_for_write or p.cwd_on_volume or any(
                _under(a, root) for a in p.cmdline for root in volume_roots(str(r.volume)))):
            out.append(Finding("TR003", Severity.WARNING, f"sync/backup agent {who} may "
                               "propagate damaged files", evidence=where, source="triage",
                               details=p.to_json()))
        if p.open_for_write and p.write_rate_bps:
            out.append(Finding("TR005", Severity.INFO, f"{who} writes {p.write_rate_bps:.0f} B/s",
                               evidence=where, source="triage"))
    ours = [m for m in r.kernel_messages if m.get("scope", "volume") in ("volume", "unknown")]
    unsure = [m for m in r.kernel_messages if m.get("scope") == "uncertain"]
    others = [m for m in r.kernel_messages if m.get("scope") == "other"]
    if ours:
        kinds = sorted({m["kind"] for m in ours})
        devs = sorted({m["devices"] for m in ours if m.get("devices")})
        on = f" on {r.volume}'s devices ({', '.join(devs)})" if devs else ""
        out.append(Finding("TR004", Severity.ERROR, f"{len(ours)} kernel message(s) about "
                           f"{', '.join(kinds)} errors{on}", source="triage",
                           evidence=r.volume or "", details={"messages": ours[-50:]}))
    if unsure:
        kinds = sorted({m["kind"] for m in unsure})
        devs = sorted({m["devices"] for m in unsure})
        out.append(Finding("TR004", Severity.WARNING, f"{len(unsure)} kernel message(s) about "
                           f"{', '.join(kinds)} errors on {', '.join(devs)} that may concern an "
                           "earlier use of the loop device: the kernel rate-limited its attach "
                           "messages, so whether it was attached again since cannot be told "
                           "from the log", source="triage", evidence=r.volume or "",
                           details={"messages": unsure[-50:]}))
    if others:
        out.append(Finding("TR004", Severity.INFO, f"{len(others)} kernel message(s) about "
                           "storage errors on devices not under the volume", source="triage",
                           details={"messages": others[-50:]}))
    return out
