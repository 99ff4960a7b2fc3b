"""The oracles' warm ``python -c``: what a test sees is what a plain ``python -c`` gives."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

# each imports a library of PRELOADABLE first (safetensors: a light one), so that it runs in a
# child of a process that imported it
CASES = {
    "output": ("import safetensors, sys; print('out', sys.argv[1:]); print('err', file=sys.stderr)",
               ["a b", "c"]),
    "exit code": ("import safetensors, sys; print('before'); sys.exit(3)", []),
    "exit text": ("import safetensors, sys; sys.exit('gave up')", []),
    "exception": ("import safetensors\ndef f():\n    raise ValueError('no')\nf()", []),
    "cwd and path": ("import safetensors, os, sys; print(os.getcwd(), sys.path[0] == '', __name__)",
                     []),
    "env": ("import safetensors, os; print(sorted(k for k in os.environ if k.startswith('WARM_')))",
            []),
    "atexit and stdin": ("import safetensors, atexit, sys; atexit.register(print, 'bye');"
                         "print(repr(sys.stdin.read()))", []),
    "ctrl-c": ("import safetensors; raise KeyboardInterrupt", []),
    "threads joined": ("import safetensors, threading, time\n"
                       "threading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()",
                       []),
    "carriage return": ("import safetensors; print('a\\rb\\r\\nc')", []),
    "raw streams": ("import safetensors, sys; sys.__stdout__.write('raw\\n');"
                    "sys.__stdout__.flush(); print('\\udc80', file=sys.stderr)", []),
    "exit codes wrap": ("import safetensors, sys; sys.exit(-1)", []),
    "torch as loaded": ("import torch, sys; t = torch.arange(6, dtype=torch.int16);"
                        "print(t.sum().item(), sys.argv[0], len(torch.serialization."
                        "get_safe_globals()))", []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_warm_run_answers_as_python_c(name: str, tmp_path: Path) -> None:
    code, args = CASES[name]
    env = {"PATH": "/usr/bin:/bin", "WARM_A": "1", "PYTHONPATH": str(Path.cwd())}
    cold = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    warm = warm_python.run(code, *args, cwd=tmp_path, env=env, timeout=120)
    assert warm_python.modules_of(code) in (("safetensors",), ("torch",))
    assert warm_python.last_run_warm  # this run was a warm child's
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout,
                                                            cold.stderr)


def test_each_run_is_a_fresh_child_of_the_preloaded_process(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    code = ("import os, sys, torch; print(os.getpid(), os.getppid(), 'x' in globals());"
            "x = 1; sys.modules['torch'].marked = True")
    first = warm_python.run(code, cwd=tmp_path, env=env).stdout.split()
    second = warm_python.run(code + "; print(getattr(torch, 'marked', None))",
                             cwd=tmp_path, env=env).stdout.split()
    assert first[1] == second[1] != str(os.getpid())  # both forked from the warm process
    assert first[0] != second[0]  # ... as two children
    assert first[2] == second[2] == "False"  # no global of the first run in the second
    # what a run did to a preloaded module is gone with its child
    check = warm_python.run("import torch; print(hasattr(torch, 'marked'))", cwd=tmp_path,
                            env=env)
    assert check.stdout.strip() == "False"


def test_a_run_that_overruns_is_killed_and_raised(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run("import safetensors, time; print('started', flush=True); "
                        "time.sleep(30)", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                        timeout=0.5)
    assert warm_python.last_run_warm
    after = warm_python.run("import safetensors, time; print('next')", cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin"})
    assert after.stdout == "next\n" and warm_python.last_run_warm  # the warm process serves on


def test_only_what_the_code_imports_first_is_imported_ahead() -> None:
    code = ("import torch.nn, json\nimport warnings; warnings.simplefilter('ignore')\n"
            "import sys; sys.path.insert(0, '.')\nfrom accelerate import Accelerator\n"
            "from fixtures.families.accelerate import make_objects\nfrom . import x\n"
            "def f():\n    import deepspeed.checkpoint\n"
            "import megatron.core\n")
    assert warm_python.modules_of(code) == ("torch.nn",)
    # anything that could change what a later import does ends the list: sys.path, the
    # environment, another package's import, warnings made errors
    assert warm_python.modules_of("import warnings; warnings.simplefilter('ignore')\n"
                                  "from accelerate import Accelerator") == ("accelerate",)
    for first in ("import os; os.environ['X'] = '1'", "import tinylm",
                  "import warnings; warnings.filterwarnings('error')", "print(1)"):
        assert warm_python.modules_of(first + "\nimport deepspeed") == (), first
    assert warm_python.prefix_of("import json\nprint(1)") is None  # nothing to gain


def test_a_library_imported_for_one_oracle_is_not_in_another(tmp_path: Path) -> None:
    """megatron-core registers torch safe globals when imported: an oracle that imports only
    torch must not see them because another oracle imported megatron-core."""
    if importlib.util.find_spec("megatron") is None:  # not imported here: only its presence
        pytest.skip("megatron-core is not installed")
    env = {"PATH": "/usr/bin:/bin"}
    count = "import torch; print(len(torch.serialization.get_safe_globals()))"
    alone = warm_python.run(count, cwd=tmp_path, env=env).stdout
    more = warm_python.run("import megatron.core, torch\n" + count, cwd=tmp_path, env=env)
    assert int(more.stdout) > int(alone)  # what is at stake
    assert warm_python.run(count, cwd=tmp_path, env=env).stdout == alone


def test_what_a_library_prints_when_imported_is_in_every_run(tmp_path: Path) -> None:
    """DeepSpeed without DS_ACCELERATOR prints a line on stdout when imported: each warm run
    shows it as python -c does, and it never mixes with the warm process's replies."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed")
    env = {"PATH": "/usr/bin:/bin"}
    code = "import deepspeed, sys; print('mine'); print('err', file=sys.stderr)"
    cold = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert cold.stdout != "mine\n"  # what is at stake: the import printed something
    for _ in range(2):
        warm = warm_python.run(code, cwd=tmp_path, env=env, timeout=300)
        assert warm_python.last_run_warm
        assert (warm.returncode, untimed(warm.stdout)) == (cold.returncode, untimed(cold.stdout))


def untimed(text: str) -> str:
    return re.sub(r"^\[\d{4}-[^\]]*\]", "[time]", text, flags=re.M)  # a log line's clock
