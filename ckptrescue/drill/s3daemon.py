"""The drill's S3-compatible server: moto on 127.0.0.1 in a detached background process.

``spawn(state_dir)`` starts ``python -m ckptrescue.drill.s3daemon STATE_DIR`` in its own session
and waits for the endpoint; the process serves until ``stop(state_dir)`` sends SIGTERM (or it is
killed). Only the drill starts it; ``ckptrescue drill DIR --stop`` and the tests stop it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ckptrescue.errors import ToolFailedError

STATE = "s3server.json"


def spawn(state_dir: Path, *, timeout_s: float = 60.0) -> dict[str, object]:
    state = state_dir / STATE
    state.unlink(missing_ok=True)
    from ckptrescue.effects.runner import spawn_detached

    proc = spawn_detached([sys.executable, "-m", "ckptrescue.drill.s3daemon", str(state_dir)],
                          log=state_dir / "s3server.log", env_extra={"PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if state.exists():
            info = json.loads(state.read_text())
            if info.get("pid") == proc.pid:
                return dict(info)
        if proc.poll() is not None:
            raise ToolFailedError(f"the drill's S3 server exited early; see {state_dir}/s3server.log")
        time.sleep(0.1)
    proc.kill()
    raise ToolFailedError("the drill's S3 server did not start in time")


def stop(state_dir: Path) -> bool:
    """Stop the server recorded in ``state_dir``; True when one was stopped."""
    state = state_dir / STATE
    if not state.exists():
        return False
    info = json.loads(state.read_text())
    pid = int(info.get("pid", 0))
    stopped = False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"ckptrescue.drill.s3daemon" in cmdline:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
            stopped = True
    except (OSError, ValueError):
        pass
    state.unlink(missing_ok=True)
    return stopped


def main() -> None:
    from ckptrescue.stores.s3.localserver import start_local_s3

    state_dir = Path(sys.argv[1])
    server = start_local_s3()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    tmp = state_dir / (STATE + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "endpoint_url": server.endpoint_url,
                               "region": server.region}))
    tmp.replace(state_dir / STATE)
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
