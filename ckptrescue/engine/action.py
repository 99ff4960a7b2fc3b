"""The base class of engine actions and the context a running step gets.

An action declares its arguments (``ArgSpec``), the capability it needs, what it would run
(``plan``, for ``--dry-run``), and ``run``: a generator that yields progress/output events and
returns an :class:`ActionResult`. Actions call library code; they never build shell text.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ckptrescue.engine.events import Event, StepOutput, StepProgress
from ckptrescue.model import ArtifactData, AuditEvent, Finding, JsonObject, Recorded, Severity, StepOutputs

if TYPE_CHECKING:
    from ckptrescue.effects.runner import SubprocessRunner
    from ckptrescue.record.case import Case

T = TypeVar("T")

# An action's arguments: by ``ArgSpec`` name, defaults filled in (``Action.with_defaults``),
# references resolved; what ``plan`` and ``run`` take.
ActionArgs = dict[str, Any]


@dataclass(frozen=True)
class ArgSpec:
    """One argument of an action: the single declaration the engine, the playbook linter, the
    CLI (``cli/from_action.py``) and the TUI's forms (``tui/form.py``) all read.

    ``type``: a row of the one table of argument types (``engine/argtypes.py``): path,
    location (a path or an s3://, az://, gs:// URL: text on the command line), string,
    integer, number, boolean, list (of ``item``), mapping, s3_url, any.
    On the command line an argument is ``positional`` (then always required there) or an
    option spelled ``flag`` (default ``--name-with-dashes``) with an optional ``short`` alias.
    A boolean option is a flag that flips the default: ``--load`` sets ``load=True`` (default
    False), ``--no-numeric`` sets ``numeric=False`` (default True). A list option is repeated
    (``--member A --member B``). ``cli_name`` is the name a positional argument shows in
    ``--help`` when it differs from ``name``; ``metavar`` replaces the value's placeholder;
    ``minimum`` bounds a number; ``cli=False`` keeps an argument off the command line (the
    command sets it itself); ``hidden`` keeps it out of ``--help`` and ``advanced`` puts it
    under the TUI form's advanced fields.
    """

    name: str
    type: str = "string"
    required: bool = False
    default: Any = None
    help: str = ""
    item: str = "string"  # the element type of a list
    positional: bool = False
    flag: str = ""
    short: str = ""
    cli_name: str = ""
    metavar: str = ""
    minimum: int | None = None
    cli_required: bool = False  # an option the command line requires (the action may not)
    cli: bool = True
    hidden: bool = False
    advanced: bool = False

    @property
    def option(self) -> str:
        """The option's spelling on the command line."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def param_name(self) -> str:
        """The parameter name the command line shows (positional arguments)."""
        return self.cli_name or self.name


@dataclass
class ActionResult:
    """``status``: ok, findings, failed, refused. ``outputs`` must be JSON-serialisable.

    The engine records the step in the case from this alone: it stores ``artifacts``, writes
    ``audit`` in order (the step's ``findings`` where :meth:`AuditEvent.findings_here` marks,
    else after the last record), then the step's outputs. An action never writes the case.
    """

    status: str = "ok"
    outputs: JsonObject = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    summary: str = ""
    error: str | None = None
    audit: list[AuditEvent] = field(default_factory=list)
    artifacts: list[ArtifactData] = field(default_factory=list)
    # the checkpoint library (given ``case=`` by Probe, Salvage and Rank until it returns its
    # records too) already added these findings to the case
    findings_recorded: bool = False
    # a step that could not do its job: the exit code and hint of its error (the CLI exits so)
    exit_code: int | None = None
    hint: str | None = None


def findings_of(result: Any) -> list[Finding]:
    """The findings a library result carries (a list attribute or a method)."""
    found = getattr(result, "findings", [])
    if callable(found):
        found = found()
    return list(found or [])


def records_of(result: Any) -> tuple[list[AuditEvent], list[ArtifactData]]:
    """The audit records and artifacts a library result asks the engine to record."""
    if isinstance(result, Recorded):
        return list(result.audit), list(result.artifacts)
    return [], []


def with_findings(audit: Sequence[AuditEvent], findings: Sequence[Finding]) -> list[AuditEvent]:
    """``audit`` with ``findings`` written out as ``finding`` records where the marker is (else
    at the end): for a step that records findings it does not report (a failed step keeps what
    it established)."""
    expanded = [AuditEvent("finding", {"finding": f.to_json()}) for f in findings]
    out: list[AuditEvent] = []
    for event in audit:
        if event.is_findings_marker:
            out += expanded
            expanded = []
        else:
            out.append(event)
    return out + expanded


def to_outputs(result: Any) -> JsonObject:
    data = result.to_json() if hasattr(result, "to_json") else result
    return data if isinstance(data, dict) else {"result": data}


def from_library(result: Any, summary: str = "", *, status: str | None = None,
                 recorded: bool = False) -> ActionResult:
    """Wrap a library result: its outputs, findings, audit records and artifacts (which the
    engine records: ``engine.record(case, from_library(result))`` is also how a caller of the
    library records it in a case). ``recorded``: the findings are already in the case (the
    checkpoint library, given ``case=``)."""
    findings = findings_of(result)
    if status is None:
        serious = any(f.severity.rank >= Severity.WARNING.rank for f in findings)
        status = "findings" if serious else "ok"
    audit, artifacts = records_of(result)
    return ActionResult(status=status, outputs=to_outputs(result), findings=findings,
                        summary=summary, audit=audit, artifacts=artifacts,
                        findings_recorded=recorded)


@dataclass
class StepContext:
    """What a running step is given: the case, the command runner, cancellation, the
    examiner's confirmation and the earlier steps' outputs."""

    case: Case
    runner: SubprocessRunner
    step_id: str
    cancel: threading.Event
    confirm: Callable[[str], bool | None]
    outputs: dict[str, JsonObject]  # earlier steps' outputs by step id
    # the action classes of every step of the run (what other steps will record)
    plan_actions: tuple[type[Action], ...] = ()

    def output(self, text: str) -> StepOutput:
        return StepOutput(step_id=self.step_id, text=text)

    def work_dir(self, name: str) -> Path:
        path = self.case.work_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def blocking(
        self, fn: Callable[[Callable[..., None]], T], *, label: str = "", unit: str = "B"
    ) -> Generator[Event, None, T]:
        """Run ``fn(progress)`` in a thread, yielding coalescible progress events meanwhile.

        ``progress(done, total=None, rate=None, eta_s=None, items_done=None, items_total=None)``
        may be called from any thread (``items``: files or objects, when the work counts them).
        """
        events: queue.Queue[Event | None] = queue.Queue()  # None: the work has ended
        box: dict[str, Any] = {}

        def progress(done: float, total: float | None = None, rate: float | None = None,
                     eta_s: float | None = None, items_done: int | None = None,
                     items_total: int | None = None, **_: Any) -> None:
            events.put(StepProgress(step_id=self.step_id, done=done, total=total, unit=unit,
                                    rate=rate, eta_s=eta_s, label=label, items_done=items_done,
                                    items_total=items_total))

        def target() -> None:
            try:
                box["value"] = fn(progress)
            except BaseException as exc:  # re-raised in the engine thread
                box["error"] = exc
            finally:
                events.put(None)  # the end is said, not polled for (a poll cost up to 0.1 s)

        thread = threading.Thread(target=target, daemon=True, name=f"step-{self.step_id}")
        thread.start()
        try:
            while True:
                try:
                    event = events.get(timeout=0.1)  # a timeout: Ctrl-C arrives meanwhile
                except queue.Empty:
                    continue
                if event is None:
                    break
                yield event
        except BaseException:
            # Ctrl-C arrives in this thread: ask the work to stop (libraries that take `cancel`
            # stop their tools) and give it time to clean up before the interrupt goes on.
            self.cancel.set()
            thread.join(timeout=60)
            raise
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]


class Action:
    """Base class. Subclasses set the class variables and implement ``run``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line: the TUI, the plan, step titles
    # the command line's help: its first paragraph, the paragraphs after it, and examples
    description: ClassVar[str] = ""
    examples: ClassVar[Sequence[str]] = ()
    capability: ClassVar[str] = "read_file"  # read_file, read_device, exec_tool, network_read,
    #                                          load_model_sandboxed, write_recovery, human
    args: ClassVar[Sequence[ArgSpec]] = ()
    output_type: ClassVar[type[StepOutputs]] = StepOutputs  # what its step outputs hold

    @classmethod
    def arg_names(cls) -> set[str]:
        return {a.name for a in cls.args}

    @classmethod
    def with_defaults(cls, given: ActionArgs) -> ActionArgs:
        merged = {a.name: a.default for a in cls.args if a.default is not None}
        merged.update(given)
        return merged

    def plan(self, args: ActionArgs) -> list[str]:
        """Human-readable lines: the commands this step would run (for --dry-run)."""
        shown = ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
        return [f"{self.name}({shown})"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        raise NotImplementedError
        yield  # pragma: no cover
