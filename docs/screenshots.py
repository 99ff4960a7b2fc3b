"""Regenerate the README screenshots: ``docs/img/report.png`` and ``docs/img/tui.svg`` / ``tui.png``.

    python docs/screenshots.py            # or: python docs/generate.py --screenshots, make docs

A small, realistic case built in seconds, deterministically (no drill image): a training run of
four real ``torch.save`` checkpoints whose tensors hold integer-derived values
(``fixtures/checkpoints.py``) — ``step-100.pt`` intact, ``step-200.pt`` with one flipped bit in a
tensor, ``step-300.pt`` torn (truncated), ``step-350.pt`` carrying a pickle payload — probed with
the ``probe-checkpoints`` playbook into a case at a fixed path. Then:

* ``report.png``: the case's HTML report in headless Chromium (1200x1800);
* ``tui.svg``: the TUI's findings screen (Textual's own SVG export from a headless run, 120x34),
  and ``tui.png``, that SVG rendered by headless Chromium.

The case's clock times change from run to run; everything else is the same bytes. Needs the
``chromium`` binary and torch; ``docs/generate.py --check`` never runs this.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess  # noqa: TID251 - a docs tool: chromium, not evidence commands
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
IMG = DOCS / "img"
WORK = Path("/tmp/ckptrescue-docs-screenshots")  # fixed, so paths on screen are the same
TUI_SIZE = (120, 34)
REPORT_WINDOW = "1200,1800"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def build_run(run: Path) -> None:
    """The damaged run: intact, flipped bit, torn write, pickle payload."""
    from fixtures import checkpoints as fx

    run.mkdir(parents=True)
    for step, seed in ((100, 1), (200, 2), (300, 3)):
        fx.save_zip(run / f"step-{step}.pt", fx.training_state(seed))
    flipped = run / "step-200.pt"
    offset, size = fx.zip_data_offset(flipped, fx.zip_member(flipped, "data/0"))
    fx.flip_bit(flipped, offset + size // 2, 3)
    torn = run / "step-300.pt"
    fx.truncate(torn, int(torn.stat().st_size * 0.6))
    fx.save_payload(run / "step-350.pt", WORK / "PAYLOAD-RAN")  # probed statically, never run


def build_case(root: Path) -> object:
    from ckptrescue.engine import executor as engine
    from ckptrescue.record.case import Case

    run = root / "run7"
    build_run(run)
    case = Case.create(root / "INC-042", title="run 7 will not resume after a node failure",
                       examiner="alice")
    for _ in engine.run(engine.prepare("probe-checkpoints", {"run_dir": str(run)}), case=case):
        pass
    return case


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") \
        or shutil.which("google-chrome")
    if exe is None:
        raise SystemExit("screenshots: chromium is missing (make setup installs it)")
    return exe


def shoot(url: str, png: Path, window: str) -> None:
    """Headless Chromium screenshot of ``url`` at ``window`` (WxH)."""
    with tempfile.TemporaryDirectory(prefix="ckptrescue-chrome-") as profile:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 f"--user-data-dir={profile}"]
        png.unlink(missing_ok=True)
        subprocess.run([chromium(), *flags, f"--screenshot={png}",  # noqa: S603
                        f"--window-size={window}",
                        url], capture_output=True, timeout=180, check=False)
    if not png.is_file() or png.stat().st_size < 5000:
        raise SystemExit(f"screenshots: chromium wrote no screenshot {png}")


def report_png(case: object, out: Path) -> None:
    from ckptrescue.report.render import write

    html = write(case, WORK / "report.html", "html")  # type: ignore[arg-type]
    shoot(html.as_uri(), out, REPORT_WINDOW)


def tui_svg(case: object, out: Path) -> None:
    """The findings screen (F7), a damaged tensor highlighted, saved as Textual's SVG."""
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen

    app = make_app(case)  # type: ignore[arg-type]

    async def main() -> None:
        async with app.run_test(size=TUI_SIZE) as pilot:
            await pilot.press("f7")
            for _ in range(1200):  # up to ~60 s for the findings model
                if isinstance(app.screen, FindingsScreen) and app.screen.model is not None:
                    break
                await pilot.pause(0.05)
            else:
                raise SystemExit("screenshots: the findings screen never loaded")
            await pilot.press("down", "down", "down", "down")
            await pilot.pause(0.2)
            app.save_screenshot(filename=out.name, path=str(out.parent))

    asyncio.run(main())


def svg_png(svg: Path, out: Path) -> None:
    """Render the SVG in Chromium at its own size (from its viewBox)."""
    head = svg.read_text()[:2000]
    m = re.search(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"', head)
    width, height = (int(float(v)) + 1 for v in m.groups()) if m else (1500, 900)
    page = WORK / "tui.html"
    page.write_text("<!doctype html><html><body style='margin:0;background:#0c0c0c'>"
                    f"<img src='{svg.as_uri()}' width='{width}' height='{height}'>"
                    "</body></html>")
    shoot(page.as_uri(), out, f"{width},{height}")


def main() -> int:
    os.environ["XDG_STATE_HOME"] = str(WORK / "state")  # never the user's recent cases
    os.environ.pop("NO_COLOR", None)  # the README images are in colour whatever the terminal
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    IMG.mkdir(exist_ok=True)
    try:
        case = build_case(WORK)
        report_png(case, IMG / "report.png")
        tui_svg(case, IMG / "tui.svg")
        svg_png(IMG / "tui.svg", IMG / "tui.png")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    for name in ("report.png", "tui.svg", "tui.png"):
        print(f"wrote {(IMG / name).relative_to(REPO)} ({(IMG / name).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
