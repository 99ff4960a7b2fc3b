"""Print engine events for a human on stderr (the CLI adapter of the event stream)."""

from __future__ import annotations

import sys
import time

from ckptrescue.events import (
    Event,
    FindingEmitted,
    GateReached,
    RunFinished,
    RunStarted,
    StepFinished,
    StepOutput,
    StepProgress,
    StepSkipped,
    StepStarted,
)


def _human(n: float, unit: str) -> str:
    if unit != "B":
        return f"{n:,.0f} {unit}"
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or suffix == "TiB":
            return f"{n:,.1f} {suffix}" if suffix != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n} B"


class EventPrinter:
    def __init__(self, stream=None) -> None:  # noqa: ANN001
        self.stream = stream or sys.stderr
        self._last_progress = 0.0
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, event: Event) -> None:
        w = self.stream.write
        if isinstance(event, RunStarted):
            w(f"== run {event.playbook} ({len(event.steps)} steps, run key {event.run_key})\n")
        elif isinstance(event, StepStarted):
            w(f"-> {event.step_id} [{event.action}] {event.title}\n")
        elif isinstance(event, StepOutput):
            for line in event.text.splitlines()[-20:]:
                w(f"   {line}\n")
        elif isinstance(event, StepProgress):
            now = time.monotonic()
            if now - self._last_progress < (0.2 if self._tty else 5.0):
                return
            self._last_progress = now
            total = f"/{_human(event.total, event.unit)}" if event.total else ""
            rate = f" {_human(event.rate, event.unit)}/s" if event.rate else ""
            eta = f" eta {event.eta_s:.0f}s" if event.eta_s is not None else ""
            w(f"   {event.label or 'progress'} {_human(event.done, event.unit)}{total}{rate}{eta}"
              + ("\r" if self._tty else "\n"))
        elif isinstance(event, FindingEmitted) and event.finding is not None:
            f = event.finding
            where = f" @{f.offset}" if f.offset is not None else ""
            w(f"   [{f.severity}] {f.code} {f.title}{where}\n")
        elif isinstance(event, GateReached):
            state = {True: "confirmed", False: "declined", None: "waiting (no answer)"}
            w(f"?? gate {event.step_id}: {event.prompt} -> {state[event.answered]}\n")
        elif isinstance(event, StepSkipped):
            w(f"-- {event.step_id} skipped: {event.reason}\n")
        elif isinstance(event, StepFinished):
            extra = f": {event.error}" if event.error else (f": {event.summary}"
                                                             if event.summary else "")
            w(f"<- {event.step_id} {event.status}{extra}\n")
        elif isinstance(event, RunFinished):
            w(f"== run {event.status}" + (f" at step {event.failed_step}"
                                          if event.failed_step else "") + "\n")
            if event.answer:
                w(f"answer: {event.answer}\n")
        self.stream.flush()
