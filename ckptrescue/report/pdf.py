"""``report --format pdf``: the HTML report printed to PDF by headless Chromium.

Chromium (Debian's ``chromium``, which ``make setup`` installs) runs through the kit's runner
(``run_internal``: argv only, minimal environment, a time limit, its own process group) on a copy
of the HTML in a fresh temporary directory that also holds its profile (``--user-data-dir``), its
``HOME`` and its caches; the report itself has no script and a Content-Security-Policy that
allows none, nor any fetch; no first-run, sync, component-update or background
network traffic, Chromium's own header and footer off (``--no-pdf-header-footer``). The footer is
the report's print CSS: CSS paged-media margin boxes (``@page { @bottom-left ... }``, supported by
Chromium since version 131) carry the case id, the audit head hash and ``page N of M``
(``reports/templates/base.html.j2``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.errors import ToolFailedError, ToolMissingError

if TYPE_CHECKING:
    from ckptrescue.effects.runner import SubprocessRunner

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-extensions", "--disable-default-apps", "--mute-audio",
         "--no-pdf-header-footer")
TIMEOUT_S = 180.0


def find_browser() -> str | None:
    """The headless browser to print with (None: none installed)."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_argv(browser: str, html: Path, pdf: Path, profile: Path) -> list[str]:
    """The one command that prints ``html`` to ``pdf`` (``--user-data-dir`` a fresh profile)."""
    return [browser, *FLAGS, f"--user-data-dir={profile}", f"--print-to-pdf={pdf}", html.as_uri()]


def print_pdf(html: str, out: Path, *, runner: SubprocessRunner | None = None,
              timeout_s: float = TIMEOUT_S, browsers: Sequence[str] | None = None) -> Path:
    """Print the report's ``html`` to ``out`` with headless Chromium; returns ``out``.

    Raises ToolMissingError when no Chromium is installed and ToolFailedError when it fails or
    writes no PDF (its last stderr line says why). ``runner`` records the run in its case when it
    has one (a playbook's report step); the command line's ``report`` records nothing.
    """
    from ckptrescue.effects.runner import SubprocessRunner

    browser = next((b for b in (shutil.which(n) for n in browsers) if b), None) \
        if browsers is not None else find_browser()
    if browser is None:
        raise ToolMissingError("report: no headless Chromium to print the PDF with",
                               hint="install chromium (make setup), or use --format html and "
                                    "print it from a browser")
    runner = runner or SubprocessRunner(None)
    with tempfile.TemporaryDirectory(prefix="ckptrescue-pdf-") as tmp:
        work = Path(tmp)
        page, pdf, profile = work / "report.html", work / "report.pdf", work / "profile"
        page.write_text(html, encoding="utf-8")
        home = {"HOME": str(work), "XDG_CONFIG_HOME": str(work / "config"),
                "XDG_CACHE_HOME": str(work / "cache")}
        result = runner.run_internal(chromium_argv(browser, page, pdf, profile),
                                     purpose="print the report to PDF", timeout_s=timeout_s,
                                     env_extra=home)
        if result.timed_out:
            raise ToolFailedError(f"report: Chromium did not print the PDF within {timeout_s:.0f} s")
        if result.returncode != 0 or not pdf.is_file() or pdf.read_bytes()[:5] != b"%PDF-":
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            why = lines[-1].strip() if lines else f"exit {result.returncode}"
            raise ToolFailedError(f"report: Chromium wrote no PDF ({why[:200]})")
        from ckptrescue.effects import beneath

        # as the other formats: a link planted at OUT (while Chromium printed) is replaced,
        # never written through; a device node or a FIFO there is refused
        beneath.replace_output(out, pdf.read_bytes())
    return out
