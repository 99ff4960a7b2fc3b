"""``python -c CODE ARGS...`` for the tests' oracles, without importing the libraries each time.

An oracle runs the real library's loader (DeepSpeed, Accelerate, Lightning, megatron-core on
torch) on a checkpoint a test made: importing those costs 1-3 CPU-s, the load itself a fraction
of that. Here each run is a fresh child forked from a process that has imported them already
(one such process per pytest worker and environment, started on first use; as a DataLoader's
workers are forked from a process with torch imported). The child runs the code as ``python
-c`` would: the same ``sys.argv``, cwd, ``__main__`` and environment, stdin empty, stdout and
stderr captured, the same exit status. What it imports beyond the preloaded libraries, and
everything it does, happens in the child and is gone with it.

The process imports exactly the libraries of :data:`PRELOADABLE` that the code imports before
anything else (:func:`modules_of`); code that imports none of them runs as a plain subprocess,
as does everything when a Python thread runs after those imports (forking would copy its locks
half-held) or ``CKPTRESCUE_TEST_COLD_ORACLES=1`` is set.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import subprocess
import sys
from pathlib import Path

PRELOADABLE = ("torch", "accelerate", "deepspeed", "lightning", "pytorch_lightning",
               "megatron", "safetensors")
_SERVER = Path(__file__).with_name("warm_server.py")


def modules_of(code: str) -> tuple[str, ...]:
    """The modules of :data:`PRELOADABLE` that ``code`` imports before it does anything that
    could change what an import does: its top-level statements are read in order, and only
    imports, ``warnings`` calls and ``sys.path`` calls may come before (the first other
    statement ends the list). A process with these imported is what the code would be
    after its own imports, whatever ran before."""
    out: list[str] = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module and not node.level else []
        elif _harmless(node):
            continue
        else:
            break
        out += [n for n in names if n.split(".")[0] in PRELOADABLE and n not in out]
    return tuple(out)


def _harmless(node: ast.stmt) -> bool:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    text = ast.unparse(func)
    return text.startswith(("warnings.", "sys.path."))


class _Server:
    def __init__(self, env: dict[str, str], cwd: str, modules: tuple[str, ...]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER.read_text()], cwd=cwd,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.usable = bool(self.ask({"preload": list(modules)})["ok"])

    def ask(self, request: dict[str, object]) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm oracle process ended ({self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# one process per environment, cwd and set of modules imported ahead: a library imported for
# one oracle can change what another does (megatron-core and Lightning register torch safe
# globals when imported). The last few stay alive (the tests of a module run one after another).
_SERVERS: dict[tuple[object, ...], _Server] = {}
KEEP = 3


@atexit.register
def _close_all() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def _server(env: dict[str, str], cwd: str, modules: tuple[str, ...]) -> _Server:
    key = (tuple(sorted(env.items())), cwd, modules)
    server = _SERVERS.pop(key, None)
    if server is None or server.proc.poll() is not None:
        server = _Server(env, cwd, modules)
    _SERVERS[key] = server  # the most recently used last
    while len(_SERVERS) > KEEP:
        _SERVERS.pop(next(iter(_SERVERS))).close()
    return server


def run(code: str, *args: str, cwd: str | Path, env: dict[str, str] | os._Environ[str],
        timeout: float = 600, input: str = "") -> subprocess.CompletedProcess[str]:
    """What ``subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
    input=input, capture_output=True, text=True, timeout=timeout)`` returns."""
    env = dict(env)
    argv = [sys.executable, "-c", code, *args]
    modules = modules_of(code)
    server = _server(env, str(cwd), modules) \
        if modules and not os.environ.get("CKPTRESCUE_TEST_COLD_ORACLES") else None
    if server is None or not server.usable:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, input=input)
    answer = server.ask({"code": code, "args": list(args), "cwd": str(cwd),
                         "timeout": timeout, "input": input})
    if answer.get("timeout"):
        raise subprocess.TimeoutExpired(argv, timeout, str(answer["stdout"]),
                                        str(answer["stderr"]))
    return subprocess.CompletedProcess(argv, int(answer["returncode"]),  # type: ignore[call-overload]
                                       str(answer["stdout"]), str(answer["stderr"]))
