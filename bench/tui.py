"""Benchmark: time to the TUI's first screen, and proof that no heavy runtime is imported early.

Each measurement is a fresh interpreter (what a responder waits for after typing
``ckptrescue tui``), timed from the parent until the child prints at its first painted screen:

* anchor: a minimal Textual app (one Static) reaching its first screen;
* ``make_app(None)``: the start screen (open/create a case, recent cases);
* ``make_app(case)``: the guided flow's first screen (what happened -> playbook);
* ``ckptrescue --help`` for context (the CLI without Textual).

Printed: the median of each and its ratio to the anchor (goal: <= 2.0), and, for the TUI
children, whether torch / tensorflow / boto3 / pyarrow were in ``sys.modules`` at the first
screen (must be "no": they are imported only by the steps that need them). Exit 1 if they were.

Usage: python bench/tui.py [REPEAT]   (env TUI_BENCH_REPEAT, default 5)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "tensorflow", "boto3", "pyarrow", "dask")

ANCHOR = r"""
import json, sys
from textual.app import App
from textual.widgets import Static
class Minimal(App):
    def compose(self):
        yield Static("hello")
async def first(pilot):
    await pilot.pause()
    pilot.app.exit()
Minimal().run(headless=True, auto_pilot=first, size=(80, 24))
print(json.dumps({"screen": "Minimal"}), flush=True)
"""

TUI = r"""
import json, sys
from pathlib import Path
from ckptrescue.tui.app import make_app
case = None
if sys.argv[1] != "-":
    from ckptrescue.record.case import Case
    case = Case.open(Path(sys.argv[1]))
app = make_app(case, cases_root=Path(sys.argv[2]))
seen = {}
async def first(pilot):
    await pilot.pause()
    seen["screen"] = type(pilot.app.screen).__name__
    seen["heavy"] = sorted(m for m in HEAVY if m in sys.modules)
    pilot.app.exit()
app.run(headless=True, auto_pilot=first, size=(80, 24))
print(json.dumps(seen), flush=True)
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {res.stderr[-2000:]}")
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    return elapsed, json.loads(lines[-1]) if lines else {}


def main() -> int:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("TUI_BENCH_REPEAT",
                                                                            "5"))
    from ckptrescue.record.case import Case

    exe = str(Path(sys.executable).with_name("ckptrescue"))
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-tui-") as tmp:
        root = Path(tmp)
        case = Case.create(root / "cases" / "INC-1", title="bench", examiner="bench")
        env = {**os.environ, "XDG_STATE_HOME": str(root / "state")}
        tui = TUI.replace("HEAVY", repr(HEAVY))
        runs: dict[str, list[float]] = {"anchor": [], "start": [], "guided": [], "help": []}
        heavy: dict[str, list[str]] = {}
        screens: dict[str, str] = {}
        for _ in range(repeat):
            runs["anchor"].append(timed([sys.executable, "-c", ANCHOR], env)[0])
            for key, arg in (("start", "-"), ("guided", str(case.root))):
                seconds, seen = timed([sys.executable, "-c", tui, arg, str(root / "cases")], env)
                runs[key].append(seconds)
                heavy[key] = list(seen.get("heavy", []))  # type: ignore[arg-type]
                screens[key] = str(seen.get("screen"))
            runs["help"].append(timed([exe, "--help"], env)[0])
    anchor = statistics.median(runs["anchor"])
    print(f"anchor: minimal Textual app to first screen   {anchor * 1000:7.0f} ms (median of "
          f"{repeat})")
    for key, label in (("start", f"ckptrescue tui, no case ({screens['start']})"),
                       ("guided", f"ckptrescue tui --case ({screens['guided']})"),
                       ("help", "ckptrescue --help (context)")):
        med = statistics.median(runs[key])
        print(f"{label:<46} {med * 1000:7.0f} ms   ratio {med / anchor:5.2f} x anchor")
    bad = {k: v for k, v in heavy.items() if v}
    for key in ("start", "guided"):
        print(f"heavy modules imported at the first screen ({key}): "
              f"{', '.join(heavy[key]) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
