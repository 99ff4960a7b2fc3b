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
    StepFinished,
    StepOutput,
    StepProgress,
    StepStarted,
    transcript_line,
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
    """Prints a run for a person: the transcript (steps, their output, findings, the answer) on
    ``stream``, progress on ``progress`` (default: the same stream).

    Progress lines are redrawn in place on a terminal, else one every few seconds; the last one
    (all done) is always shown. Given the ``case``, paths under a mount point or copy the run
    made are shown by the evidence they lead back to (``E002:run/step-300.pt``, as the report
    names them), once that mount is recorded: the mount itself is gone when the run ends.
    Every line is made inert (``display.shown_text``).
    """

    def __init__(self, stream=None, *, progress=None, case=None) -> None:  # noqa: ANN001
        self.stream = stream or sys.stderr
        self.progress = progress or self.stream
        self.case = case
        self._last_progress = 0.0
        self._tty = hasattr(self.progress, "isatty") and self.progress.isatty()
        self._open_line = False
        self._actions: dict[str, str] = {}
        self._where = None  # a ProvenanceIndex once the run mounted or copied something

    def close(self) -> None:
        """End a progress line drawn in place (before other output)."""
        if self._open_line:
            self.progress.write("\n")
            self.progress.flush()
            self._open_line = False

    def label(self, text: str) -> str:
        """``text`` with every scratch path (mount point, copy) named by its evidence."""
        return text if self._where is None else self._where.relabel(text)

    def _learn(self, step_id: str) -> None:
        if self.case is None or self._actions.get(step_id) not in _ATTACHING:
            return
        import dataclasses

        from ckptrescue.record import provenance

        # the terminal keeps the case's own paths (salvage, recovery) as they are: the
        # responder opens them; only scratch roots (mounts, copies) are renamed
        self._where = dataclasses.replace(provenance.index(self.case), case_root="")

    def __call__(self, event: Event) -> None:
        def w(text: str) -> None:  # names from the evidence are shown, never obeyed
            own = self._actions.get(getattr(event, "step_id", ""), "") in _ATTACHING_ITSELF
            self.stream.write(shown_text(text if own else self.label(text)))

        if not isinstance(event, StepProgress):
            self.close()
        if isinstance(event, StepStarted):
            self._actions[event.step_id] = event.action
        said = transcript_line(event)
        if said is not None:
            w(said + "\n")
        if isinstance(event, StepOutput):
            for line in event.text.splitlines()[-20:]:
                w(f"   {line}\n")
        elif isinstance(event, StepProgress):
            now = time.monotonic()
            if now - self._last_progress < (0.2 if self._tty else 5.0) and not _final(event):
                return
            self._last_progress = now
            line = shown_text(self.label(progress_line(event)))
            if self._tty:
                self.progress.write("\r" + line + "\x1b[K")
                self._open_line = True
            else:
                self.progress.write(line + "\n")
            self.progress.flush()
        elif isinstance(event, FindingEmitted) and event.finding is not None:
            f = event.finding
            where = f" @{f.offset}" if f.offset is not None else ""
            w(f"   [{f.severity}] {f.code} {self._which(f.evidence, f.title)}{f.title}{where}\n")
        elif isinstance(event, GateReached):
            state = {True: "confirmed", False: "declined", None: "waiting (no answer)"}
            w(f"?? gate {event.step_id}: {event.prompt} -> {state[event.answered]}\n")
        elif isinstance(event, StepFinished):
            self._learn(event.step_id)
        elif isinstance(event, RunFinished) and event.answer:
            w(f"answer: {event.answer}\n")
        self.stream.flush()

    def _which(self, evidence: str | None, title: str) -> str:
        """``E002:run/step-350.pt: `` before a finding's title that does not name its file."""
        if not evidence:
            return ""
        name = evidence.rstrip("/").rsplit("/", 1)[-1]
        return "" if name and name in title else f"{self.label(evidence)}: "


# steps after which paths under what they attached lead back to evidence
_ATTACHING = {"mount", "copy"}
# steps whose lines speak of the mount point itself (shown as it is)
_ATTACHING_ITSELF = {"mount", "umount", "copy"}
