"""ARCHITECTURE.md's "How to add…" stays true: in a temporary copy of the package, a toy
checkpoint format, multi-rank family, filesystem, action (with its command) and report section
are each added by touching only the files the recipe names, and the kit finds and runs them
with no other wiring. Each check runs in a fresh interpreter on the copy."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package and its shipped data (report templates, playbooks) copied to ``tmp_path``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "ckptrescue", tmp_path / "ckptrescue", ignore=ignore)
    shutil.copytree(REPO / "reports", tmp_path / "reports", ignore=ignore)
    shutil.copytree(REPO / "playbooks", tmp_path / "playbooks", ignore=ignore)
    return tmp_path


def run_in(copy: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def check(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def from_example(example: Path, target: Path, last_line: str, renames: dict[str, str]) -> None:
    """``target``: the documented example with its registration line switched on."""
    text = example.read_text(encoding="utf-8")
    text = text.replace(f"# {last_line}", last_line)
    for old, new in renames.items():
        text = text.replace(old, new)
    assert any(line.startswith(last_line) for line in text.splitlines())
    target.write_text(text, encoding="utf-8")


def test_the_copy_is_what_runs(copy: Path) -> None:
    out = check(run_in(copy, "import ckptrescue; print(ckptrescue.__file__)"))
    assert out.strip().startswith(str(copy))


def test_a_checkpoint_format(copy: Path) -> None:
    """One file: ``checkpoints/formats/<name>.py`` from ``_example.py``."""
    formats = copy / "ckptrescue/checkpoints/formats"
    from_example(formats / "_example.py", formats / "toy.py", "FORMATS = [ExampleFormat]",
                 {'name: ClassVar[str] = "example"': 'name: ClassVar[str] = "toy-format"'})
    sample = copy / "sample.exmpl"
    sample.write_bytes(b"EXMPL001" + bytes(64))
    out = check(run_in(copy, """
        import json, sys
        from pathlib import Path
        from ckptrescue.checkpoints.base import formats
        from ckptrescue.checkpoints.probes.checkpoints import probe_paths
        names = [f.name for f in formats()]
        reports = probe_paths([Path(sys.argv[1])])
        print(json.dumps({"names": names, "formats": [r.format for r in reports]}))
        """, str(sample)))
    got = json.loads(out)
    assert "toy-format" in got["names"] and got["formats"] == ["toy-format"]


def test_a_multi_rank_family(copy: Path) -> None:
    """One file: ``checkpoints/families/<name>.py`` from ``_example.py``; probe names the
    rank the step lacks."""
    families = copy / "ckptrescue/checkpoints/families"
    from_example(families / "_example.py", families / "toy_family.py",
                 "FAMILIES = [ExampleFamily]",
                 {'name: ClassVar[str] = "example-family"': 'name: ClassVar[str] = "toy-family"'})
    step = copy / "run" / "step_7"
    step.mkdir(parents=True)
    (step / "world_size").write_text("2\n")
    (step / "rank0.pt").write_bytes(b"")
    out = check(run_in(copy, """
        import json, sys
        from pathlib import Path
        from ckptrescue.checkpoints.probes.checkpoints import probe_paths
        reports = probe_paths([Path(sys.argv[1])])
        print(json.dumps([[r.format, str(r.verdict), sorted({f.code for f in r.findings})]
                          for r in reports]))
        """, str(copy / "run")))
    (fmt, verdict, codes), = json.loads(out)
    assert fmt == "toy-family" and verdict != "intact" and "FM001" in codes


def test_a_filesystem(copy: Path) -> None:
    """``storage/filesystems/<name>.py`` from ``_example.py`` (the guard's read-only mount
    rule and parsers are the recipe's other two files, when the filesystem needs them)."""
    filesystems = copy / "ckptrescue/storage/filesystems"
    from_example(filesystems / "_example.py", filesystems / "toyfs.py", "FILESYSTEMS = [ExampleFs]",
                 {'name: ClassVar[str] = "example"': 'name: ClassVar[str] = "toyfs"'})
    out = check(run_in(copy, """
        from ckptrescue.storage import filesystem
        fs = filesystem.get("exfs")
        print(fs.name, fs.mount_options("exfs"))
        """))
    name, options = out.split()
    assert name == "toyfs" and options.startswith("ro,norecovery") and "nodev" in options


TOY_ACTION = '''
"""A toy action: its record and its action in one module."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.engine.action import Action, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.model import StepOutputs, doc


@dataclass
class ToyOutput(StepOutputs):
    greeting: str = field(default="", metadata=doc("What the toy says."))


class Toy(Action):
    name = "toy.greet"
    summary = "Say hello to WHO"
    output_type = ToyOutput
    args = (ArgSpec("who", "string", required=True, positional=True, help="Who."),
            ArgSpec("times", "integer", default=1, minimum=1, help="How often."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"greet {args['who']}"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        yield ctx.output("greeting")
        return ActionResult(outputs={"greeting": " ".join([f"hello {args['who']}"] * args["times"])},
                            summary="greeted")


ACTIONS = [Toy]
'''

TOY_COMMAND = '''
"""``ckptrescue toy WHO``: generated from the toy action."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import JSON, Command, StepResult, add_command
from ckptrescue.cli.output import show
from ckptrescue.display import Shown


def render(result: StepResult) -> int:
    return show(Shown(lines=[result.out.greeting]), json=result.options[JSON], data=result.outputs)


def register(app: typer.Typer) -> None:
    add_command(app, "toy", Command("toy.greet", render))
'''


def test_an_action_and_its_command(copy: Path) -> None:
    """``actions/<area>.py`` (or ``<wing>/actions.py``) with its record, ``cli/<area>_cmd.py``,
    and in ``cli/main.py`` the module's name in ``_COMMAND_MODULES`` and its command's in
    ``ROUTES``: the registry, the generated command, the engine and the case reader find it."""
    pkg = copy / "ckptrescue"
    (pkg / "actions/toy.py").write_text(TOY_ACTION, encoding="utf-8")
    (pkg / "cli/toy_cmd.py").write_text(TOY_COMMAND, encoding="utf-8")
    main = pkg / "cli/main.py"
    text = main.read_text(encoding="utf-8")
    text, n = re.subn(r'("tui_cmd",\n\))', r'"toy_cmd", \1', text)
    text, m = re.subn(r'(ROUTES: dict\[str, str\] = \{\n)', r'\1    "toy": "toy_cmd",\n', text)
    assert n == m == 1
    main.write_text(text, encoding="utf-8")
    case = copy / "case"
    cli = [sys.executable, "-m", "ckptrescue"]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    subprocess.run([*cli, "case", "new", str(case)], cwd=copy, env=env, capture_output=True,
                   timeout=300, check=True)
    res = subprocess.run([*cli, "toy", "world", "--times", "2", "--case", str(case), "--json"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"greeting": "hello world hello world"}
    help_text = subprocess.run([*cli, "toy", "--help"], cwd=copy, env=env, capture_output=True,
                               text=True, timeout=300, check=False).stdout
    assert "WHO" in help_text and "--times" in help_text
    out = check(run_in(copy, """
        import sys
        from pathlib import Path
        from ckptrescue.actions import registry
        from ckptrescue.actions.toy import ToyOutput
        from ckptrescue.engine.case_outputs import outputs_of
        from ckptrescue.record.case import Case
        assert "toy.greet" in registry()
        print([o.greeting for o in outputs_of(Case.open(Path(sys.argv[1])), ToyOutput)])
        """, str(case)))
    assert out.strip() == "['hello world hello world']"


def test_a_report_section(copy: Path) -> None:
    """``report/model.py`` (its entry in ``SECTIONS``) and one branch in each template."""
    model = copy / "ckptrescue/report/model.py"
    text = model.read_text(encoding="utf-8")
    anchor = '    ("answer", "Answer", True, lambda m: bool(m["answer"])),\n'
    assert anchor in text
    model.write_text(text.replace(anchor, anchor + '    ("toy", "Toy section", True, '
                                  'lambda m: True),\n'), encoding="utf-8")
    for name in ("report.html.j2", "report.md.j2"):
        template = copy / "reports/templates" / name
        body = template.read_text(encoding="utf-8")
        marker = '{% elif s.name == "examined" %}'
        assert marker in body, name
        template.write_text(body.replace(marker, '{% elif s.name == "toy" %}\ntoy body here\n'
                                         + marker, 1), encoding="utf-8")
    out = check(run_in(copy, """
        import sys
        from pathlib import Path
        from ckptrescue.record.case import Case
        from ckptrescue.report.render import render
        case = Case.create(Path(sys.argv[1]))
        html, md = render(case, "html"), render(case, "md")
        print("toy body here" in html, "toy body here" in md, "Toy section" in html,
              "Toy section" in md)
        """, str(copy / "case")))
    assert out.split() == ["True"] * 4
