"""The oracles' warm ``python -c``: what a test sees is what a plain ``python -c`` gives."""

from __future__ import annotations

import os
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
    ahead = warm_python.modules_of(code)
    assert ahead in (("safetensors",), ("torch",))
    assert any(key[2] == ahead and s.usable for key, s in warm_python._SERVERS.items())
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
        warm_python.run("import time; print('started', flush=True); time.sleep(30)",
                        cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout=0.5)
    after = warm_python.run("print('next')", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert after.stdout == "next\n"  # the warm process serves on


def test_only_what_the_code_imports_first_is_imported_ahead() -> None:
    code = ("import torch.nn, json\nimport warnings; warnings.simplefilter('ignore')\n"
            "import sys; sys.path.insert(0, '.')\nfrom accelerate import Accelerator\n"
            "from fixtures.families.accelerate import make_objects\nfrom . import x\n"
            "def f():\n    import deepspeed.checkpoint\n"
            "import megatron.core\n")
    assert warm_python.modules_of(code) == ("torch.nn", "accelerate")
    # anything else first (here: the environment an import may read) ends the list
    assert warm_python.modules_of("import os; os.environ['X'] = '1'; import deepspeed") == ()
    assert warm_python.modules_of("print(1)") == ()


def test_a_library_imported_for_one_oracle_is_not_in_another(tmp_path: Path) -> None:
    """megatron-core registers torch safe globals when imported: an oracle that imports only
    torch must not see them because another oracle imported megatron-core."""
    pytest.importorskip("megatron.core")
    env = {"PATH": "/usr/bin:/bin"}
    count = "import torch; print(len(torch.serialization.get_safe_globals()))"
    alone = warm_python.run(count, cwd=tmp_path, env=env).stdout
    more = warm_python.run("import megatron.core, torch\n" + count, cwd=tmp_path, env=env)
    assert int(more.stdout) > int(alone)  # what is at stake
    assert warm_python.run(count, cwd=tmp_path, env=env).stdout == alone
