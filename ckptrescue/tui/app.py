"""The Textual application and its only constructor, :func:`make_app`.

The app holds the open case and the runner (attributes down); screens run the engine in thread
workers and receive its events as messages (messages up). Navigation:

    start (open/create a case) -> scenario (what happened -> playbook) -> parameters
    (evidence picker, inline validation) -> plan preview (every command) -> run -> findings,
    report.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType

from ckptrescue.tui.typeahead import TypeAhead

if TYPE_CHECKING:
    from textual.screen import Screen

    from ckptrescue.record.case import Case

CSS = """
Screen { background: $surface; }
.title { text-style: bold; color: $text-primary; padding: 0 1; }
.hint { color: $text-muted; padding: 0 1; }
.error { color: $text-error; padding: 0 1; }
.ok { color: $text-success; padding: 0 1; }
.warn { color: $text-warning; padding: 0 1; }
.answer { background: $boost; color: $text; padding: 0 1; text-style: bold; }
"""


class CkptRescueApp(TypeAhead, App[None]):
    """ckptrescue's guided incident cockpit (keys typed during a screen change wait for the next
    screen: ``tui/typeahead.py``)."""

    TITLE = "ckptrescue"
    CSS = CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # Tab moves focus before the next key is routed (a priority binding, run as the key
        # arrives): a responder typing straight on lands in the new field, never the old one
        Binding("tab", "focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "focus_previous", "Previous field", show=False, priority=True),
        Binding("f1", "guided", "New run", show=False),
        Binding("f7", "findings", "Findings", show=False),
        Binding("f8", "report", "Report", show=False),
        Binding("ctrl+t", "toggle_theme", "Light/dark", show=False),
    ]

    def __init__(self, case: Case | None, runner: Any = None, *,
                 cases_root: Path | None = None) -> None:
        super().__init__()
        self.case = case
        self.runner = runner
        self.cases_root = cases_root
        self.engine_running = False

    # -- lifecycle ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        if self.case is None:
            from ckptrescue.tui.screens.start import StartScreen

            self.push_screen(StartScreen())
        else:
            self._after_case()

    def set_case(self, case: Case) -> None:
        """Open ``case`` and go to the guided flow (called by the start screen)."""
        self.case = case
        self._after_case()

    def _after_case(self) -> None:
        from ckptrescue.tui import recent
        from ckptrescue.tui.screens.scenario import ScenarioScreen

        assert self.case is not None
        recent.remember(self.case.root)
        manifest = self.case.manifest
        # shown by every screen's header, those being composed or removed included
        # (tui/widgets/header.py)
        self.sub_title = str(manifest.get("title") or self.case.root.name)
        if len(self.screen_stack) <= 1:
            self.push_screen(ScenarioScreen())
            return
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self.switch_screen(ScenarioScreen())  # the start screen's place

    # -- actions --------------------------------------------------------------------------------
    def _need_case(self) -> bool:
        if self.case is None:
            self.notify("Open or create a case first.", severity="warning")
            return False
        return True

    def action_guided(self) -> None:
        from ckptrescue.tui.screens.scenario import ScenarioScreen

        if not self._need_case():
            return
        if self.engine_running:
            self.notify("A run is in progress; cancel it first (c).", severity="warning")
            return
        if not isinstance(self.screen, ScenarioScreen):
            self.push_screen(ScenarioScreen())

    def action_findings(self) -> None:
        from ckptrescue.tui.screens.findings import FindingsScreen

        if self._need_case() and not isinstance(self.screen, FindingsScreen):
            self.push_screen(FindingsScreen())

    def action_report(self) -> None:
        from ckptrescue.tui.screens.report import ReportScreen

        if self._need_case() and not isinstance(self.screen, ReportScreen):
            self.push_screen(ReportScreen())

    def action_open_case(self) -> None:
        from ckptrescue.tui.screens.start import StartScreen

        if self.engine_running:
            self.notify("A run is in progress; cancel it first (c).", severity="warning")
            return
        self.push_screen(StartScreen())

    async def action_quit(self) -> None:
        """Quit; a running plan is cancelled first (the step in progress stops safely)."""
        if self.engine_running:
            from ckptrescue.tui.screens.run import RunScreen

            for screen in self.screen_stack:
                if isinstance(screen, RunScreen):
                    screen.cancel_event.set()
            self.notify("Cancelling the run: quitting after the current step stops.")
        self.exit()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Open or create a case", "Switch to another case directory",
                            self.action_open_case)
        yield SystemCommand("New guided run", "What happened -> playbook -> plan -> run",
                            self.action_guided)
        yield SystemCommand("Findings", "Evidence -> checkpoint -> tensor verdicts, bad-sector "
                            "map, resume-from answer", self.action_findings)
        yield SystemCommand("Report", "Write the HTML incident report and verify the case",
                            self.action_report)
        yield SystemCommand("Toggle light/dark theme", "Switch between textual-light and "
                            "textual-dark", self.action_toggle_theme)


def make_app(case: Case | None, runner: Any = None, *,
             cases_root: Path | None = None) -> CkptRescueApp:
    """The TUI for ``case`` (None: start at the open/create screen).

    ``runner`` is passed to :func:`ckptrescue.engine.executor.run` (None: the guarded subprocess runner);
    ``cases_root`` is where the start screen lists and proposes case directories.
    """
    return CkptRescueApp(case, runner, cases_root=cases_root)
