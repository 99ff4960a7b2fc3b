"""A CLI command generated from an engine action: its ``ArgSpec``s are the only declaration.

A command module declares, per action-backed command, a :class:`Command`: the action, how the
command shows the step's outputs (``render``, which returns the exit code) and what is only
presentation (``--json``, ``--tensors``-like extras, where ``--case`` goes in ``--help``).
:func:`register` builds the typer command from the action's arguments — positional or option,
spelling, short alias, help, defaults, negative boolean flags — and its help text from the
action's ``description`` and ``examples``.

One route: every such command runs its action as a one-step plan on the engine
(``engine.single_step``). With ``--case`` the step is recorded in that case; without it (where
the command allows that) in a temporary case under ``$TMPDIR`` (private, mode 0700) that is
removed when the command ends, so nothing is written beyond what the command itself writes.
Progress goes to stderr (``cli/render.py``). A step that failed ends the command with its own
error's message, hint and exit code (re-raised here, turned into the exit code by
``cli/main.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.models import CommandInfo

from ckptrescue.cli.options import CaseDirOpt, JsonOpt, OptionalCaseOpt
from ckptrescue.cli.output import info, interrupted, show
from ckptrescue.display import Shown, shown_tree
from ckptrescue.engine.argtypes import arg_type
from ckptrescue.errors import ExitCode, ToolFailedError

if TYPE_CHECKING:
    from ckptrescue.engine.action import Action, ActionArgs, ArgSpec
    from ckptrescue.engine.executor import Plan
    from ckptrescue.model import Finding, JsonObject, StepOutputs
    from ckptrescue.record.case import Case

CASE = "case"  # the names of the two common options in ``Command.order``
JSON = "json"

CreatedCaseOpt = Annotated[Path, typer.Option("--case", help="Case directory (created if new).")]


class StepFailedError(ToolFailedError):
    """The step could not do its job (its own error's message, hint and exit code)."""


@dataclass
class StepResult:
    """What a renderer gets: the step's outputs (typed and as stored), its findings, the case."""

    out: Any  # the action's StepOutputs type
    outputs: JsonObject
    status: str
    error: str | None
    findings: list[Finding]
    case: Case
    args: ActionArgs
    options: dict[str, Any]


def renders(text: Callable[..., Shown], json: Callable[[StepResult], Any] | None = None, *,
            findings: bool = False) -> Callable[[StepResult], int]:
    """A command's renderer from a wing's pure one (``<wing>/render.py``): the lines, asides
    and exit code ``text(outputs)`` gives (``text(outputs, findings)`` with ``findings``: the
    step's findings); with ``--json`` the stored outputs (or what ``json(result)`` makes of
    them) instead of the lines."""
    def render(result: StepResult) -> int:
        shown = text(result.out, result.findings) if findings else text(result.out)
        return show(shown, json=result.options[JSON],
                    data=json(result) if json is not None else result.outputs)
    return render


@dataclass(frozen=True)
class Command:
    """How one action-backed command presents its step (everything else is the action's).

    ``case``: "optional" (a temporary case without ``--case``), "required", or "create"
    (``--case`` is created when new). ``extras``: presentation-only options (not action
    arguments), read by the renderer from ``StepResult.options``. ``order``: the parameters
    in ``--help`` order (action argument names, extras, ``"case"``, ``"json"``); default: the
    action's arguments, the extras, ``--case``, ``--json``. ``fixed``: action arguments the
    command sets itself. ``check(args, options)`` refuses bad combinations before anything
    runs; ``before(args, options, plan)`` may end the command early with an exit code (a dry
    run); ``on_failure(result)`` shows what a failed step found before its error is raised;
    ``interrupted(args)`` is the message for Ctrl-C (exit 130); ``quiet(args, options)``
    silences progress; ``title(args)`` names a case the command creates;
    ``renders_failures``: the renderer handles failed/refused steps itself. ``optional``:
    positional arguments that may be left out (``store verify URL [LOCAL_DIR]``).
    ``deprecated``: an old option spelling -> the argument it now fills (hidden from
    ``--help``, still accepted with a note on stderr; docs/conventions.md lists them).
    """

    action: str
    render: Callable[[StepResult], int]
    case: str = "optional"
    extras: tuple[ArgSpec, ...] = ()
    order: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    json: bool = True
    check: Callable[[ActionArgs, dict[str, Any]], None] | None = None
    before: Callable[[ActionArgs, dict[str, Any], Plan], int | None] | None = None
    on_failure: Callable[[StepResult], None] | None = None
    interrupted: Callable[[ActionArgs], str] | None = None
    quiet: Callable[[ActionArgs, dict[str, Any]], bool] | None = None
    title: Callable[[ActionArgs], str] | None = None
    renders_failures: bool = False
    context_settings: Mapping[str, Any] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    deprecated: Mapping[str, str] = field(default_factory=dict)


# ---- building the typer command ----------------------------------------------------------------

def _value_type(kind: str) -> Any:
    """The value's type on the command line (typer converts to it): the one table's."""
    return arg_type(kind).python


def _annotation(spec: ArgSpec, *, optional: bool = False) -> tuple[Any, Any]:
    """(annotation, default) of the typer parameter for ``spec`` (``optional``: a positional
    argument that may be left out)."""
    if spec.type == "list":
        base: Any = list[_value_type(spec.item)]  # type: ignore[misc]
    else:
        base = _value_type(spec.type)
    info: dict[str, Any] = {"help": spec.help}
    if spec.metavar:
        info["metavar"] = spec.metavar
    if spec.hidden:
        info["hidden"] = True
    if spec.positional:
        info.setdefault("metavar", spec.param_name.upper())
        if optional:
            return Annotated[base | None, typer.Argument(**info)], None
        return Annotated[base, typer.Argument(**info)], inspect.Parameter.empty
    if spec.minimum is not None:
        info["min"] = spec.minimum
    names = [spec.option] + ([spec.short] if spec.short else [])
    option = typer.Option(*names, **info)
    if arg_type(spec.type).boolean:
        return Annotated[bool, option], False  # a flag flips the action's default
    if spec.required or spec.cli_required:
        return Annotated[base, option], inspect.Parameter.empty
    if spec.default is None or spec.type == "list":
        return Annotated[base | None, option], None
    default = float(spec.default) if spec.type == "number" else spec.default
    return Annotated[base, option], default


def _case_annotation(mode: str) -> tuple[Any, Any]:
    if mode == "required":
        return CaseDirOpt, inspect.Parameter.empty
    if mode == "create":
        return CreatedCaseOpt, inspect.Parameter.empty
    return OptionalCaseOpt, None


def _py_name(spec: ArgSpec) -> str:
    return spec.param_name if spec.positional else f"arg_{spec.name}"


def _deprecated_name(option: str) -> str:
    return "deprecated_" + option.lstrip("-").replace("-", "_")


def cli_args(action: type[Action]) -> list[ArgSpec]:
    return [a for a in action.args if a.cli]


def help_text(action: type[Action]) -> str:
    """The command's ``--help`` text: the action's description and examples."""
    text = action.description.strip()
    if action.examples:
        lines = [line for ex in action.examples for line in ex.splitlines()]
        body = "\n".join(f"    {line}" for line in lines)
        if len(action.examples) == 1:
            text += f"\n\nExample:\n\n{body}"
        else:
            text += f"\n\nExamples:\n\n\b\n{body}"
    return text


def build(command: Command) -> Callable[..., int]:
    """The typer callback of ``command``, with a signature generated from the action."""
    from ckptrescue.actions import ACTIONS

    action = ACTIONS[command.action]
    specs = {s.name: s for s in cli_args(action)}
    extras = {s.name: s for s in command.extras}
    order = list(command.order) or [*specs, *extras, CASE, *([JSON] if command.json else [])]
    params: list[inspect.Parameter] = []
    for name in order:
        if name == CASE:
            annotation, default = _case_annotation(command.case)
            py = "case_dir"
        elif name == JSON:
            annotation, default, py = JsonOpt, False, "as_json"
        else:
            spec = specs.get(name) or extras[name]
            annotation, default = _annotation(spec, optional=name in command.optional)
            py = _py_name(spec)
        params.append(inspect.Parameter(py, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=annotation, default=default))
    for old, target in command.deprecated.items():
        spec = specs[target]
        base = list[_value_type(spec.item)] if spec.type == "list" \
            else _value_type(spec.type)  # type: ignore[misc]
        params.append(inspect.Parameter(
            _deprecated_name(old), inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Annotated[base | None, typer.Option(old, hidden=True)], default=None))
    missing = set(specs) - set(order)
    if missing:
        raise RuntimeError(f"{command.action}: order leaves out {sorted(missing)}")

    def callback(**values: Any) -> int:
        return run(command, action, values)

    callback.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
    callback.__annotations__ = {p.name: p.annotation for p in params} | {"return": int}
    callback.__doc__ = help_text(action)
    callback.__name__ = command.action.replace(".", "_") + "_command"
    callback.ckptrescue_action = command.action  # type: ignore[attr-defined]
    return callback


def add_command(app: typer.Typer, name: str, command: Command) -> None:
    """``command`` as ``app``'s subcommand ``name``. Its callback is built (:func:`build`: the
    action's module imported, its signature made) when typer makes the click command of it: a
    command tree pruned to the one command a command line names (``cli.main._only_named``)
    builds that one alone, not its module's every command."""
    app.registered_commands.append(_Unbuilt(
        command, name=name, context_settings=dict(command.context_settings) or None))


class _Unbuilt(CommandInfo):
    """What ``app.command(name)(build(command))`` registers, with the callback built when it is
    first read (typer reads it only to make the click command)."""

    def __init__(self, command: Command, **info: Any) -> None:
        self._command = command
        self._built: Callable[..., int] | None = None
        super().__init__(**info)

    @property  # type: ignore[override]
    def callback(self) -> Callable[..., int]:
        if self._built is None:
            self._built = build(self._command)
        return self._built

    @callback.setter
    def callback(self, value: Callable[..., int] | None) -> None:
        self._built = value


def add_group(app: typer.Typer, name: str, help: str) -> typer.Typer:
    """A group of subcommands (``manifest build``), made anew for each command tree: a group
    kept at module level collected the commands of every tree built in a process, and each
    tree then made a click command of all of them (a test process builds hundreds of trees)."""
    group = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


# ---- running it --------------------------------------------------------------------------------

def _to_arg(spec: ArgSpec, value: Any) -> Any:
    if arg_type(spec.type).boolean:
        return bool(spec.default) != bool(value)  # a flag flips the default
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [str(v) if isinstance(v, Path) else v for v in value]
    return str(value) if isinstance(value, Path) else value


def split_values(command: Command, action: type[Action],
                 values: Mapping[str, Any]) -> tuple[ActionArgs, dict[str, Any]]:
    """(action arguments, presentation options) from the parsed command line."""
    args: ActionArgs = {}
    specs = {spec.name: spec for spec in cli_args(action)}
    for spec in specs.values():
        value = _to_arg(spec, values.get(_py_name(spec)))
        if value is not None:
            args[spec.name] = value
    for old, target in command.deprecated.items():
        value = values.get(_deprecated_name(old))
        if value is None:
            continue
        spec = specs[target]
        now = spec.param_name.upper() if spec.positional else spec.option
        if target in args:
            from ckptrescue.errors import UsageError

            raise UsageError(f"{old} is the old spelling of {now}: give one of them")
        info(f"note: {old} is deprecated; write {now} (docs/conventions.md)")
        args[target] = _to_arg(spec, value)
    args.update(command.fixed)
    options = {s.name: values.get(_py_name(s)) for s in command.extras}
    options[JSON] = bool(values.get("as_json"))
    options[CASE] = values.get("case_dir")
    return args, options


@contextmanager
def open_case(mode: str, case_dir: Path | None, *, title: str) -> Iterator[Case]:
    """The case a command records into: ``--case``, or a temporary one removed afterwards."""
    from ckptrescue.record.case import Case

    if case_dir is not None:
        yield Case.open_or_create(case_dir, title=title) if mode == "create" \
            else Case.open(case_dir)
        return
    from ckptrescue.effects import scratch

    # removed when the command ends: nothing in it needs to outlive a crash, and after a
    # kill -9 the next command that makes a temporary case removes it (effects/scratch.py)
    tmp = scratch.make("ckptrescue-tmpcase-")
    try:
        yield Case.create(Path(tmp.path) / "case", title=f"{title} (temporary)", durable=False)
    finally:
        tmp.remove()


def step_error(status: str, error: str | None, exit_code: int | None, hint: str | None,
               action: str) -> StepFailedError:
    exc = StepFailedError(error or f"{action} failed", hint=hint)
    if status == "cancelled":
        exc.exit_code = ExitCode.INTERRUPT
    elif exit_code is not None:
        exc.exit_code = ExitCode(exit_code)
    return exc


def literal(value: Any) -> Any:
    """A command-line value as the one-step plan must see it: never a template. The engine
    substitutes ``$name``/``${step.output}`` in playbook text the user wrote; a value typed
    on the command line (a path holding ``$``, a key, a tensor name) is escaped (``$`` as
    ``$$``), so that the engine gives it back exactly as typed."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list | tuple):
        return type(value)(literal(v) for v in value)
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    return value


def run(command: Command, action: type[Action], values: Mapping[str, Any]) -> int:
    from ckptrescue.cli.render import EventPrinter
    from ckptrescue.engine import executor as engine
    from ckptrescue.engine.events import FindingEmitted, StepFinished, StepProgress

    args, options = split_values(command, action, values)
    if command.check is not None:
        command.check(args, options)
    plan = engine.single_step(command.action, literal(args))
    if command.before is not None:
        code = command.before(args, options, plan)
        if code is not None:
            return code
    quiet = command.quiet(args, options) if command.quiet else False
    title = command.title(args) if command.title else f"ckptrescue {command.action}"
    printer = EventPrinter()
    findings: list[Finding] = []
    finished: StepFinished | None = None
    with open_case(command.case, options[CASE], title=title) as case:
        try:
            for event in engine.run(plan, case=case, resume=False):
                if isinstance(event, StepProgress) and not quiet:
                    printer(event)
                elif isinstance(event, FindingEmitted) and event.finding is not None:
                    findings.append(event.finding)
                elif isinstance(event, StepFinished):
                    finished = event
        except KeyboardInterrupt:
            printer.close()
            if command.interrupted is not None:
                interrupted(command.interrupted(args))
            elif options[CASE] is not None:
                interrupted(f"ckptrescue: interrupted; the case {case.root} records the step as "
                     "interrupted")
            else:
                interrupted("ckptrescue: interrupted (no --case: nothing was recorded)")
            raise typer.Exit(int(ExitCode.INTERRUPT)) from None
        printer.close()
        if finished is None:  # pragma: no cover - a one-step plan always finishes its step
            raise StepFailedError(f"{command.action}: the step did not run")
        ok = finished.status in {"ok", "findings"}
        stored = finished.outputs if ok else finished.partial
        output_type: type[StepOutputs] = action.output_type
        if not options[JSON]:  # names are shown, never obeyed (JSON escapes them itself)
            stored, findings, args = shown_tree((stored, findings, args), lines=False)
        result = StepResult(out=output_type.from_json(stored), outputs=stored,
                            status=finished.status, error=finished.error, findings=findings,
                            case=case, args=args, options=options)
        if not ok and not command.renders_failures:
            if command.on_failure is not None and stored:
                command.on_failure(result)
            raise step_error(finished.status, finished.error, finished.exit_code,
                             finished.hint, command.action)
        return command.render(result)
