"""The dependency rule at run time, in fresh interpreters: what importing the pure core, the
format plugins (found by ``importlib``, which no import statement shows) and the engine with its
action registry actually loads. The static rule, every import statement, is
``test_dependency_rule.py``."""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN_FOR_CORE = ("ckptrescue.effects", "subprocess", "textual", "typer", "jinja2", "torch",
                      "tensorflow", "boto3")
FORBIDDEN_FOR_ENGINE = ("ckptrescue.cli", "ckptrescue.tui", "textual", "typer", "torch",
                        "tensorflow", "boto3")


def imported_after(module: str) -> set[str]:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"import {module}\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(res.stdout.split())


@pytest.mark.parametrize("module", ["ckptrescue.model", "ckptrescue.guard",
                                    "ckptrescue.checkpoints.base", "ckptrescue.storage.parsers",
                                    "ckptrescue.checkpoints.formats.torch_zip",
                                    "ckptrescue.checkpoints.formats.pickle_scan",
                                    "ckptrescue.checkpoints.formats.tensorbundle"])
def test_core_is_pure(module: str) -> None:
    loaded = imported_after(module)
    bad = sorted(m for m in loaded for f in FORBIDDEN_FOR_CORE if m == f or m.startswith(f + "."))
    assert not bad, f"{module} pulls in {bad}"


def test_all_formats_are_pure() -> None:
    loaded = imported_after("ckptrescue.checkpoints.base; from ckptrescue.checkpoints.base import formats; "
                            "formats()")
    bad = sorted(m for m in loaded for f in FORBIDDEN_FOR_CORE if m == f or m.startswith(f + "."))
    assert not bad, f"format discovery pulls in {bad}"


def test_engine_has_no_ui() -> None:
    loaded = imported_after("ckptrescue.engine.executor; from ckptrescue.actions import registry; "
                            "registry()")
    bad = sorted(m for m in loaded for f in FORBIDDEN_FOR_ENGINE
                 if m == f or m.startswith(f + "."))
    assert not bad, f"the engine pulls in {bad}"
