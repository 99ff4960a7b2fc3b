"""Progress of the running step: a bar plus done/total, rate and ETA from StepProgress."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from ckptrescue.engine.events import StepProgress
from ckptrescue.tui.viewmodel import RateMeter, progress_text


class StepProgressPanel(Horizontal):
    """Hidden until a step reports progress; ``show(event)`` updates it, ``clear()`` hides it."""

    DEFAULT_CSS = """
    StepProgressPanel { height: 1; display: none; padding: 0 1; }
    StepProgressPanel.active { display: block; }
    StepProgressPanel ProgressBar { width: 30; }
    StepProgressPanel Label { width: 1fr; padding-left: 1; }
    """

    def compose(self) -> ComposeResult:
        yield ProgressBar(total=None, show_eta=False, show_percentage=True, id="bar")
        yield Label("", id="progress-label", markup=False)

    meter: RateMeter | None = None
    step_id: str = ""

    def show(self, event: StepProgress, now: float | None = None) -> None:
        self.add_class("active")
        if self.meter is None or event.step_id != self.step_id:
            self.meter, self.step_id = RateMeter(), event.step_id
        rate, eta = self.meter.update(time.monotonic() if now is None else now, event.done,
                                      event.total, event.rate, event.eta_s)
        bar = self.query_one(ProgressBar)
        if event.total:
            bar.update(total=event.total, progress=event.done)
        label = f"{event.step_id}: " + progress_text(event.done, event.total, event.unit,
                                                     rate, eta, event.label)
        self.query_one("#progress-label", Label).update(label)

    def clear(self) -> None:
        self.meter = None
        self.remove_class("active")
        self.query_one(ProgressBar).update(total=None, progress=0)
        self.query_one("#progress-label", Label).update("")
