"""One convention across commands (docs/conventions.md), checked on the command tree the CLI
actually builds (typer's click commands), every command, with the exceptions named here and in
the document; and the behaviours the conventions promise, run for real."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli_helpers import invoke  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# a thing, the one spelling it has everywhere (parameter names as the commands declare them)
SPELLING = {
    "case_dir": "--case", "as_json": "--json", "output": "--output", "jobs": "--jobs",
    "workers": "--jobs", "scheduler": "--scheduler", "endpoint_url": "--endpoint-url",
    "manifest": "--manifest", "known_good_manifest": "--manifest", "state": "--state",
    "yes": "--yes", "dry_run": "--dry-run", "no_progress": "--no-progress", "to": "--to",
    "dest": "--dest",
}
SHORT = {"--output": "-o", "--jobs": "-j"}  # where the short form exists, it is this one
# other words for those things, and options that would hold a compared thing (a positional)
NEVER = {"--out", "--out-dir", "--outdir", "--output-dir", "--destination", "--threads",
         "--workers", "--parallel", "--endpoint", "--url", "--assume-yes", "--local",
         "--current", "--baseline", "--old", "--new-manifest", "--case-dir", "--state-file",
         "--known-good-manifest", "--known-good"}
# a required option naming a file or folder is where a recording command records, where
# outputs go, or what a recovery is checked against and restored from (a required option that
# says how, such as resume world-size --ranks N, is fine)
REQUIRED_OK = {"--case", "--to", "--dest", "--output", "--manifest", "--from"}
# the commands that act on the case itself take it as a positional
CASE_POSITIONAL = {"case new", "case show", "case verify", "case seal", "report"}
# commands without --json, and why
NO_JSON = {
    "umount": "prints one line; the case records what it released",
    "report": "--format json is the report model",
    "tui": "a terminal application",
    "playbook schema": "prints JSON already",
    "watch": "runs until stopped; each pass is recorded in the case",
}
# docs/conventions.md, "Exceptions"
EXCEPTIONS = {
    ("salvage", "positional output"): "kept from the first release",
}


@dataclass
class Param:
    name: str
    positional: bool
    opts: list[str]
    required: bool
    hidden: bool
    is_flag: bool
    is_path: bool


@dataclass
class Cmd:
    path: str
    help: str
    params: list[Param]


def _is_path(param: Any) -> bool:
    """A parameter whose value is a file or folder (typer's annotation, or click's type)."""
    described = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if described is not None:
        return "Path" in str(described)
    return type(getattr(param, "type", None)).__name__ == "Path"


def commands() -> list[Cmd]:
    import typer

    from ckptrescue.cli.main import app

    found: list[Cmd] = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
            return
        params = [Param(p.name, p.param_type_name == "argument", [*p.opts, *p.secondary_opts],
                        bool(p.required), bool(getattr(p, "hidden", False)),
                        bool(getattr(p, "is_flag", False)),
                        _is_path(p))
                  for p in cmd.params if p.name != "help"]
        found.append(Cmd(" ".join(path), cmd.help or "", params))

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = commands()


def test_every_command_is_seen() -> None:
    paths = {c.path for c in COMMANDS}
    watch = next(c for c in COMMANDS if c.path == "watch")
    assert [p.is_path for p in watch.params if p.name in ("source", "state")] == [False, True]
    assert len(paths) > 50 and {"probe", "playbook run", "s3 verify", "store verify",
                                "dataset compare", "watch", "tui", "report"} <= paths


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.path)
def test_help_has_an_example_of_itself(cmd: Cmd) -> None:
    assert re.search(r"^Examples?:", cmd.help, re.M), f"{cmd.path}: no example in --help"
    assert f"ckptrescue {cmd.path}" in cmd.help, f"{cmd.path}: the example runs something else"


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.path)
def test_options_use_the_one_spelling(cmd: Cmd) -> None:
    for p in cmd.params:
        if p.positional:
            continue
        longs = [o for o in p.opts if o.startswith("--")]
        shorts = [o for o in p.opts if not o.startswith("--")]
        assert longs, f"{cmd.path}: {p.opts} has no long spelling"
        for o in longs:
            assert re.fullmatch(r"--[a-z0-9]+(-[a-z0-9]+)*", o), f"{cmd.path}: {o}"
            if not p.hidden:  # a deprecated alias is hidden, and still accepted
                assert o not in NEVER, f"{cmd.path}: {o} (docs/conventions.md)"
        name = p.name.removeprefix("arg_")
        if name in SPELLING and not p.hidden:
            want = SPELLING[name]
            assert longs == [want], f"{cmd.path}: {name} is spelled {want}, not {longs}"
            if want in SHORT and shorts:
                assert shorts == [SHORT[want]], f"{cmd.path}: {want} is short {SHORT[want]}"


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.path)
def test_positionals_for_things_acted_on_options_for_how(cmd: Cmd) -> None:
    for p in cmd.params:
        if p.positional:
            if p.name == "case_dir":
                assert cmd.path in CASE_POSITIONAL, f"{cmd.path}: the case is --case DIR"
            continue
        long = next(o for o in p.opts if o.startswith("--"))
        if p.required and p.is_path:
            assert long in REQUIRED_OK, f"{cmd.path}: required option {long}: a positional?"
    if cmd.path not in NO_JSON:
        assert any("--json" in p.opts for p in cmd.params), f"{cmd.path}: no --json"


# the spelling of a value in --help, as the table in docs/conventions.md shows it
METAVAR = {"--case": "DIR", "--output": "FILE", "--to": "DIR", "--dest": "DIR", "--jobs": "N",
           "--scheduler": "ADDRESS", "--endpoint-url": "URL", "--manifest": "FILE",
           "--state": "PATH"}


def _help_of(path: str) -> str:
    res = invoke(*path.split(), "--help")
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.path)
def test_help_names_values_in_words(cmd: Cmd) -> None:
    """Found by a responder: ``PATH|URL <list[str]>``, ``-j, --jobs <int range>``, ``--case
    <path>``, ``case_dir`` -- Python types and parameter names where docs/conventions.md says
    ``--case DIR``, ``-j, --jobs N``, ``CASE_DIR``."""
    text = _help_of(cmd.path)
    usage, rest = text.split("\n", 1)
    assert "<" not in usage, usage
    for line in rest.splitlines():
        m = re.match(r"^  (-[-\w, ]+?|[A-Z_|.]+)( [^ ].*?)?(  |$)", line)
        if m and (line.startswith("  -") or line.lstrip()[:1].isupper()):
            assert not re.search(r"<[a-z][\w\[\] ]*>", m[0]), f"{cmd.path}: {line.strip()}"
    for p in cmd.params:
        long = next((o for o in p.opts if o.startswith("--")), "")
        if not p.hidden and long in METAVAR and not p.is_flag:
            assert re.search(rf"{re.escape(long)} {METAVAR[long]}\b", text), \
                f"{cmd.path}: {long} {METAVAR[long]} (docs/conventions.md)"
    for word in re.findall(r"\{([^}]+)\}|\[([^\]]+)\]", usage):
        name = "".join(word)
        if name not in ("OPTIONS",) and not name.startswith("-"):
            assert name == name.upper(), f"{cmd.path}: positional {name} (shown in capitals)"


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.path)
def test_help_examples_print_as_written(cmd: Cmd) -> None:
    """Found by a responder copying an example: click rewrapped it at 80 columns
    (``--fill-`` / ``from``; ``--jobs 4`` on a line of its own)."""
    written = [ln.strip() for ln in cmd.help.splitlines() if ln.strip().startswith("ckptrescue ")]
    shown = {ln.strip() for ln in _help_of(cmd.path).splitlines()}
    for example in written:
        assert example in shown, f"{cmd.path}: example not printed as written: {example}"


def test_the_exceptions_are_the_documented_ones() -> None:
    text = (REPO / "docs" / "conventions.md").read_text(encoding="utf-8")
    exceptions = text.split("## Exceptions", 1)[1]
    for command, _what in EXCEPTIONS:
        assert f"`{command} " in exceptions, command
    salvage = next(c for c in COMMANDS if c.path == "salvage")
    assert [p.name for p in salvage.params if p.positional] == ["checkpoint", "out_dir"]
    for old, _now in re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| #\d+ \|$", text, re.M):
        option = next(w for w in old.split() if w.startswith("--"))
        path = " ".join(w for w in old.split()[:2] if w.islower())
        cmd = next(c for c in COMMANDS if c.path == path)
        hidden = [p for p in cmd.params if option in p.opts]
        assert hidden and hidden[0].hidden, f"{path}: {option} is a hidden deprecated alias"


# ---- what the conventions promise, for real --------------------------------------------------

def test_compared_things_are_positional_and_the_old_spelling_still_works(tmp_path: Path) -> None:
    from fixtures import profiles as fx

    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    fx.make_dataset(v1, seed=1)
    fx.make_dataset(v2, seed=1, incident="emptied")
    now = invoke("dataset", "compare", str(v1), str(v2), "--json")
    old = invoke("dataset", "compare", str(v1), "--current", str(v2), "--json")
    assert now.returncode == old.returncode == 1, now.stderr + old.stderr
    assert json.loads(now.stdout)["compare"] == json.loads(old.stdout)["compare"]
    assert "--current is deprecated; write CURRENT" in old.stderr
    assert "deprecated" not in now.stderr
    both = invoke("dataset", "compare", str(v1), str(v2), "--current", str(v2))
    assert both.returncode == 2 and "give one of them" in both.stderr


def test_tui_refuses_a_mistyped_case_and_creates_only_with_new(tmp_path: Path) -> None:
    typo = tmp_path / "cases" / "INC-1probe my run"
    res = invoke("tui", "--case", str(typo))
    assert res.returncode == 2, res.stderr
    assert "not a case directory" in res.stderr and len(res.stderr.strip().splitlines()) <= 2
    assert not typo.exists() and not (tmp_path / "cases").exists()


def test_an_empty_manifest_is_not_silently_fine(tmp_path: Path) -> None:
    empty = tmp_path / "data"
    empty.mkdir()
    res = invoke("manifest", "build", str(empty), "-o", str(tmp_path / "m.sha256"),
                 "--no-progress")
    assert res.returncode == 1 and "no files under" in res.stderr, res.stderr
    ok = invoke("manifest", "build", str(empty), "-o", str(tmp_path / "n.sha256"),
                "--no-progress", "--allow-empty")
    assert ok.returncode == 0 and "no files under" not in ok.stderr, ok.stderr


def test_watch_keeps_its_state_in_the_case(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 100)
    case = tmp_path / "case"
    first = invoke("watch", str(data), "--case", str(case), "--passes", "1")
    assert first.returncode == 0, first.stderr
    [state] = list((case / "watch").glob("*.sqlite"))
    again = invoke("watch", str(data), "--case", str(case), "--passes", "1")
    assert again.returncode == 0, again.stderr
    assert list((case / "watch").glob("*.sqlite")) == [state]  # the same state: resumed
    assert [p.name for p in data.iterdir()] == ["a.bin"]  # nothing written into SOURCE


def test_results_on_stdout_diagnostics_on_stderr(tmp_path: Path) -> None:
    case = tmp_path / "case"
    made = invoke("case", "new", str(case), "--title", "t")
    assert made.returncode == 0 and str(case) in made.stdout and not made.stderr
    shown = invoke("report", str(case))
    assert shown.returncode == 0
    assert shown.stdout.strip() == str(case / "report.html") and (case / "report.html").is_file()
    bad = invoke("case", "show", str(tmp_path / "nope"))
    assert bad.returncode == 2 and not bad.stdout
    assert bad.stderr.startswith("ckptrescue: error: ") and "--debug" not in bad.stderr
