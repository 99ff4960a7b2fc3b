"""Docs stay true to the code: generated files are current, every finding code the code emits is
documented, every command appears in the README table and the CLI reference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current() -> None:
    res = subprocess.run([sys.executable, str(REPO / "docs" / "generate.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_every_emitted_code_is_in_the_catalogue() -> None:
    from ckptrescue.codes import all_codes

    known = set(all_codes())
    used: set[str] = set()
    for path in (REPO / "ckptrescue").rglob("*.py"):
        if "codes" in path.parts:
            continue
        used |= set(re.findall(r'["\']([A-Z][A-Z0-9]\d{3})["\']', path.read_text()))
    missing = sorted(used - known)
    assert not missing, f"codes used but not documented in ckptrescue/codes/: {missing}"


def test_every_top_level_command_is_in_the_readme() -> None:
    import typer.main

    from ckptrescue.cli.main import app

    readme = (REPO / "README.md").read_text()
    group = typer.main.get_command(app)
    for name in group.commands:  # type: ignore[attr-defined]
        assert f"`{name}" in readme or f" {name} " in readme, f"{name} missing from README"


def test_readme_links_exist() -> None:
    readme = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if target.startswith("http"):
            continue
        assert (REPO / target).exists(), f"README links to missing {target}"
