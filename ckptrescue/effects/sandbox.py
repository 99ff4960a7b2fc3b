"""Run real ML loaders (torch, tensorflow) in a confined child: a security boundary.

The parent never imports torch or tensorflow for a load. A child is
``bwrap [namespaces, binds] -- python -I -B -c <run module> PKG_ROOT ckptrescue.sandbox_children.<name>
SCRATCH/request.json``, run through :meth:`SubprocessRunner.run_internal` (audited, own process
group, minimal environment, wall-clock timeout) with address-space/CPU/core rlimits.

The boundary, from the outside in:

* **bubblewrap**: new user, mount, network, pid, ipc and uts namespaces; ``--cap-drop ALL``,
  ``--die-with-parent``, ``--new-session``, no_new_privs, no further user namespaces; the root is
  an empty read-only tmpfs holding only: the Python prefix(es) and virtualenv, ``/usr`` (system
  libraries; ``/lib*``/``/bin`` as the host's symlinks into it), the loader's dynamic-linker
  configuration, the kit's own package, ``/proc``, a minimal ``/dev``, a tmpfs ``/tmp``, the CPU
  topology under ``/sys``, **read-only binds of exactly the files/directories being loaded**,
  and one writable scratch directory (fresh per run, removed afterwards). No network exists.
* **seccomp** and an **audit hook**, installed by the child itself after its heavy imports and
  before it touches the file (``sandbox_children/boundary.py``, ``confine.py``).

A child module that says ``WARM = True`` is served warm when it can be
(``effects/warm_sandbox.py``): forked from a zygote that made its heavy imports once, it builds
this same view itself (:func:`view_binds`) and arms the same hook and filter; any failure of
the warm path runs the load as described here.

Outcomes (:class:`ChildOutcome`), never exceptions: ``ok``, ``error`` (the loader raised),
``crashed``, ``killed``, ``timeout``, ``bad-output``, ``blocked`` (the child tried something the
sandbox forbids: the attempts recorded by the audit hook, or a SIGSYS kill by the seccomp filter)
and ``sandbox-unavailable`` (bubblewrap missing or unable to create the namespaces: the load was
**not run**; there is no fallback to an unconfined child).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptrescue.effects import scratch as scratch_dirs
from ckptrescue.effects.confine import PROC_READ_ONLY  # the child is root there too
from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

BWRAP = "bwrap"
CHILD_MAX_FILE = 4 << 30  # a .keras load unpacks its weights file
_ATTEMPTS = "attempts.jsonl"  # written by sandbox_children/boundary.py
STARTED = "started"
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
_SYS_DIRS = ("/sys/devices/system/cpu", "/sys/fs/cgroup")
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass
class ChildOutcome:
    """What the child did: ``status`` is ok, error, crashed, killed, timeout, bad-output,
    blocked or sandbox-unavailable. ``attempts`` lists what a blocked child tried."""

    status: str
    result: JsonObject = field(default_factory=dict)
    returncode: int | None = None
    signal_name: str | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0
    attempts: list[JsonObject] = field(default_factory=list)
    reason: str = ""
    files: dict[str, str] = field(default_factory=dict)  # small text files the child left

    def to_json(self) -> JsonObject:
        data = {
            "status": self.status,
            "result": self.result,
            "returncode": self.returncode,
            "signal": self.signal_name,
            "stderr_tail": self.stderr_tail,
            "duration_s": round(self.duration_s, 3),
        }
        if self.attempts:
            data["attempts"] = self.attempts
        if self.reason:
            data["reason"] = self.reason
        return data


def rlimits(memory_mb: int | None, cpu_s: int | None) -> dict[str, tuple[int, int]]:
    """A child's rlimits, by ``resource`` name: no core; at most :data:`CHILD_MAX_FILE` a file
    it writes (scratch is on the host's disk); its address space; its CPU time."""
    limits = {"RLIMIT_CORE": (0, 0), "RLIMIT_FSIZE": (CHILD_MAX_FILE, CHILD_MAX_FILE)}
    if memory_mb:
        limits["RLIMIT_AS"] = (memory_mb * 1024 * 1024, memory_mb * 1024 * 1024)
    if cpu_s:
        limits["RLIMIT_CPU"] = (cpu_s, cpu_s + 5)
    return limits


def _limits(memory_mb: int | None, cpu_s: int | None) -> Any:
    wanted = rlimits(memory_mb, cpu_s)

    def apply() -> None:
        for name, pair in wanted.items():
            resource.setrlimit(getattr(resource, name), pair)

    return apply


# TORCH_DEVICE_BACKEND_AUTOLOAD=0: torch does not import the device-backend packages installed
# beside it (entry points: code a CPU load never needs, and a scan of every installed
# distribution at ``import torch``)
CHILD_ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
             "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1",
             "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def package_root() -> str:
    """The directory holding the ``ckptrescue`` package (put on the child's ``sys.path``)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_python() -> str:
    """The interpreter the child runs, by a path that exists inside the sandbox: the venv's own
    ``bin/python`` with its directory resolved (a venv reached through a symlinked directory is
    bound at its real path), never the interpreter behind it (which would lose the venv)."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)),
                        os.path.basename(sys.executable))


def python_roots() -> list[str]:
    """The Python installation(s) the child needs: venv, base prefix, the real executable's."""
    exe = os.path.realpath(sys.executable)
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(exe))}
    return sorted(os.path.realpath(r) for r in roots if r and os.path.isdir(r))


def view_binds(*, scratch: str, inputs: list[str]) -> list[tuple[str, str, str]]:
    """What a child sees besides ``/proc``, ``/dev`` and ``/tmp``, as bubblewrap options
    ``(option, source, target)``, a parent directory before the binds beneath it: a cold child's
    bubblewrap takes them as they are, a warm child builds them (``sandbox_children/view.py``)."""
    links: list[tuple[str, str, str]] = []
    ro: dict[str, str] = {}  # target -> option
    for link in _ROOT_LINKS:
        if os.path.islink(link):
            links.append(("--symlink", os.readlink(link), link))
        elif os.path.isdir(link):
            ro[link] = "--ro-bind"
    ro["/usr"] = "--ro-bind"
    for path in _ETC_FILES + _SYS_DIRS:
        ro[path] = "--ro-bind-try"
    for root in python_roots():
        ro[root] = "--ro-bind"
    ro[os.path.join(package_root(), "ckptrescue")] = "--ro-bind"
    for path in inputs:
        ro[os.path.abspath(path)] = "--ro-bind"
    binds = list(ro.items())
    binds.append((scratch, "--bind"))
    ordered = sorted(binds, key=lambda b: (b[0].count(os.sep), b[0]))
    return links + [(opt, path, path) for path, opt in ordered]


def bwrap_argv(*, scratch: str, inputs: list[str], bwrap: str = BWRAP) -> list[str]:
    """The bubblewrap command line for one child (see the module docstring)."""
    argv = [bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net",
            "--unshare-uts", "--unshare-cgroup-try", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--hostname", "ckptrescue-sandbox",
            "--proc", "/proc", *PROC_READ_ONLY, "--dev", "/dev", "--tmpfs", "/tmp"]
    for option, source, target in view_binds(scratch=scratch, inputs=inputs):
        argv += [option, source, target]
    argv += ["--chdir", scratch, "--remount-ro", "/"]
    return argv


def _signal_of(rc: int | None, sandboxed: bool) -> str | None:
    """The signal that ended the child: a negative returncode, or bwrap's 128+N."""
    if rc is None:
        return None
    num = -rc if rc < 0 else (rc - 128 if sandboxed and 128 < rc < 128 + 65 else 0)
    if not num:
        return None
    return signal.Signals(num).name if num in signal.Signals._value2member_map_ else str(num)


def read_scratch_bytes(scratch: str, name: str, limit: int) -> tuple[bytes, bool]:
    """A regular file the child left in scratch, at most ``limit`` bytes of it and whether it
    was longer, read without following a link, blocking on a FIFO or opening a device the
    child planted there (``b""`` for anything else)."""
    try:
        fd = os.open(os.path.join(scratch, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b"", False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != os.stat(scratch).st_dev:
            return b"", False
        chunks: list[bytes] = []
        size = 0
        while size < limit and (block := os.read(fd, min(1 << 20, limit - size))):
            chunks.append(block)
            size += len(block)
        return b"".join(chunks), size >= limit and bool(os.read(fd, 1))
    except OSError:
        return b"", False
    finally:
        os.close(fd)


def read_scratch_file(scratch: str, name: str, limit: int) -> str:
    """:func:`read_scratch_bytes`, decoded (``""`` for anything but a regular file)."""
    return read_scratch_bytes(scratch, name, limit)[0].decode("utf-8", "replace")


def read_attempts(scratch: str) -> list[JsonObject]:
    out: list[JsonObject] = []
    for line in read_scratch_file(scratch, _ATTEMPTS, 256 * 1024).splitlines()[:200]:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def keep_files(scratch: str, names: list[str]) -> dict[str, str]:
    return {name: read_scratch_file(scratch, name, 1024 * 1024) for name in names}


def run_child(
    child: str,
    request: JsonObject,
    *,
    case: Case | None = None,
    memory_mb: int | None = 4096,
    timeout_s: float = 300.0,
    cpu_s: int | None = None,
    env_extra: dict[str, str] | None = None,
    inputs: list[str] | None = None,
    keep: list[str] | None = None,
) -> ChildOutcome:
    """Run ``ckptrescue.sandbox_children.<child>`` on ``request`` inside the sandbox.

    ``inputs``: the files/directories the child may read (bound read-only at the same paths).
    ``keep``: names of small files the child writes in its scratch directory (``request
    ["scratch"]``) to hand back in :attr:`ChildOutcome.files` before the directory is removed.
    """
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return ChildOutcome("sandbox-unavailable", reason="bubblewrap (bwrap) is not installed: "
                            "the real load was not run (install the Debian package bubblewrap)")
    cpu = cpu_s or int(timeout_s) + 5
    from ckptrescue.effects import warm_sandbox

    if warm_sandbox.warm_capable(child, env_extra):
        warm = warm_sandbox.run_warm(child, request, bwrap=bwrap, env=CHILD_ENV,
                                     rlimits=rlimits(memory_mb, cpu), timeout_s=timeout_s,
                                     inputs=list(inputs or []), keep=keep or [], case=case)
        if warm is not None:
            result, started, attempts, files = warm
            return _outcome(result, started=started, attempts=attempts, files=files)
    runner = SubprocessRunner(case)
    try:
        owned = _scratch("ckptrescue-sandbox-")
    except OSError as exc:
        return ChildOutcome("sandbox-unavailable", reason=_no_scratch(exc, "the real load"))
    scratch = owned.path
    try:
        req_path = os.path.join(scratch, "request.json")
        try:
            with open(req_path, "w") as fh:
                json.dump({**request, "scratch": scratch}, fh)
        except OSError as exc:
            return ChildOutcome("sandbox-unavailable", reason=_no_scratch(exc, "the real load"))
        env = {**CHILD_ENV, "HOME": scratch, "TMPDIR": os.path.join(scratch, "tmp"),
               **(env_extra or {})}
        # -I isolates from the user's site/env, -B writes no bytecode; the package path is
        # passed explicitly.
        argv = [*bwrap_argv(scratch=scratch, inputs=list(inputs or []), bwrap=bwrap), "--",
                child_python(), "-I", "-B", "-c",
                "import sys; sys.path.insert(0, sys.argv.pop(1)); import runpy; "
                "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)",
                package_root(), f"ckptrescue.sandbox_children.{child}", req_path]
        result = runner.run_internal(
            argv, purpose=f"sandbox:{child}", timeout_s=timeout_s, env_extra=env,
            preexec=_limits(memory_mb, cpu),
        )
        started = os.path.exists(os.path.join(scratch, STARTED))
        attempts = read_attempts(scratch)
        files = keep_files(scratch, keep or [])
    finally:
        owned.remove()
    return _outcome(result, started=started, attempts=attempts, files=files)


def _scratch(prefix: str) -> scratch_dirs.Scratch:
    """A fresh scratch directory (with its ``tmp``) under the temporary directory, owned by
    this process (``effects/scratch.py``: a ``kill -9`` leaves it to the next process)."""
    owned = scratch_dirs.make(prefix)
    try:
        os.mkdir(os.path.join(owned.path, "tmp"))
    except OSError:
        owned.remove()
        raise
    return owned


def _no_scratch(exc: OSError, what: str) -> str:
    """Why nothing ran when the scratch directory could not be written (a full disk)."""
    # never tempfile.gettempdir() here: where no directory is usable it raises this again
    where = tempfile.tempdir or os.environ.get("TMPDIR") or "/tmp"
    return (f"the sandbox's scratch directory under {where} could not be written "
            f"({exc.strerror or exc}): {what} was not run (free space there, or point TMPDIR "
            "elsewhere)")


def _outcome(result: Any, *, started: bool, attempts: list[JsonObject],
             files: dict[str, str]) -> ChildOutcome:
    tail = result.stderr[-2000:]
    rc = result.returncode
    common: JsonObject = {"returncode": rc, "stderr_tail": tail,
                              "duration_s": result.duration_s, "files": files}
    sig = _signal_of(rc, sandboxed=True)
    if attempts or sig == "SIGSYS":
        tried = ", ".join(sorted({str(a.get("event")) for a in attempts})) or "a system call"
        how = ("killed by the seccomp filter (SIGSYS)" if sig == "SIGSYS"
               else "refused by the audit hook")
        return ChildOutcome("blocked", attempts=attempts, signal_name=sig,
                            reason=f"the loader tried {tried}: {how}", **common)
    if result.timed_out:
        return ChildOutcome("timeout", **common)
    if not started:
        return ChildOutcome("sandbox-unavailable", signal_name=sig, reason=(
            "the sandbox could not start the child (bubblewrap: "
            + (tail.strip().splitlines() or ["no message"])[-1][:300]
            + "): the real load was not run"), **common)
    if sig is not None:
        status = "killed" if sig in {"SIGKILL", "SIGXCPU"} else "crashed"
        return ChildOutcome(status, signal_name=sig, **common)
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    try:
        payload = json.loads(lines[-1]) if lines else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        status = "crashed" if rc else "bad-output"
        if "MemoryError" in tail or "std::bad_alloc" in tail:
            status = "killed"
        return ChildOutcome(status, **common)
    status = "ok" if payload.get("ok", rc == 0) else "error"
    return ChildOutcome(status, result=payload, **common)


# ---- a responder's own command, confined ---------------------------------------------------------

_TRAMPOLINE = ("import os, sys; open(sys.argv[1], 'x').close(); "
               "os.execvp(sys.argv[2], sys.argv[2:])")
_CONFINED_STARTED = ".ckptrescue-started"


@dataclass
class ConfinedRun:
    """What a responder's command did in :func:`run_confined`. ``status``: ``exited`` (see
    ``returncode``/``signal_name``), ``timeout`` (wall clock: its whole process tree killed) or
    ``sandbox-unavailable`` (nothing ran). ``stdout``/``stderr`` are capped in-memory copies;
    the digests are SHA-256 of what the command wrote (the case's artifacts when there is one)."""

    status: str
    argv: list[str]
    returncode: int | None = None
    signal_name: str | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    truncated: bool = False
    duration_s: float = 0.0
    reason: str = ""
    limits: dict[str, Any] = field(default_factory=dict)


def confined_view_argv(*, scratch: str, readable: list[str], bwrap: str = BWRAP) -> list[str]:
    """bubblewrap for a command of the responder's (an eval script): the host's whole filesystem
    read-only (submounts included), only ``scratch`` writable, no network, its own user, pid,
    ipc, uts and mount namespaces, a minimal ``/dev`` (no block devices), ``--cap-drop ALL``,
    no_new_privs, ``--die-with-parent``; ``readable`` (the checkpoint) re-bound read-only at its
    path so that it is visible even under a directory the view would hide."""
    argv = [bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net",
            "--unshare-uts", "--unshare-cgroup-try", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--hostname", "ckptrescue-eval",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *PROC_READ_ONLY]
    for path in readable:
        real = os.path.realpath(path)
        argv += ["--ro-bind", real, real]
    argv += ["--bind", scratch, scratch, "--chdir", scratch]
    return argv


def run_confined(
    argv: list[str],
    *,
    case: Case | None = None,
    purpose: str = "confined",
    memory_mb: int | None = 4096,
    timeout_s: float = 600.0,
    cpu_s: int | None = None,
    readable: list[str] | None = None,
    max_output_bytes: int = 16 << 20,
) -> ConfinedRun:
    """Run a command of the responder's (not one of the kit's children, not a forensic tool:
    the guard's allowlist does not apply) confined: :func:`confined_view_argv`, plus
    address-space, CPU-time, file-size and core rlimits, a wall-clock timeout, its own process
    group and pid namespace (on timeout bubblewrap is killed, and with it every process of the
    namespace), and a fresh scratch directory as cwd, ``HOME`` and ``TMPDIR`` (removed
    afterwards). argv only, never a shell. A tiny trampoline (``python -I -S``) marks the
    start inside the sandbox and execs the command, so that bubblewrap failing to build the
    sandbox is told apart from the command failing; there is no unconfined fallback."""
    limits = {"memory_mb": memory_mb, "timeout_s": timeout_s,
              "cpu_s": cpu_s or int(timeout_s) + 5, "network": False,
              "writable": "scratch directory only"}
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return ConfinedRun("sandbox-unavailable", list(argv), limits=limits, reason=(
            "bubblewrap (bwrap) is not installed: the command was not run (install the Debian "
            "package bubblewrap)"))
    runner = SubprocessRunner(case)
    try:
        owned = _scratch("ckptrescue-eval-")
    except OSError as exc:
        return ConfinedRun("sandbox-unavailable", list(argv), limits=limits,
                           reason=_no_scratch(exc, "the command"))
    scratch = owned.path
    try:
        marker = os.path.join(scratch, _CONFINED_STARTED)
        env = {"HOME": scratch, "TMPDIR": os.path.join(scratch, "tmp"),
               "PYTHONDONTWRITEBYTECODE": "1"}
        full = [*confined_view_argv(scratch=scratch, readable=list(readable or []), bwrap=bwrap),
                "--", child_python(), "-I", "-S", "-c", _TRAMPOLINE, marker, *argv]
        result = runner.run_internal(full, purpose=purpose, timeout_s=timeout_s,
                                     env_extra=env, max_output_bytes=max_output_bytes,
                                     preexec=_limits(memory_mb, limits["cpu_s"]))
        started = os.path.exists(marker)
    finally:
        owned.remove()
    run = ConfinedRun(
        "timeout" if result.timed_out else "exited", list(argv), returncode=result.returncode,
        signal_name=_signal_of(result.returncode, sandboxed=True), stdout=result.stdout,
        stderr=result.stderr, truncated=result.truncated, duration_s=result.duration_s,
        stdout_sha256=result.stdout_sha256 or hashlib.sha256(result.stdout_bytes).hexdigest(),
        stderr_sha256=result.stderr_sha256 or hashlib.sha256(result.stderr_bytes).hexdigest(),
        limits=limits)
    if not started and not result.timed_out:
        tail = result.stderr.strip().splitlines() or ["no message"]
        run.status = "sandbox-unavailable"
        run.reason = (f"the sandbox could not start the command (bubblewrap: {tail[-1][:300]}): "
                      "it was not run")
    return run
