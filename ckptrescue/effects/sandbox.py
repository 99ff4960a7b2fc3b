"""Run real ML loaders (torch, tensorflow) in a separate, resource-limited child process.

The parent never imports torch or tensorflow for a load. A child is
``python -I -m ckptrescue.sandbox_children.<name> REQUEST.json``: it reads the JSON request, does
its work, and prints one JSON object on stdout. The child runs with address-space/CPU/core
rlimits, a wall-clock timeout, no stdin, a minimal environment (no credentials, no proxies), in
its own process group, through :meth:`SubprocessRunner.run_internal` so the run is audited.

A crash, a signal death, a hang or an out-of-memory kill of the child is an outcome
(:class:`ChildOutcome`), never an exception in ckptrescue.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner

if TYPE_CHECKING:
    from ckptrescue.case import Case


@dataclass
class ChildOutcome:
    """What the child did: ``status`` is ok, error, crashed, killed, timeout or bad-output."""

    status: str
    result: dict[str, Any] = field(default_factory=dict)
    returncode: int | None = None
    signal_name: str | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "result": self.result,
            "returncode": self.returncode,
            "signal": self.signal_name,
            "stderr_tail": self.stderr_tail,
            "duration_s": round(self.duration_s, 3),
        }


def _limits(memory_mb: int | None, cpu_s: int | None) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory_mb:
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if cpu_s:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))

    return apply


def run_child(
    child: str,
    request: dict[str, Any],
    *,
    case: Case | None = None,
    memory_mb: int | None = 4096,
    timeout_s: float = 300.0,
    cpu_s: int | None = None,
    env_extra: dict[str, str] | None = None,
) -> ChildOutcome:
    """Run ``ckptrescue.sandbox_children.<child>`` on ``request`` and return its outcome."""
    runner = SubprocessRunner(case)
    fd, req_path = tempfile.mkstemp(prefix="ckptrescue-req-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(request, fh)
        env = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}
        if env_extra:
            env.update(env_extra)
        # -I isolates from the user's site/env; the package path is passed explicitly.
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        argv = [sys.executable, "-I", "-c",
                "import sys; sys.path.insert(0, sys.argv.pop(1)); import runpy; "
                "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)",
                pkg_root, f"ckptrescue.sandbox_children.{child}", req_path]
        result = runner.run_internal(
            argv, purpose=f"sandbox:{child}", timeout_s=timeout_s, env_extra=env,
            preexec=_limits(memory_mb, cpu_s or int(timeout_s) + 5),
        )
    finally:
        os.unlink(req_path)
    tail = result.stderr[-2000:]
    if result.timed_out:
        return ChildOutcome("timeout", returncode=result.returncode, stderr_tail=tail,
                            duration_s=result.duration_s)
    rc = result.returncode
    if rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        status = "killed" if name in {"SIGKILL", "SIGXCPU"} else "crashed"
        return ChildOutcome(status, returncode=rc, signal_name=name, stderr_tail=tail,
                            duration_s=result.duration_s)
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    try:
        payload = json.loads(lines[-1]) if lines else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        status = "crashed" if rc else "bad-output"
        if "MemoryError" in tail or "std::bad_alloc" in tail:
            status = "killed"
        return ChildOutcome(status, returncode=rc, stderr_tail=tail, duration_s=result.duration_s)
    status = "ok" if payload.get("ok", rc == 0) else "error"
    return ChildOutcome(status, result=payload, returncode=rc, stderr_tail=tail,
                        duration_s=result.duration_s)
