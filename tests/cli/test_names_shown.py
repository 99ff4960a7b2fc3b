"""Every name is shown, never obeyed (#25): a checkpoint named with an OSC 52 clipboard write and
a screen clear, a safetensors file with a right-to-left override in its name, and a tensor
whose name carries a CSI and a C1 control, through probe, a playbook run, the report in every
format, the exports and the TUI's findings tree. Nothing a person reads holds a raw control
character; each shows visibly escaped (``\\x1b``); the hash-chained records keep the raw name.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli_helpers import invoke  # noqa: E402

EVIL_FILE = "evil\x1b]52;c;aGk=\x07\x1b[2J.pt"
RLO_FILE = "model\u202egpj.safetensors"
EVIL_TENSOR = "w\x1b[31m\u009b.weight"

# what a terminal, a browser or an editor would obey: C0 (but newline and tab), DEL, C1, and
# the bidirectional controls; written out here rather than taken from ckptrescue.display
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u061c\u200e\u200f\u202a-\u202e"
                 "\u2066-\u2069]")


def assert_inert(text: str, where: str) -> None:
    found = RAW.search(text)
    if found is not None:
        context = text[max(0, found.start() - 60):found.end() + 20]
        raise AssertionError(f"{where}: raw {found.group()!r} in {context!r}")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from fixtures.checkpoints import (
        exact_tensor,
        flip_bit,
        save_safetensors,
        save_zip,
        training_state,
        zip_data_offset,
        zip_member,
    )

    root = tmp_path_factory.mktemp("names") / "run"
    root.mkdir()
    damaged = save_zip(root / EVIL_FILE, training_state(0))
    offset, _ = zip_data_offset(damaged, zip_member(damaged, "data/0"))
    flip_bit(damaged, offset + 3, 6)  # a CRC mismatch: the member name (the stem) is shown
    poisoned = exact_tensor(4, 4, seed=1)
    poisoned[0, 0] = float("nan")  # suspect: the tensor's name is shown
    save_safetensors(root / RLO_FILE, {EVIL_TENSOR: poisoned, "ok": exact_tensor(2, 2, seed=2)})
    return root


@pytest.fixture(scope="module")
def case_dir(run_dir: Path) -> Path:
    case = run_dir.parent / "case"
    res = invoke("playbook", "run", "probe-checkpoints", "--case", str(case), "-p",
                 f"run_dir={run_dir}")
    assert res.returncode == 1, res.stderr  # done, problems found
    assert_inert(res.stdout + res.stderr, "playbook run")
    assert "evil\\x1b]52;c;aGk=\\x07\\x1b[2J.pt" in res.stdout + res.stderr
    assert "w\\x1b[31m\\x9b.weight" in res.stdout + res.stderr
    return case


def test_probe_shows_names_escaped_and_json_keeps_them_exact(run_dir: Path) -> None:
    res = invoke("probe", str(run_dir))
    assert res.returncode == 1
    assert_inert(res.stdout + res.stderr, "probe")
    assert "evil\\x1b]52;c;aGk=\\x07\\x1b[2J.pt" in res.stdout
    assert "model\\u202egpj.safetensors" in res.stdout
    assert "w\\x1b[31m\\x9b.weight" in res.stdout
    as_json = invoke("probe", str(run_dir), "--json")
    assert as_json.stdout.isascii()  # every control and non-ASCII character as \uXXXX
    data = json.loads(as_json.stdout)
    names = {Path(c["path"]).name for c in data["checkpoints"]}
    assert names == {EVIL_FILE, RLO_FILE}  # exact names for machines
    assert EVIL_TENSOR in [t for c in data["checkpoints"] for t in c["suspect_tensors"]]


@pytest.mark.parametrize("fmt", ["md", "html", "json", "timeline", "timeline-csv", "case-uco"])
def test_report_and_exports_are_inert(case_dir: Path, fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    res = invoke("report", str(case_dir), "-f", fmt, "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text(encoding="utf-8")  # what `cat` would send to the terminal
    assert_inert(text, fmt)
    if fmt in ("md", "html", "json", "timeline-csv"):
        assert "evil\\x1b" in text.replace("\\\\", "\\")  # shown, visibly escaped
    else:  # JSON the kit hands to other tools: exact, escaped by JSON (\u001b), ASCII only
        assert text.isascii() and "u001b]52;c;aGk=" in text


def test_the_records_keep_the_raw_name(case_dir: Path) -> None:
    from ckptrescue.record.case import Case

    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk([r["details"] for r in Case.open(case_dir).records()])
    raw = "\n".join(strings)
    assert EVIL_FILE in raw and EVIL_TENSOR in raw


def test_the_tui_findings_tree_is_inert(case_dir: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import Static, Tree

    from ckptrescue.record.case import Case
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen

    app = make_app(Case.open(case_dir))
    seen: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = FindingsScreen()
            await app.push_screen(screen)
            for _ in range(1200):
                if screen.model is not None:
                    break
                await pilot.pause(0.05)
            tree = screen.query_one("#tree", Tree)
            nodes: list[Any] = []

            def walk(node: Any) -> None:
                for child in node.children:
                    nodes.append(child)
                    walk(child)

            walk(tree.root)
            for node in nodes:
                node.expand()
            await pilot.pause()
            nodes.clear()
            walk(tree.root)
            for node in nodes:
                tree.move_cursor(node)
                await pilot.pause()
                seen.append(str(node.label))
                seen.append(str(screen.query_one("#detail", Static).render()))
            seen.append(str(screen.query_one("#answer", Static).render()))
            await pilot.press("ctrl+q")

    asyncio.run(main())
    text = "\n".join(seen)
    assert_inert(text, "tui")
    assert "x1b]52;c;aGk=" in text and "w\\x1b[31m\\x9b.weight" in text
