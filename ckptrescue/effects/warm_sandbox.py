"""Warm loads: a zygote that imported torch once forks a confined child for each load.

A cold load (``sandbox.run_child``) starts bubblewrap and a fresh interpreter, which imports
torch: 1.1-1.7 s before the file is opened, for every checkpoint. A warm load forks a child of
a process that made those imports already, and costs tens of milliseconds. The boundary is the
same, built in a different order:

* the zygote (``sandbox_children/zygote.py``) runs in a user namespace of its own (the caller
  mapped to its root; of all capabilities only ``CAP_SYS_ADMIN``, ``CAP_SETPCAP`` and
  ``CAP_SYS_RESOURCE`` (``zygote.KEEP_CAPS``), there), with no network,
  its own ipc and uts namespaces, no further user namespaces, and in the host's mount
  namespace (:func:`zygote_argv` says why). It never reads a file it is asked to load: a
  one-shot handler it forks per load takes a copy of the mount namespace and opens each file
  ``O_PATH``, to check its identity and bind that very file.
* for each load, the zygote forks; the fork enters a new pid and ipc namespace, whose init
  builds the cold child's view itself (``sandbox_children/view.py``: the same binds,
  :func:`ckptrescue.effects.sandbox.view_binds`, in a mount namespace of its own, then
  ``pivot_root``) and forks the loader, which drops every capability, takes the same rlimits
  and environment, and installs the audit hook and the seccomp filter exactly as a cold child
  does (``zygote.py`` has the details). A loader shares nothing with the next but the zygote's
  memory image; a zygote is retired after a load that crashed, was killed or timed out, and
  after :data:`MAX_LOADS` loads.

What is warm: a child module that says ``WARM = True`` and does its heavy imports in
``prepare(request)`` (``torch_load``, ``model_keys``, ``echo``). TensorFlow stays cold: its
import starts threads, and the zygote refuses to fork while another thread runs.

A load runs cold instead when ``CKPTRESCUE_SANDBOX=cold`` is set, when the caller passes its
own environment, when every zygote of its kind is busy and the pool is full, or when the warm
machinery fails: a zygote that cannot start is not tried again in this process (the reason is
kept: :func:`unavailable`); a child that cannot build its view runs cold; a zygote that dies
or stops answering during a load is killed, and that load is run again cold (the cold run's
outcome is the one reported). A zygote belongs to the process that started it (a forked copy
starts its own) and ends when that process closes its socket, at exit or when it is killed.
It holds no mount: a load's copy of the mount namespace lives as long as the load. Still, a
zygote started in an engine step ends with it (``close_all``); one that another thread (another
step) is loading with ends when that load does.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptrescue.effects import scratch
from ckptrescue.effects.runner import minimal_env, redact, spawn_kept
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

MODE_ENV = "CKPTRESCUE_SANDBOX"  # "cold": every load in a fresh interpreter
READY_TIMEOUT_S = 180.0  # the zygote's imports
ANSWER_MARGIN_S = 30.0  # past the load's own limit, before the zygote is taken for dead
MAX_LOADS = 100  # a zygote is retired after this many loads
MAX_ANSWER = 1 << 20  # an answer is a few hundred bytes
_OUTPUT_FILES = (".warm-stdout", ".warm-stderr")  # zygote.OUTPUT_FILES


@dataclass
class WarmResult:
    """What a warm child did, as ``sandbox.run_child`` reads a cold child's ``ToolResult``."""

    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    record_hash: str | None = None


class ZygoteFailed(RuntimeError):
    """The zygote died, stopped answering or could not start: the load runs cold."""


def zygote_argv(unshare: str, base: str, module: str, fd: int, *, python: str,
                package_root: str) -> list[str]:
    """util-linux ``unshare`` for a zygote: a user namespace of its own (the caller mapped to
    its root), no network, its own ipc and uts namespaces, and **the host's mount namespace**:
    a zygote holds no copy of the host's mounts (a copy would keep every filesystem mounted when
    it started busy for its whole life, and see nothing mounted later). Each load's handler
    takes a copy of its own, for that load only."""
    return [unshare, "--user", "--map-root-user", "--net", "--ipc", "--uts", "--",
            python, "-I", "-B", "-c",
            "import sys; sys.path.insert(0, sys.argv.pop(1)); import runpy; "
            "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)",
            package_root, "ckptrescue.sandbox_children.zygote", module, str(fd), base]


class Zygote:
    """One warm process for one child module; one load at a time (``lock``)."""

    def __init__(self, child: str, bwrap: str, env: dict[str, str], case: Case | None
                 ) -> None:
        from ckptrescue.effects import sandbox

        self.child = child
        self.bwrap = bwrap
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self._closed = False
        self.lock_close = threading.Lock()
        unshare = shutil.which("unshare")
        if unshare is None:
            raise ZygoteFailed("util-linux unshare is not installed")
        self._owned = scratch.make("ckptrescue-warm-")  # a kill -9 leaves it to the next process
        self.base = self._owned.path
        ours, theirs = socket.socketpair()
        try:  # a full disk, or a start that fails: nothing of it is left
            os.mkdir(os.path.join(self.base, "root"))
            os.mkdir(os.path.join(self.base, "tmp"))
            self.argv = zygote_argv(unshare, self.base, f"ckptrescue.sandbox_children.{child}",
                                    theirs.fileno(), python=sandbox.child_python(),
                                    package_root=sandbox.package_root())
            tmp = os.path.join(self.base, "tmp")
            log = os.path.join(self.base, "zygote.log")
            self.proc = spawn_kept(self.argv, log=log, env_extra={**env, "HOME": tmp,
                                                                  "TMPDIR": tmp},
                                   pass_fds=(theirs.fileno(),), case=case,
                                   purpose=f"sandbox:{child} (warm)")
        except BaseException:
            ours.close()
            self._owned.remove()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self._buf = bytearray()
        try:
            ready = self._answer(READY_TIMEOUT_S)
        except ZygoteFailed as exc:
            tail = _tail(log)
            self.close()
            raise ZygoteFailed(f"{exc}{': ' + tail if tail else ''}") from None
        self.host_pid: int | None = self.proc.pid  # unshare exec'd the zygote itself
        if not ready.get("ready"):
            self.close()
            raise ZygoteFailed(f"the zygote answered {ready!r} instead of ready")
        self.loads = 0
        self._jobs = 0
        self.retiring = False  # ended when the thread using it lets go (close_all)

    @property
    def alive(self) -> bool:
        """Running, ours, and its socket open (an idle zygote sends nothing: a socket that
        reads is one the zygote's end closed)."""
        if self.proc.poll() is not None or self.owner != os.getpid():
            return False
        try:
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def _answer(self, timeout_s: float) -> JsonObject:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            try:
                readable = left > 0 and select.select([self.sock], [], [], left)[0]
            except (OSError, ValueError):  # closed under us
                raise ZygoteFailed("the zygote's socket was closed") from None
            if not readable:
                raise ZygoteFailed(f"no answer from the zygote in {timeout_s:.0f} s")
            try:
                block = self.sock.recv(1 << 16)
            except OSError as exc:
                raise ZygoteFailed(f"the zygote's socket failed: {exc}") from None
            if not block:
                raise ZygoteFailed(f"the zygote ended (status {self.proc.poll()})")
            self._buf += block
            if len(self._buf) > MAX_ANSWER:
                raise ZygoteFailed(f"the zygote's answer ran past {MAX_ANSWER} bytes")
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf[:] = rest
        try:
            answer = json.loads(line)
        except ValueError:
            raise ZygoteFailed("the zygote answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise ZygoteFailed("the zygote answered something that is not an object")
        return answer

    def ask(self, job: JsonObject, timeout_s: float, prepare: JsonObject) -> JsonObject:
        """One load: a note to the zygote (the module and ``prepare``: what of the request its
        imports need), then the job to the one-shot handler it forks; the answer is matched by
        id (one for another job means the conversation is lost)."""
        self._jobs += 1
        ident = self._jobs
        self._send({"id": ident, "module": job["module"], "request": prepare})
        answer = self._answer(READY_TIMEOUT_S)
        if not answer.get("go"):
            if answer.get("id") != ident:
                raise ZygoteFailed(f"the zygote answered {answer!r} to note {ident}")
            return answer
        self._send({**job, "id": ident})
        answer = self._answer(timeout_s + ANSWER_MARGIN_S)
        if answer.get("id") != ident:
            raise ZygoteFailed(f"the zygote answered job {answer.get('id')!r}, not {ident}")
        self.loads += 1
        return answer

    def _send(self, obj: JsonObject) -> None:
        try:
            self.sock.sendall(json.dumps(obj).encode() + b"\n")
        except OSError as exc:
            raise ZygoteFailed(f"the zygote's socket failed: {exc}") from None

    def close(self) -> None:
        """End the zygote and every process of its group (handlers, loads), then remove its
        directory. Our child until waited for, so its group id cannot have been reused; once
        waited for, never signalled again (a second close, at exit, is a no-op)."""
        with self.lock_close:
            if self._closed:
                return
            self._closed = True
        try:
            self.sock.close()
        finally:
            if self.owner == os.getpid():
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait()
            self._owned.remove()


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            lines = fh.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class _Pool:
    """The zygotes of this process, by child module and bubblewrap, and why a kind is not
    warm."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.zygotes: dict[tuple[str, str], list[Zygote]] = {}
        self.unavailable: dict[tuple[str, str], str] = {}
        self.at_exit = False  # close_all registered
        self.refused: dict[tuple[str, str], str] = {}  # the last view a child could not build
        self.generation = 0  # one more at each close_all: a zygote started across one retires

    def take(self, child: str, bwrap: str, env: dict[str, str], case: Case | None
             ) -> Zygote | None:
        """An idle zygote of ``child``'s kind, locked for the caller (a new one when all are
        busy and the pool has room), or None."""
        key = (child, bwrap)
        with self.lock:
            if key in self.unavailable:
                return None
            kept: list[Zygote] = []
            chosen: Zygote | None = None
            for zyg in self.zygotes.get(key, []):
                if not zyg.lock.acquire(blocking=False):
                    kept.append(zyg)  # busy: the thread using it judges it (an answer it
                    continue          # has not read yet makes its socket read as closed)
                if not zyg.alive or zyg.retiring:
                    zyg.close()
                    zyg.lock.release()
                    continue
                kept.append(zyg)
                if chosen is None:
                    chosen = zyg  # returned locked
                else:
                    zyg.lock.release()
            self.zygotes[key] = kept
            if chosen is not None:
                return chosen
            if len(kept) >= max(1, os.cpu_count() or 1):
                return None
            generation = self.generation
        try:
            zyg = Zygote(child, bwrap, env, case)
        except ZygoteFailed as exc:
            self.disable(key, f"the warm sandbox could not start: {exc}")
            return None
        except OSError:  # its directory or its log (a full disk): this load runs cold
            return None
        zyg.lock.acquire()
        with self.lock:
            if not self.at_exit:
                import atexit

                atexit.register(self.close_all, busy_too=True)
                self.at_exit = True
            # the step that wanted it ended while it started (close_all): it serves this
            # load, then ends
            zyg.retiring = self.generation != generation
            self.zygotes.setdefault(key, []).append(zyg)
        return zyg

    def drop(self, zyg: Zygote) -> None:
        with self.lock:
            kind = self.zygotes.get((zyg.child, zyg.bwrap), [])
            if zyg in kind:
                kind.remove(zyg)
        zyg.close()

    def disable(self, key: tuple[str, str], reason: str) -> None:
        with self.lock:
            self.unavailable[key] = reason

    def close_all(self, busy_too: bool = False) -> None:
        """End the idle zygotes; one another thread is loading with ends when that load
        does (``retiring``). ``busy_too`` (at exit) ends them all."""
        idle: list[Zygote] = []
        with self.lock:
            self.generation += 1
            for kind in self.zygotes.values():
                for zyg in list(kind):
                    if busy_too or zyg.lock.acquire(blocking=False):
                        kind.remove(zyg)
                        idle.append(zyg)
                    else:
                        zyg.retiring = True
        for zyg in idle:
            zyg.close()

    def release(self, zyg: Zygote) -> None:
        """The caller's load ended: the zygote is idle again, or ends if it was retired
        meanwhile (decided under the pool's lock, which close_all holds while it retires)."""
        with self.lock:
            retire = zyg.retiring
            if retire:
                kind = self.zygotes.get((zyg.child, zyg.bwrap), [])
                if zyg in kind:
                    kind.remove(zyg)
            else:
                zyg.lock.release()
        if retire:
            zyg.close()

    def after_fork_in_child(self) -> None:
        """In a forked copy: a fresh lock (the parent's may have been held by a thread the
        copy does not have), and none of the parent's zygotes (never the copy's to use or end).
        What made a kind cold stays."""
        self.lock = threading.Lock()
        self.zygotes = {}  # (the inherited atexit handler then finds only the copy's own)


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.after_fork_in_child)


def unavailable() -> dict[str, str]:
    """The child kinds that run cold in this process (``child (bubblewrap)``), and why; and
    the last reason a warm child could not build its view (that load ran cold)."""
    out = {f"{child} ({bwrap})": why for (child, bwrap), why in _POOL.unavailable.items()}
    for (child, bwrap), why in _POOL.refused.items():
        out.setdefault(f"{child} ({bwrap})", f"a child's view, last time: {why}")
    return out


def close_all() -> None:
    """End this process's zygotes at the end of each engine step: no process of the kit
    outlives the step that started it. A zygote loading for another thread ends when that load
    does."""
    _POOL.close_all()


def running() -> int:
    """How many zygotes this process has running."""
    with _POOL.lock:
        return sum(1 for kind in _POOL.zygotes.values() for z in kind
                   if z.proc.poll() is None)


def warm_capable(child: str, env_extra: dict[str, str] | None) -> bool:
    if env_extra or os.environ.get(MODE_ENV, "").strip().lower() == "cold":
        return False
    import importlib

    try:
        module = importlib.import_module(f"ckptrescue.sandbox_children.{child}")
    except ImportError:
        return False
    return getattr(module, "WARM", False) is True


def _prepare_keys(child: str, request: JsonObject) -> JsonObject:
    """What of ``request`` the zygote may see: the keys the child module's ``prepare`` reads."""
    import importlib

    module = importlib.import_module(f"ckptrescue.sandbox_children.{child}")
    keys = getattr(module, "PREPARE_KEYS", ())
    return {k: v for k, v in request.items() if k in keys}


def run_warm(child: str, request: JsonObject, *, bwrap: str, env: dict[str, str],
             rlimits: dict[str, tuple[int, int]], timeout_s: float, inputs: list[str],
             keep: list[str], case: Case | None) -> tuple[WarmResult, bool, list[JsonObject],
                                                        dict[str, str]] | None:
    """Run ``child`` warm: ``(result, started, attempts, kept files)``, or None when this load
    must run cold (see the module docstring)."""
    from ckptrescue.effects import sandbox

    identity: list[list[Any]] = []
    for path in inputs:
        try:
            st = os.stat(os.path.abspath(path))
        except OSError:
            return None  # the cold path reports what is missing
        identity.append([os.path.abspath(path), st.st_dev, st.st_ino])
    zyg = _POOL.take(child, bwrap, env, case)
    if zyg is None:
        return None
    scratch = ""
    dropped = False
    try:
        try:  # a full disk: the cold path meets it too, and says so
            scratch = os.path.realpath(tempfile.mkdtemp(prefix="scratch-", dir=zyg.base))
            os.mkdir(os.path.join(scratch, "tmp"))
            req_path = os.path.join(scratch, "request.json")
            with open(req_path, "w") as fh:
                json.dump({**request, "scratch": scratch}, fh)
        except OSError:
            return None
        job = {"module": f"ckptrescue.sandbox_children.{child}", "request": request,
               "request_path": req_path, "scratch": scratch,
               "new_root": os.path.join(zyg.base, "root"),
               "binds": sandbox.view_binds(scratch=scratch, inputs=inputs),
               "env": minimal_env({**env, "HOME": scratch,
                                   "TMPDIR": os.path.join(scratch, "tmp")}),
               "rlimits": rlimits, "timeout_s": timeout_s, "identity": identity}
        try:
            answer = zyg.ask(job, timeout_s, _prepare_keys(child, request))
        except ZygoteFailed:
            dropped = True
            _POOL.drop(zyg)
            return None
        except BaseException:  # Ctrl-C mid-load: the zygote's answer would be lost
            dropped = True
            _POOL.drop(zyg)
            raise
        if not answer.get("ran"):
            _POOL.refused[(child, bwrap)] = str(answer.get("reason"))[:300]
            return None
        status = answer.get("wait_status")
        # no status: the load's init ended before the loader did (only a kill does that)
        rc = (-signal.SIGKILL if not isinstance(status, int) else -os.WTERMSIG(status)
              if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        started = os.path.exists(os.path.join(scratch, sandbox.STARTED))
        out, out_cut = sandbox.read_scratch_bytes(scratch, _OUTPUT_FILES[0], 64 << 20)
        err, err_cut = sandbox.read_scratch_bytes(scratch, _OUTPUT_FILES[1], 64 << 20)
        result = WarmResult(rc, out[:16 << 20].decode("utf-8", "replace"),
                            err[-(16 << 20):].decode("utf-8", "replace"),
                            float(answer.get("duration_s") or 0.0),
                            bool(answer.get("timed_out")))
        if rc < 0 or result.timed_out or zyg.loads >= MAX_LOADS:
            dropped = True  # retire it: see the module docstring
            _POOL.drop(zyg)
        if case is not None:
            shas = [case.store_artifact(data, name=f"{child}.{stream}", kind=stream,
                                        log=False) if data else None
                    for stream, data in (("stdout", out), ("stderr", err))]
            rec = case.log("sandbox.run", {
                "argv": redact(zyg.argv), "purpose": f"sandbox:{child}",
                "warm": {"zygote_pid": zyg.host_pid, "bwrap_pid": zyg.proc.pid},
                "returncode": rc, "duration_s": round(result.duration_s, 3),
                "timed_out": result.timed_out, "stdout_sha256": shas[0],
                "stderr_sha256": shas[1], "timeout_s": timeout_s,
                "truncated": out_cut or err_cut},
                artifacts=[h for h in shas if h])
            result.record_hash = rec["hash"]
        return (result, started, sandbox.read_attempts(scratch),
                sandbox.keep_files(scratch, keep))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if not dropped:
            _POOL.release(zyg)
