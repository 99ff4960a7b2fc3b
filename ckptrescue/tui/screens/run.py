"""A run: the step list with live status, progress, the log, findings as they arrive, confirm
gates in a modal, a safe cancel, and resume (the engine skips the steps already finished)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Log, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from ckptrescue.display import shown, shown_text, shown_tree
from ckptrescue.engine.events import (
    FindingEmitted,
    GateReached,
    RunFinished,
    StepFinished,
    StepOutput,
    StepProgress,
    StepSkipped,
    StepStarted,
    transcript_line,
)
from ckptrescue.tui.messages import EngineEvent, GateAsked, GateReply, RunCrashed
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header
from ckptrescue.tui.widgets.progress import StepProgressPanel
from ckptrescue.tui.widgets.steps import StepTable

if TYPE_CHECKING:
    from ckptrescue.engine.executor import Plan

RESUMABLE = {"cancelled", "stopped", "failed", "crashed"}


class RunScreen(Screen[None]):
    """Runs ``plan`` in the app's case as soon as it is shown."""

    DEFAULT_CSS = """
    RunScreen #tabs { height: 1fr; min-height: 6; }
    RunScreen #status { height: auto; max-height: 2; }
    RunScreen #answer { height: auto; max-height: 3; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "cancel", "Cancel run"),
        Binding("r", "resume", "Resume"),
        Binding("f7", "app.findings", "Findings"),
        Binding("f8", "app.report", "Report"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.cancel_event = threading.Event()
        self.running = False
        self.final: RunFinished | None = None
        self.findings = 0
        self.current_step = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"run {self.plan.playbook.name}", id="status", classes="title",
                     markup=False)
        yield StepTable(id="steps")
        yield StepProgressPanel(id="progress")
        with TabbedContent(id="tabs"):
            with TabPane("Log", id="log-pane"):
                yield Log(id="log", max_lines=5000)
            with TabPane("Findings (0)", id="findings-pane"):
                yield Log(id="findings-log", max_lines=5000)
        yield Static("", id="answer", classes="answer", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(StepTable).set_steps([(s.id, s.action) for s in self.plan.playbook.steps])
        self.start()

    def on_unmount(self) -> None:
        self.cancel_event.set()  # a worker blocked on a gate returns "not now"

    # -- the worker ---------------------------------------------------------------------------
    def start(self) -> None:
        self.cancel_event = threading.Event()
        self.running = True
        self.final = None
        self.app.engine_running = True  # type: ignore[attr-defined]
        self.query_one("#answer", Static).update("running... (c cancels after the current step)")
        self.run_plan()

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine",
          description="Running playbook")
    def run_plan(self) -> None:
        from ckptrescue.engine import executor as engine
        from ckptrescue.errors import CkptRescueError

        worker = get_current_worker()
        cancel = self.cancel_event

        def ask(prompt: str) -> bool | None:
            reply = GateReply()
            self.post_message(GateAsked(prompt, reply))
            while not reply.answered.wait(0.1):
                if cancel.is_set() or worker.is_cancelled:
                    return None
            return reply.value

        try:
            for event in engine.run(self.plan, case=self.app.case,  # type: ignore[attr-defined]
                                    runner=self.app.runner,  # type: ignore[attr-defined]
                                    cancel=cancel, confirm=ask):
                if worker.is_cancelled:
                    cancel.set()
                self.post_message(EngineEvent(event))
        except CkptRescueError as exc:
            self.post_message(RunCrashed(exc.message))
        except Exception as exc:  # shown, not raised: the case keeps what finished
            self.post_message(RunCrashed(f"{type(exc).__name__}: {exc}"))

    # -- engine events (UI thread) --------------------------------------------------------------
    @on(EngineEvent)
    def _event(self, message: EngineEvent) -> None:
        event = shown_tree(message.event)  # names are shown, never obeyed
        steps = self.query_one(StepTable)
        log = self.query_one("#log", Log)
        if isinstance(event, StepStarted):
            self.current_step = event.step_id
            steps.set_status(event.step_id, "running", event.title)
        elif isinstance(event, StepOutput):
            for line in event.text.splitlines():
                log.write_line(f"   {line}")
        elif isinstance(event, StepProgress):
            self.query_one(StepProgressPanel).show(event)
        elif isinstance(event, FindingEmitted) and event.finding is not None:
            f = event.finding
            self.findings += 1
            where = f" @{f.offset}" if f.offset is not None else ""
            self.query_one("#findings-log", Log).write_line(
                f"[{f.severity}] {f.code} {event.step_id}: {f.title}{where}")
            self.query_one(TabbedContent).get_tab("findings-pane").label = \
                f"Findings ({self.findings})"
        elif isinstance(event, GateReached):
            state = {True: "confirmed", False: "declined", None: "not answered"}[event.answered]
            log.write_line(f"?? gate {event.step_id}: {event.prompt} -> {state}")
        elif isinstance(event, StepSkipped):
            resumed = "already finished" in event.reason
            steps.set_status(event.step_id, "resumed" if resumed else "skipped", event.reason)
        elif isinstance(event, StepFinished):
            self.query_one(StepProgressPanel).clear()
            steps.set_status(event.step_id, event.status, event.error or event.summary)
        said = transcript_line(event)
        if said is not None:
            log.write_line(said)
        if isinstance(event, RunFinished):
            self._finished(event)

    def _finished(self, event: RunFinished) -> None:
        self.final = event
        self.running = False
        self.app.engine_running = False  # type: ignore[attr-defined]
        log = self.query_one("#log", Log)
        where = f" at step {event.failed_step}" if event.failed_step else ""
        log.write_line(f"answer: {event.answer}")
        hint = {"cancelled": "  (r resumes; finished steps are not repeated)",
                "stopped": "  (r resumes and asks the gate again)",
                "failed": "  (fix the cause, then r resumes)"}.get(event.status, "")
        self.query_one("#status", Static).update(
            f"run {self.plan.playbook.name}: {event.status}{where}{hint}")
        self.query_one("#answer", Static).update(f"answer: {event.answer}")

    @on(RunCrashed)
    def _crashed(self, message: RunCrashed) -> None:
        error = shown(message.error)
        self.running = False
        self.app.engine_running = False  # type: ignore[attr-defined]
        self.final = RunFinished(status="crashed", answer="", failed_step=self.current_step)
        self.query_one("#log", Log).write_line(f"!! {error}")
        self.query_one("#status", Static).update(f"run {self.plan.playbook.name}: error: "
                                                 f"{error}")
        self.query_one("#answer", Static).update(error)

    @on(GateAsked)
    def _gate(self, message: GateAsked) -> None:
        from ckptrescue.tui.screens.gate import GateModal

        self.app.push_screen(GateModal(self.current_step, shown_text(message.prompt)),
                             message.reply.set)

    # -- actions ------------------------------------------------------------------------------------
    def action_cancel(self) -> None:
        if not self.running:
            self.notify("No run in progress.")
            return
        self.cancel_event.set()
        self.query_one("#answer", Static).update(
            "cancelling: the current step stops safely, then the run ends (r resumes)")

    def action_resume(self) -> None:
        if self.running:
            self.notify("The run is still going.")
            return
        if self.final is not None and self.final.status not in RESUMABLE:
            self.notify("The run finished; nothing to resume.")
            return
        self.query_one("#log", Log).write_line("== resuming: finished steps are skipped")
        self.start()

    def action_back(self) -> None:
        if self.running:
            self.notify("A run is in progress: c cancels it first.", severity="warning")
            return
        self.app.pop_screen()
