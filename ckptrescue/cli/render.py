"""Print engine events for a human on stderr (the CLI adapter of the event stream)."""

from __future__ import annotations

import sys
import time

from ckptrescue.display import shown_text
from ckptrescue.engine.events import (
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


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_line(event: StepProgress) -> str:
    """One progress line; work that counts files says files, bytes, percent, rate and ETA."""
    if event.items_total is not None and event.unit == "B":
        mib = 1 << 20
        total = event.total or 0.0
        pct = 100.0 * event.done / total if total else 100.0
        eta = "--" if event.eta_s is None else _hms(event.eta_s)
        return (f"{event.label or 'progress'}: {event.items_done or 0}/{event.items_total} "
                f"files, {event.done / mib:.0f}/{total / mib:.0f} MiB ({pct:.0f}%), "
                f"{(event.rate or 0.0) / mib:.0f} MiB/s, ETA {eta}")
    total = f"/{_human(event.total, event.unit)}" if event.total else ""
    rate = f" {_human(event.rate, event.unit)}/s" if event.rate else ""
    eta = f" eta {event.eta_s:.0f}s" if event.eta_s is not None else ""
    return f"   {event.label or 'progress'} {_human(event.done, event.unit)}{total}{rate}{eta}"


def _final(event: StepProgress) -> bool:
    if event.items_total is not None:
        return (event.items_done or 0) >= event.items_total
    return event.total is not None and event.done >= event.total


class EventPrinter:
    """Progress lines are redrawn in place on a terminal, else one every few seconds; the last
    one (all done) is always shown."""

    def __init__(self, stream=None) -> None:  # noqa: ANN001
        self.stream = stream or sys.stderr
        self._last_progress = 0.0
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._open_line = False

    def close(self) -> None:
        """End a progress line drawn in place (before other output)."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False

    def __call__(self, event: Event) -> None:
        def w(text: str) -> None:  # names from the evidence are shown, never obeyed
            self.stream.write(shown_text(text))

        if not isinstance(event, StepProgress):
            self.close()
        if isinstance(event, RunStarted):
            w(f"== run {event.playbook} ({len(event.steps)} steps, run key {event.run_key})\n")
        elif isinstance(event, StepStarted):
            w(f"-> {event.step_id} [{event.action}] {event.title}\n")
        elif isinstance(event, StepOutput):
            for line in event.text.splitlines()[-20:]:
                w(f"   {line}\n")
        elif isinstance(event, StepProgress):
            now = time.monotonic()
            if now - self._last_progress < (0.2 if self._tty else 5.0) and not _final(event):
                return
            self._last_progress = now
            if self._tty:
                self.stream.write("\r" + shown_text(progress_line(event)) + "\x1b[K")
                self._open_line = True
            else:
                w(progress_line(event) + "\n")
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
