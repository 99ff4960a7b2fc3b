"""Report: write the HTML incident report from the case, show its path and `case verify`."""

from __future__ import annotations

from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from ckptrescue.tui.messages import ReportWritten
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header


def verify_lines(verify: dict[str, object]) -> list[str]:
    """The same wording as ``ckptrescue case verify``."""
    if verify.get("ok"):
        lines = [f"case verify: OK: {verify.get('records')} records, chain intact, "
                 f"{verify.get('artifacts_checked')} artifacts verified",
                 f"head {verify.get('head')}"]
    else:
        lines = ["case verify: BROKEN"] + [f"  {p}" for p in verify.get("problems") or []]  # type: ignore[union-attr]
    notes = verify.get("notes") or []
    lines += [f"note: {n}" for n in notes][:10]  # type: ignore[union-attr]
    return lines


class ReportScreen(Screen[None]):
    """Generates the report when shown; g generates it again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "generate", "Generate again"),
        Binding("f7", "app.findings", "Findings"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Incident report", classes="title")
        with VerticalScroll():
            yield Static("writing the report...", id="report-path", markup=False)
            yield Static("", id="report-verify", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.action_generate()

    def action_generate(self) -> None:
        self.query_one("#report-path", Static).update("writing the report...")
        self.write_report()

    @work(thread=True, exclusive=True, exit_on_error=False, description="Writing the report")
    def write_report(self) -> None:
        from ckptrescue.errors import CkptRescueError
        from ckptrescue.report.render import write

        case = self.app.case  # type: ignore[attr-defined]
        try:
            path = write(case, case.root / "report.html", "html")
            verify = case.verify().to_json()
        except CkptRescueError as exc:
            self.post_message(ReportWritten("", {}, exc.message))
            return
        except OSError as exc:
            self.post_message(ReportWritten("", {}, f"cannot write the report: {exc}"))
            return
        self.post_message(ReportWritten(str(path.resolve()), verify))

    @on(ReportWritten)
    def _written(self, message: ReportWritten) -> None:
        status = self.query_one("#report-path", Static)
        if message.error:
            status.update(f"report: error: {message.error}")
            status.add_class("error")
            return
        status.update(f"report written: {message.path}")
        box = self.query_one("#report-verify", Static)
        box.update("\n".join(verify_lines(message.verify)))
        box.set_class(bool(message.verify.get("ok")), "ok")
        box.set_class(not message.verify.get("ok"), "error")
