"""playbooks/ and reports/templates/ ship inside the wheel and are found through importlib
resources from a fresh virtual environment (not from the checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# one worker builds the wheel once: two `pip wheel` of the same tree at once share its build/
# and *.egg-info directories, and one of them fails (seen on a fresh clone under pytest-xdist)
pytestmark = pytest.mark.xdist_group("wheel")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO)],
        check=True, capture_output=True, timeout=300,
    )
    return next(out.glob("ckptrescue-*.whl"))


def test_wheel_contains_playbooks_and_templates(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped_playbooks = sorted(p.name for p in (REPO / "playbooks").glob("*.yaml"))
    shipped_templates = sorted(p.name for p in (REPO / "reports" / "templates").glob("*.j2"))
    assert shipped_playbooks and shipped_templates
    for name in shipped_playbooks:
        assert f"ckptrescue/_data/playbooks/{name}" in names
    for name in shipped_templates:
        assert f"ckptrescue/_data/report_templates/{name}" in names


def test_every_code_package_is_in_the_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for init in (REPO / "ckptrescue").rglob("__init__.py"):
        rel = init.relative_to(REPO).as_posix()
        assert rel in names, f"{rel} missing from the wheel (add it to [tool.setuptools] packages)"


def test_resources_resolve_from_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not the checkout
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=env)
    code = (
        "from ckptrescue.resources import data_dir\n"
        "p = data_dir('playbooks'); t = data_dir('report_templates')\n"
        "print(p); print(t)\n"
        "print(sorted(x.name for x in p.iterdir() if x.suffix == '.yaml')[0])\n"
    )
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path, timeout=60, env=env)
    playbooks, templates, first = res.stdout.split()
    assert str(venv) in playbooks and str(venv) in templates
    assert "site-packages/ckptrescue/_data" in playbooks
    assert first.endswith(".yaml")
