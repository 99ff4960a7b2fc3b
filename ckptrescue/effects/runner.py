"""The one guarded runner: every external program the kit runs goes through here.

For each call, in order:

1. the guard (``ckptrescue.guard``) decides from the argv; a refusal is recorded in the audit
   log (``tool.refused``) and returned as ``ToolResult.refused`` — nothing runs;
2. the binary is resolved on PATH; its path and ``--version`` line are recorded once per case;
3. the process runs with ``shell=False``, ``stdin=/dev/null``, a minimal environment
   (``LC_ALL=C``, credentials dropped), its own process group, a time limit and an output cap;
   stdout/stderr stream into write-once artifacts while being hashed;
4. one ``tool.run`` audit record holds the argv (secrets redacted), cwd, exit status, duration,
   artifact hashes and the truncated/timeout flags.

Non-zero exit is data, not an exception. Only "could not start" raises ``ToolMissingError``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ckptrescue import guard
from ckptrescue.effects import confine, output_dirs
from ckptrescue.effects import scratch as scratch_dirs
from ckptrescue.errors import ToolMissingError
from ckptrescue.guard import kernel
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024
# how long a loop a command marked for release (held open elsewhere) is waited for
DETACH_WAIT_S = 5.0
PR_SET_PDEATHSIG = 1
_KEEP_ENV = ("PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "TERM")

# How to ask each tool for its version (default: ``--version``).
_VERSION_ARGS: dict[str, list[str]] = {
    "xfs_db": ["-V"], "xfs_info": ["-V"], "xfs_repair": ["-V"], "xfs_logprint": ["-V"],
    "xfs_io": ["-V"], "xfs_metadump": ["-V"], "dumpe2fs": ["-V"], "debugfs": ["-V"],
    "e2fsck": ["-V"], "fsck": ["--version"], "nvme": ["version"], "zpool": ["version"],
    "zfs": ["version"], "tune2fs": ["-V"], "mdadm": ["--version"], "hdparm": ["-V"],
}


class Secret(str):
    """A string argument that is shown as ``****`` in logs and dry runs."""

    def redacted(self) -> str:
        return "****"


def redact(argv: Sequence[str]) -> list[str]:
    return [a.redacted() if isinstance(a, Secret) else str(a) for a in argv]


@dataclass(frozen=True)
class ToolCall:
    """One command: an argv list (never shell text) and its limits."""

    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_bytes: int = DEFAULT_MAX_OUTPUT
    cwd: str | None = None
    purpose: str = ""
    writable: tuple[str, ...] = ()  # more paths the tool may write (beyond what the guard reads)

    @classmethod
    def of(cls, *argv: str, **kw: Any) -> ToolCall:
        return cls(argv=tuple(argv), **kw)


@dataclass
class ToolResult:
    """What happened. ``refused`` is a reason when the guard said no (nothing ran)."""

    argv: list[str]
    returncode: int | None = None
    refused: str | None = None
    dry_run: bool = False
    timed_out: bool = False
    cancelled: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    executable: str | None = None
    record_hash: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.refused is None and not self.timed_out and self.returncode == 0

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    def to_json(self) -> JsonObject:
        return {
            "argv": self.argv,
            "returncode": self.returncode,
            "refused": self.refused,
            "dry_run": self.dry_run,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
            "duration_s": round(self.duration_s, 3),
            "stdout_sha256": self.stdout_sha256,
            "stderr_sha256": self.stderr_sha256,
        }


class Runner(Protocol):
    def run(self, call: ToolCall, *, cancel: threading.Event | None = None) -> ToolResult: ...


def step_env(scratch: str, tool: str) -> dict[str, str]:
    """The environment of one tool run: the minimal one, with ``HOME``, the XDG directories
    and ``KUBECONFIG`` pointing into an empty per-step folder, so that no tool loads a
    configuration or plugin from the responder's files (``~/.kube/config`` exec plugins,
    ``~/.ssh/config``, rc files). ``kubectl`` gets a kit-written copy of the responder's
    kubeconfig without ``exec`` and ``auth-provider`` plugins."""
    home = os.path.join(scratch, "home")
    os.makedirs(home, mode=0o700, exist_ok=True)
    env = minimal_env({"TMPDIR": scratch})
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
                "XDG_CACHE_HOME": os.path.join(home, ".cache"),
                "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
                "XDG_RUNTIME_DIR": os.path.join(home, ".run"),
                "XDG_CONFIG_DIRS": os.path.join(home, ".config-dirs"),
                "KUBECONFIG": os.path.join(home, ".kube", "config")})
    if tool == "kubectl":
        _write_kubeconfig(env["KUBECONFIG"])
    return env


def _write_kubeconfig(dest: str) -> None:
    """A copy of the responder's kubeconfig (``$KUBECONFIG``'s first file, else
    ``~/.kube/config``) with every ``users[].user.exec`` and ``auth-provider`` removed: kubectl
    reaches the cluster with certificates or tokens, never by running a program."""
    import yaml

    src = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or os.path.join(
        os.path.expanduser("~"), ".kube", "config")
    try:
        with open(src, "rb") as fh:
            data = yaml.safe_load(fh.read(1 << 20))
    except (OSError, yaml.YAMLError):
        return
    if not isinstance(data, dict):
        return
    for user in data.get("users") or []:
        body = user.get("user") if isinstance(user, dict) else None
        if isinstance(body, dict):
            for key in ("exec", "auth-provider"):
                body.pop(key, None)
    data.pop("preferences", None)
    os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(data, fh)


def minimal_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.update({"LC_ALL": "C", "LANG": "C", "TZ": "UTC"})
    if extra:
        env.update(extra)
    return env


class SubprocessRunner:
    """The real runner. ``case`` may be None only for dry runs and read-only listings."""

    # in-memory copy of each stream kept on the result (the artifact holds up to the cap)
    MEMORY_CAP = 16 * 1024 * 1024

    def __init__(self, case: Case | None, *, dry_run: bool = False,
                 extra_evidence: Sequence[str] = ()) -> None:
        self.case = case
        self.dry_run = dry_run
        self.extra_evidence = tuple(extra_evidence)
        self._versions: dict[str, str] = {}
        self._confinements: set[str] = set()
        self._lock = threading.Lock()

    # -- policy ---------------------------------------------------------------------------------
    def context(self) -> guard.GuardContext:
        paths = list(self.extra_evidence)
        protected: list[str] = []
        if self.case is not None:
            paths.extend(self.case.evidence_paths())
            protected = self.case.protected_paths()
        return guard.GuardContext(evidence_paths=tuple(paths), protected_paths=tuple(protected),
                                  attachments=tuple(self.attachments()),
                                  pools=self.zfs_pools,
                                  dataset_mountpoint=self.zfs_mountpoint,
                                  output_dirs=tuple(output_dirs.recorded(self.case))
                                  if self.case is not None else None)

    def attachments(self) -> list[kernel.Attachment]:
        """What this case attached and has not released, as the kernel showed it (the log's
        ``safety.attached``/``safety.detached`` records; nothing under ``work/``)."""
        if self.case is None:
            return []
        out = [kernel.Attachment.from_json(d) for d in self.case.attachments()]
        return [a for a in out if a is not None]

    def zfs_pools(self) -> dict[str, kernel.Pool] | None:
        """The imported ZFS pools as ``zpool list -H`` shows them (None without ZFS). The kit's
        own read of kernel state, like ``--version``: not a step of the case."""
        exe = shutil.which("zpool", path=minimal_env()["PATH"])
        if exe is None:
            return None
        try:
            proc = subprocess.run([exe, "list", "-H", "-o", "name,guid,readonly"],
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                                  env=minimal_env(), check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return {} if b"no pools available" in proc.stderr + proc.stdout else None
        return kernel.parse_zpool_list(proc.stdout.decode("utf-8", "replace"))

    def zfs_mountpoint(self, dataset: str) -> str | None:
        """Where ``zfs mount DATASET`` would mount it, as zfs itself says (the altroot
        included). The kit's own read, like ``zpool list``: not a step of the case."""
        exe = shutil.which("zfs", path=minimal_env()["PATH"])
        if exe is None or dataset.startswith("-"):
            return None
        try:
            proc = subprocess.run([exe, "get", "-H", "-o", "value", "mountpoint", "--", dataset],
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                                  env=minimal_env(), check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = proc.stdout.decode("utf-8", "surrogateescape").strip()
        return text if proc.returncode == 0 and text and "\n" not in text else None

    def check(self, call: ToolCall, ctx: guard.GuardContext | None = None) -> guard.Decision:
        argv = [str(a) for a in call.argv]
        ctx = ctx or self.context()
        decision = guard.check(argv, ctx)
        for path in call.writable if decision.allowed else ():
            reason = ctx.writes_forbidden(path)
            if reason:
                return guard.Decision.refuse(f"writable path: {reason}")
        for path in (*decision.writes, *call.writable) if decision.allowed else ():
            reason = ctx.output_refusal(path)
            if reason:
                return guard.Decision.refuse(f"output: {reason}")
        if decision.allowed and argv and "/" in argv[0]:
            # The guard judges the tool by name: a path must be that very tool, not a renamed
            # or symlinked other program.
            name = Path(argv[0]).name
            on_path = shutil.which(name, path=minimal_env()["PATH"])
            if on_path is None or os.path.realpath(argv[0]) != os.path.realpath(on_path):
                return guard.Decision.refuse(
                    f"{argv[0]} is not the {name} installed on the system PATH; give the tool "
                    "by name")
        return decision

    # -- running -------------------------------------------------------------------------------
    def run(self, call: ToolCall, *, cancel: threading.Event | None = None) -> ToolResult:
        shown = redact(call.argv)
        ctx = self.context()  # one read of the case's records per command
        decision = self.check(call, ctx)
        if self.case is not None and not self.dry_run:
            # an output in a directory that does not exist yet: the kit makes that directory
            # (recorded), so that nothing in it can alias evidence; then judge again
            first = guard.check([str(a) for a in call.argv], ctx)
            made = [output_dirs.create_parents(self.case, w, purpose=call.purpose)
                    for w in (*first.writes, *call.writable) if first.allowed
                    and not ctx.writes_forbidden(w)]
            if any(made):
                ctx = self.context()
                decision = self.check(call, ctx)
        if not decision.allowed:
            result = ToolResult(argv=shown, refused=decision.reason)
            if self.case is not None and not self.dry_run:
                rec = self.case.log("tool.refused", {"argv": shown, "reason": decision.reason,
                                                     "purpose": call.purpose})
                result.record_hash = rec["hash"]
            return result
        if self.dry_run:
            return ToolResult(argv=shown, dry_run=True)
        exe = shutil.which(call.argv[0], path=minimal_env()["PATH"])
        if exe is None:
            if self.case is not None:
                self.case.log("tool.missing", {"argv": shown, "purpose": call.purpose})
            raise ToolMissingError(
                f"{call.argv[0]}: not installed (not found on PATH)",
                hint="run `make setup` (as root) to install the system tools",
            )
        self._record_version(call.argv[0], exe)
        watch = self._watches_kernel(call, decision)
        before = kernel.snapshot(self.zfs_pools if watch == "zfs" else None,
                                 [str(a) for a in call.argv]) if watch else None
        owned = scratch_dirs.make("ckptrescue-tool-")  # a kill -9 leaves it to the next process
        scratch = owned.path
        views: dict[str, str] = {}
        try:
            if decision.host_namespace:
                confinement = confine.host_namespace()
            else:
                if not decision.all_devices and confine.bwrap_path() is not None and \
                        Path(str(call.argv[0])).name not in self.KERNEL_STATE_TOOLS:
                    views = self._read_only_views(call)
                confinement = confine.private_namespace(
                    (*decision.writes, *call.writable), scratch=scratch, cwd=call.cwd,
                    argv=tuple(str(a) for a in call.argv), caps=decision.caps,
                    all_devices=decision.all_devices, network=decision.network,
                    readonly=(*ctx.evidence_paths, *ctx.protected_paths), substitutes=views)
            self._record_confinement(confinement)
            result = self._execute(call, exe, shown, cancel, confinement, scratch,
                                   ran=decision.argv(call.argv))
        finally:
            owned.remove()
            if before is not None:
                self._record_kernel_changes(before, call, shown, watch)
            for loop in views.values():
                self.run(ToolCall.of("losetup", "-d", loop, timeout_s=60,
                                     purpose="release a read-only view of a device"))
        return result

    def _read_only_views(self, call: ToolCall) -> dict[str, str]:
        """For each block device the argv names that the kernel keeps writable: a read-only
        loop device over it (``losetup --read-only``, recorded like any attach), which the tool
        then sees at the device's own name. Only a device the grammar says the tool writes
        could stay writable, and the guard refuses writes to devices."""
        if self.case is None:
            return {}
        views: dict[str, str] = {}
        for dev in confine.named_devices(tuple(str(a) for a in call.argv[1:])):
            real = os.path.realpath(dev)
            if real in views or kernel.block_rdev(real) is None or kernel.is_read_only(real):
                continue
            res = self.run(ToolCall.of("losetup", "--read-only", "--find", "--show", real,
                                       timeout_s=60, purpose=f"read-only view of {real} for "
                                       f"{Path(str(call.argv[0])).name}"))
            loop = res.stdout.strip() if res.ok else ""
            if not loop.startswith("/dev/") or not kernel.is_read_only(loop):
                raise ToolMissingError(f"could not make a read-only view of {real} "
                                       f"({res.refused or res.stderr.strip()})")
            views[real] = loop
        return views

    # tools that can attach, mount, import or release: the kernel's state is read around them
    KERNEL_STATE_TOOLS: ClassVar[dict[str, str]] = {"losetup": "block", "mount": "block", "umount": "block",
                          "dmsetup": "block", "zpool": "zfs", "zfs": "zfs"}

    def _watches_kernel(self, call: ToolCall, decision: guard.Decision) -> str:
        if self.case is None:
            return ""
        name = Path(str(call.argv[0])).name
        return self.KERNEL_STATE_TOOLS.get(name, "block" if decision.host_namespace else "")

    def _record_kernel_changes(self, before: kernel.Snapshot, call: ToolCall, shown: list[str],
                               watch: str) -> None:
        """Record what the kernel shows this command attached (``safety.attached``, with the
        identity a later detach must match) and which of the case's attachments the kernel no
        longer shows (``safety.detached``) — whatever the command's exit status or argv said."""
        assert self.case is not None
        pools = self.zfs_pools if watch == "zfs" else None
        after = kernel.snapshot(pools)
        argv = [str(a) for a in call.argv]
        for att in kernel.appeared(before, after, argv):
            self.case.log("safety.attached", {**att.to_json(), "argv": shown})
        live = self.attachments()
        pending = kernel.release_pending(live, before, after)
        deadline = time.monotonic() + DETACH_WAIT_S
        while pending and time.monotonic() < deadline:
            time.sleep(0.02)  # a holder's close (a udev probe, another scan) is usually quick
            after = kernel.snapshot(pools)
            pending = [a for a in pending if kernel.still_there(a, after)]
        for att in pending:
            self.case.log("safety.detach_deferred", {
                **att.to_json(), "argv": shown, "waited_s": DETACH_WAIT_S,
                "why": "still held open elsewhere: the kernel detaches it when the last holder "
                       "closes it"})
        for att in kernel.gone(live, after, lambda: kernel.snapshot(pools)):
            self.case.log("safety.detached", {**att.to_json(), "argv": shown})

    def _record_confinement(self, confinement: confine.Confinement) -> None:
        """One ``safety.kernel`` record per case and kind of confinement (the report lists them)."""
        key = f"{confinement.enforced}:{confinement.how}"
        with self._lock:
            if key in self._confinements:
                return
            self._confinements.add(key)
        if self.case is not None:
            self.case.log("safety.kernel", {
                "guarantee": "tool-host-namespace" if confinement.how.startswith("host")
                else "tool-namespace",
                "target": "external tools", "enforced": confinement.enforced,
                "how": confinement.how})

    def _execute(self, call: ToolCall, exe: str, shown: list[str],
                 cancel: threading.Event | None, confinement: confine.Confinement,
                 scratch: str, *, ran: list[str] | None = None) -> ToolResult:
        # ``ran``: the argv with the words the guard pinned (the very device node and path it
        # judged, for a tool in the host's namespace)
        ran = ran or list(call.argv)
        argv = [*confinement.prefix, exe, *[str(a) for a in ran[1:]]]
        env = step_env(scratch, Path(str(call.argv[0])).name)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=call.cwd, env=env, start_new_session=True, shell=False,
            )
        except OSError as exc:
            if self.case is not None:
                self.case.log("tool.failed_to_start", {"argv": shown, "error": str(exc)})
            raise ToolMissingError(f"{call.argv[0]}: could not start ({exc})") from exc
        sinks, threads = _drain(self, proc, shown, call.max_output_bytes)
        timed_out = cancelled = False
        deadline = start + call.timeout_s
        try:
            while True:
                try:
                    proc.wait(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    if cancel is not None and cancel.is_set():
                        cancelled = True
                    elif time.monotonic() > deadline:
                        timed_out = True
                    else:
                        continue
                    _kill_group(proc)
                    proc.wait()
                    break
        except BaseException:
            # Ctrl-C or SIGTERM reaches only us (the tool has its own session): never leave
            # the tool running behind us.
            _kill_group(proc)
            proc.wait()
            for t in threads:
                t.join(timeout=5)
            for sink in sinks.values():
                sink.abandon()
            if self.case is not None:
                self.case.log("tool.interrupted", {"argv": shown, "executable": exe,
                                                   "duration_s": round(time.monotonic() - start,
                                                                       3)})
            raise
        result = _finished(proc, sinks, threads, start=start, argv=shown, executable=exe,
                           timed_out=timed_out, cancelled=cancelled)
        duration, out, err = result.duration_s, result.stdout_sha256, result.stderr_sha256
        if self.case is not None:
            rec = self.case.log(
                "tool.run",
                {"argv": shown, "executable": exe, "cwd": call.cwd or os.getcwd(),
                 "purpose": call.purpose, "returncode": proc.returncode,
                 "duration_s": round(duration, 3), "timed_out": timed_out, "cancelled": cancelled,
                 "truncated": result.truncated, "stdout_sha256": out, "stderr_sha256": err,
                 "stdout_size": sinks["stdout"].size, "stderr_size": sinks["stderr"].size,
                 "timeout_s": call.timeout_s,
                 **({"ran": redact([*call.argv[:1], *ran[1:]])}
                    if list(ran[1:]) != list(call.argv[1:]) else {}),
                 "namespace": {"enforced": confinement.enforced, "how": confinement.how,
                               "writable": list(confinement.writable)}},
                artifacts=[h for h in (out, err) if h],
            )
            result.record_hash = rec["hash"]
        return result

    def _record_version(self, tool: str, exe: str) -> None:
        with self._lock:
            if tool in self._versions:
                return
            self._versions[tool] = ""
        args = _VERSION_ARGS.get(Path(tool).name, ["--version"])
        try:
            proc = subprocess.run(
                [exe, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                env=minimal_env(), check=False,
            )
            text = (proc.stdout or proc.stderr).decode("utf-8", "replace").strip()
            line = text.splitlines()[0] if text else ""
        except (OSError, subprocess.TimeoutExpired):
            line = ""
        self._versions[tool] = line
        if self.case is not None:
            self.case.log("tool.version", {"tool": tool, "executable": exe, "version": line})

    def versions(self) -> dict[str, str]:
        return dict(self._versions)

    def run_internal(self, argv: Sequence[str], *, purpose: str, timeout_s: float,
                     max_output_bytes: int = DEFAULT_MAX_OUTPUT,
                     env_extra: dict[str, str] | None = None,
                     preexec: Any = None) -> ToolResult:
        """Run one of the kit's own programs (the sandbox child; the drill's builders): not
        reachable from ``exec`` or playbooks, not judged by the guard, audited when there is a
        case."""
        return self.start_internal(argv, purpose=purpose, timeout_s=timeout_s,
                                   max_output_bytes=max_output_bytes, env_extra=env_extra,
                                   preexec=preexec).wait()

    def start_internal(self, argv: Sequence[str], *, purpose: str, timeout_s: float,
                       max_output_bytes: int = DEFAULT_MAX_OUTPUT,
                       env_extra: dict[str, str] | None = None,
                       preexec: Any = None) -> InternalRun:
        """:meth:`run_internal` without waiting: the program runs while the caller does other
        work. :meth:`InternalRun.wait` returns its result (audited then; ``timeout_s`` counts
        from the start); :meth:`InternalRun.stop` kills it. The caller does one or the other."""
        shown = redact(argv)
        start = time.monotonic()
        proc = subprocess.Popen(
            [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=minimal_env(env_extra), start_new_session=True,
            preexec_fn=preexec, shell=False,
        )
        sinks, threads = _drain(self, proc, shown, max_output_bytes)
        return InternalRun(self, proc, sinks, threads, shown=shown, executable=str(argv[0]),
                           purpose=purpose, timeout_s=timeout_s, start=start)


class InternalRun:
    """One of the kit's own programs, started by :meth:`SubprocessRunner.start_internal`."""

    def __init__(self, runner: SubprocessRunner, proc: subprocess.Popen[bytes],
                 sinks: dict[str, _Sink], threads: list[threading.Thread], *, shown: list[str],
                 executable: str, purpose: str, timeout_s: float, start: float) -> None:
        self.runner, self.proc, self.sinks, self.threads = runner, proc, sinks, threads
        self.shown, self.executable, self.purpose = shown, executable, purpose
        self.timeout_s, self.start = timeout_s, start

    def wait(self) -> ToolResult:
        """Its result once it has exited (killed, with ``timed_out``, at the time limit)."""
        proc = self.proc
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, self.start + self.timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        except BaseException:  # Ctrl-C reaches only us: never leave the child running
            self.stop()
            raise
        result = _finished(proc, self.sinks, self.threads, start=self.start, argv=self.shown,
                           executable=self.executable, timed_out=timed_out)
        duration, out, err = result.duration_s, result.stdout_sha256, result.stderr_sha256
        case = self.runner.case
        if case is not None:
            rec = case.log(
                "sandbox.run",
                {"argv": self.shown, "purpose": self.purpose, "returncode": proc.returncode,
                 "duration_s": round(duration, 3), "timed_out": timed_out,
                 "stdout_sha256": out, "stderr_sha256": err, "timeout_s": self.timeout_s},
                artifacts=[h for h in (out, err) if h],
            )
            result.record_hash = rec["hash"]
        return result

    def stop(self) -> None:
        """Kill it, its process group included, and reap it (nothing is recorded); once it has
        been reaped, nothing (its pid may name another process by then)."""
        if self.proc.returncode is not None:
            return
        _kill_group(self.proc)
        self.proc.wait()


def dies_with_this_thread() -> Callable[[], None]:
    """A ``preexec`` for :meth:`SubprocessRunner.start_internal`: the child is killed (SIGKILL)
    when the thread that starts it ends, with the process or not (``PR_SET_PDEATHSIG``), and
    exits at once if this process had already gone. libc is loaded here, before the fork: the
    child only calls into it (a child forked beside other threads must not import)."""
    import ctypes

    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the caller still stops its child itself
        return lambda: None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn_detached(argv: Sequence[str], *, log: Path, env_extra: dict[str, str] | None = None
                   ) -> subprocess.Popen[bytes]:
    """Start one of the kit's own long-running programs (the drill's local S3 server) in its own
    session, output appended to ``log``; the caller stops it."""
    with open(log, "ab") as fh:
        return subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=fh, start_new_session=True,
                                env={**os.environ, **(env_extra or {})})


def spawn_kept(argv: Sequence[str], *, log: str, env_extra: dict[str, str],
               pass_fds: tuple[int, ...], case: Case | None, purpose: str
               ) -> subprocess.Popen[bytes]:
    """Start one of the kit's own programs that serves many calls (the warm sandbox's
    zygote): its own session, no stdin or stdout, stderr to ``log``, the minimal environment
    plus ``env_extra``, only ``pass_fds`` inherited; the start is audited when there is a case.
    The caller ends it (``os.killpg``)."""
    shown = redact(argv)
    with open(log, "wb") as err:
        proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                env=minimal_env(env_extra), pass_fds=pass_fds,
                                start_new_session=True, shell=False)
    if case is not None:
        case.log("sandbox.start", {"argv": shown, "purpose": purpose, "pid": proc.pid})
    return proc


def _drain(runner: SubprocessRunner, proc: subprocess.Popen[bytes], shown: list[str],
           max_output_bytes: int) -> tuple[dict[str, _Sink], list[threading.Thread]]:
    """A sink per output stream of ``proc``, each drained by its own (started) thread."""
    sinks = {"stdout": _Sink(runner, "stdout", shown, max_output_bytes),
             "stderr": _Sink(runner, "stderr", shown, max_output_bytes)}
    threads = [threading.Thread(target=sinks[k].drain, args=(s,), daemon=True)
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in threads:
        t.start()
    return sinks, threads


def _finished(proc: subprocess.Popen[bytes], sinks: dict[str, _Sink],
              threads: list[threading.Thread], *, start: float, argv: list[str],
              executable: str, timed_out: bool, cancelled: bool = False) -> ToolResult:
    """The result of a child that has exited: its output drained to the end and stored."""
    for t in threads:
        t.join()
    duration = time.monotonic() - start
    out, err = sinks["stdout"].finish(), sinks["stderr"].finish()
    return ToolResult(
        argv=argv, returncode=proc.returncode, timed_out=timed_out, cancelled=cancelled,
        truncated=sinks["stdout"].truncated or sinks["stderr"].truncated,
        duration_s=duration, stdout_sha256=out, stderr_sha256=err,
        stdout_bytes=sinks["stdout"].memory, stderr_bytes=sinks["stderr"].memory,
        executable=executable,
    )


class _Sink:
    """Drains one pipe into an artifact (up to the cap) and a bounded memory copy."""

    def __init__(self, runner: SubprocessRunner, stream: str, shown: list[str], cap: int) -> None:
        self.runner = runner
        self.stream = stream
        self.cap = cap
        self.size = 0
        self.truncated = False
        self.memory = b""
        self._chunks: list[bytes] = []
        self._mem_size = 0
        self._writer = None
        if runner.case is not None:
            name = f"{Path(shown[0]).name}.{stream}"
            self._writer = runner.case.artifact_writer(name=name, kind=stream, log=False)
            self._writer.__enter__()

    def drain(self, pipe: Any) -> None:
        while True:
            block = pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16)
            if not block:
                break
            room = self.cap - self.size
            if room <= 0:
                self.truncated = True
                continue
            if len(block) > room:
                block = block[:room]
                self.truncated = True
            self.size += len(block)
            if self._writer is not None:
                self._writer.write(block)
            if self._mem_size < SubprocessRunner.MEMORY_CAP:
                self._chunks.append(block[: SubprocessRunner.MEMORY_CAP - self._mem_size])
                self._mem_size += len(self._chunks[-1])
        pipe.close()

    def abandon(self) -> None:
        """Drop a partial artifact (the run was interrupted; nothing is stored)."""
        if self._writer is not None:
            self._writer.__exit__(KeyboardInterrupt, None, None)
            self._writer = None

    def finish(self) -> str | None:
        self.memory = b"".join(self._chunks)
        if self._writer is None:
            return None
        self._writer.__exit__(None, None, None)
        return self._writer.sha256


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
