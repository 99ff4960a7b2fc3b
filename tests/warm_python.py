"""``python -c CODE ARGS...`` for the tests' oracles, without importing the libraries each time.

An oracle runs the real library's loader (DeepSpeed, Accelerate, Lightning, megatron-core on
torch) on a checkpoint a test made: importing those costs 1-3 CPU-s, the load itself a fraction
of that. Here each run is a fresh child forked from a process that has run the code's first
statements already, its imports of those libraries (one such process per pytest worker,
environment, cwd and first statements, started on first use; as a DataLoader's workers are
forked from a process with torch imported). The child runs the rest as ``python -c`` would:
the same ``sys.argv``, cwd, environment, a fresh ``__main__``, stdin, the output the first
statements printed followed by its own, the same exit status. Everything it does happens in
the child and is gone with it.

The first statements are those that cannot depend on anything before them
(:func:`prefix_of`): imports of the standard library and of :data:`PRELOADABLE`, and calls
that make warnings ignored. Code whose first statements import none of those libraries runs
as a plain subprocess, as does everything when the first statements fail or leave a Python
thread running (forking would copy its locks half-held), or when
``CKPTRESCUE_TEST_COLD_ORACLES=1`` is set.
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
_PER_RUN = ("PYTEST_CURRENT_TEST",)  # set anew for each test phase: the child gets the new one


def _first_statements(code: str) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif _ignores_warnings(node):
            out.append(node)
            continue
        else:
            break
        roots = {n.split(".")[0] for n in names}
        if not roots <= set(sys.stdlib_module_names) | set(PRELOADABLE):
            break
        out.append(node)
    return out


def _ignores_warnings(node: ast.stmt) -> bool:
    """``warnings.simplefilter("ignore")`` / ``warnings.filterwarnings("ignore", ...)``."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    call = node.value
    return ast.unparse(call.func) in ("warnings.simplefilter", "warnings.filterwarnings") \
        and bool(call.args) and isinstance(call.args[0], ast.Constant) \
        and call.args[0].value == "ignore"


def modules_of(code: str) -> tuple[str, ...]:
    """The modules of :data:`PRELOADABLE` the code's first statements import, in order."""
    out: list[str] = []
    for node in _first_statements(code):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        out += [n for n in names if n.split(".")[0] in PRELOADABLE and n not in out]
    return tuple(out)


def prefix_of(code: str) -> str | None:
    """The code's first statements, run ahead in the warm process; None when they import no
    library of :data:`PRELOADABLE` (nothing to gain)."""
    if not modules_of(code):
        return None
    return ast.unparse(ast.Module(body=_first_statements(code), type_ignores=[]))


class _Server:
    def __init__(self, env: dict[str, str], cwd: str, prefix: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER.read_text()], cwd=cwd,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.usable = bool(self.ask({"prefix": prefix})["ok"])

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


# one process per environment, cwd and first statements: a library imported for one oracle
# can change what another does (megatron-core and Lightning register torch safe globals when
# imported). The last few stay alive (the tests of a module run one after another).
_SERVERS: dict[tuple[object, ...], _Server] = {}
KEEP = 3
last_run_warm = False  # whether the last :func:`run` ran in a warm child (for the tests)


@atexit.register
def _close_all() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def _server(env: dict[str, str], cwd: str, prefix: str) -> _Server:
    key = (tuple(sorted((k, v) for k, v in env.items() if k not in _PER_RUN)), cwd, prefix)
    server = _SERVERS.pop(key, None)
    if server is None or server.proc.poll() is not None:
        server = _Server(env, cwd, prefix)
    _SERVERS[key] = server  # the most recently used last
    while len(_SERVERS) > KEEP:
        _SERVERS.pop(next(iter(_SERVERS))).close()
    return server


def _text(out: str) -> str:
    """As ``text=True`` reads it (universal newlines)."""
    return out.replace("\r\n", "\n").replace("\r", "\n")


def run(code: str, *args: str, cwd: str | Path, env: dict[str, str] | os._Environ[str],
        timeout: float = 600, input: str = "") -> subprocess.CompletedProcess[str]:
    """What ``subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
    input=input, capture_output=True, text=True, timeout=timeout)`` returns."""
    global last_run_warm
    env = dict(env)
    argv = [sys.executable, "-c", code, *args]
    prefix = prefix_of(code)
    server = _server(env, str(cwd), prefix) \
        if prefix is not None and not os.environ.get("CKPTRESCUE_TEST_COLD_ORACLES") else None
    last_run_warm = server is not None and server.usable
    if server is None or not server.usable:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, input=input)
    answer = server.ask({"code": code, "args": list(args), "cwd": str(cwd), "env": env,
                         "timeout": timeout, "input": input})
    out, err = _text(str(answer["stdout"])), _text(str(answer["stderr"]))
    if answer.get("timeout"):
        raise subprocess.TimeoutExpired(argv, timeout, out, err)
    return subprocess.CompletedProcess(argv, int(answer["returncode"]),  # type: ignore[call-overload]
                                       out, err)
