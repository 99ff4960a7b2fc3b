"""``ckptrescue playbook list|show|lint|run|schema``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptrescue.cli.options import JsonOpt
from ckptrescue.cli.output import emit_json, info, interrupted, say
from ckptrescue.errors import ExitCode, PlaybookError

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

playbook_app = typer.Typer(help="List, show, lint and run playbooks.", no_args_is_help=True)


@playbook_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """List the shipped playbooks.

    Example:

        ckptrescue playbook list
    """
    from ckptrescue.playbook import load

    books = [load.load_file(p) for p in load.shipped().values()]
    if as_json:
        emit_json([{"name": b.name, "title": b.title, "source": b.source} for b in books])
        return
    for b in books:
        say(f"{b.name:<24} {b.title}")


@playbook_app.command("show")
def show(name: Annotated[str, typer.Argument(help="Playbook name or file.")],
         as_json: JsonOpt = False) -> None:
    """Show a playbook: parameters, steps and the commands each step runs.

    Example:

        ckptrescue playbook show full-incident
    """
    from ckptrescue.actions import registry
    from ckptrescue.playbook import load
    from ckptrescue.playbook.describe import value_text, when_text

    book = load.load_file(load.resolve(name))
    actions = registry()
    if as_json:
        emit_json({
            "name": book.name, "title": book.title, "description": book.description,
            "parameters": [{"name": p.name, "type": p.type, "required": p.required,
                            "default": p.default, "description": p.description}
                           for p in book.parameters],
            "steps": [{"id": s.id, "action": s.action, "with": s.args, "when": s.when,
                       "on_failure": s.on_failure} for s in book.steps],
        })
        return
    say(f"{book.name}: {book.title}")
    if book.description:
        say("")
        say(book.description.rstrip())
    say("")
    say("parameters:")
    for p in book.parameters:
        req = "required" if p.required and p.default is None else \
            f"default {value_text(p.default)}"
        say(f"  {p.name:<16} {p.type:<14} {req:<16} {p.description}")
    say("steps:")
    for s in book.steps:
        cap = actions[s.action].capability if s.action in actions else "?"
        cond = f"  (only when {when_text(s.when)})" if s.when is not None else ""
        say(f"  {s.id:<16} {s.action:<14} [{cap}] {s.title}{cond}")


@playbook_app.command("lint")
def lint_cmd(path: Annotated[Path, typer.Argument(help="Playbook file (YAML).")],
             as_json: JsonOpt = False) -> int:
    """Check a playbook: schema, actions, parameters, references and guard-refused commands.

    Exit 0 when clean, 2 with one line per problem (file:line: message).

    Example:

        ckptrescue playbook lint my-playbook.yaml
    """
    from ckptrescue.playbook import load
    from ckptrescue.playbook.lint import lint
    from ckptrescue.playbook.validate import schema_problems

    book_path = load.resolve(str(path))
    problems = [str(p) for p in schema_problems(book_path)]
    if not problems:
        problems = [str(p) for p in lint(load.load_file(book_path))]
    if as_json:
        emit_json({"file": str(book_path), "problems": problems})
    else:
        for p in problems:
            info(p)
        if not problems:
            say(f"{book_path}: OK")
    return int(ExitCode.USAGE if problems else ExitCode.OK)


@playbook_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of playbook files.

    Example:

        ckptrescue playbook schema > playbook.schema.json
    """
    from ckptrescue.playbook.schema import json_schema

    emit_json(json_schema())


@playbook_app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="Playbook name or file.")],
    case_dir: Annotated[Path | None, typer.Option(
        "--case", help="Case directory (created if new; an existing one resumes). Without it: "
        "a new private case under $TMPDIR (mode 0700), kept, its path printed.")] = None,
    param: Annotated[list[str] | None, typer.Option("-p", "--param",
                                                    help="KEY=VALUE (repeatable).")] = None,
    params_file: Annotated[Path | None, typer.Option(
        "-P", "--params-file", help="JSON or YAML mapping of parameters (-p overrides).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Answer every confirm gate with yes.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run",
                                          help="Print the plan and every command; run nothing.")]
    = False,
    title: Annotated[str, typer.Option("--title", help="Title for a new case.")] = "",
    as_json: JsonOpt = False,
) -> int:
    """Lint, then run a playbook in a case. A rerun of the same command resumes.

    The steps, their findings and the answer go to stdout (to stderr with --json, which prints
    the result as JSON on stdout); progress bars go to stderr. The last lines name the case and
    the report. Without --case the run makes a new private case and prints its path: pass it
    as --case to resume.

    Exit 0 when nothing is wrong, 1 when problems were found, 2 when stopped at a gate or on bad
    parameters, 3 when the guard refused a step, 4 when a step failed, 130 when interrupted.

    Examples:

    \b
        ckptrescue playbook run probe-checkpoints --case /cases/INC-042 -p run_dir=/mnt/ckpts
        ckptrescue playbook run full-incident --yes -P drill/params.json
    """
    from ckptrescue.cli.render import EventPrinter
    from ckptrescue.engine import executor as engine
    from ckptrescue.engine.events import RunFinished, StepFinished, StepStarted
    from ckptrescue.playbook import params

    given = params.load_file(params_file) if params_file else {}
    given.update(params.parse_assignments(param or []))
    plan = engine.prepare(name, given)
    plan.answers_yes = yes
    if dry_run:
        steps = engine.dry_run(plan)
        if as_json:
            emit_json({"playbook": plan.playbook.name, "params": plan.params,
                       "steps": [{"id": d.step.id, "action": d.step.action, "when": d.when,
                                  "commands": d.lines} for d in steps]})
        else:
            say(f"plan {plan.playbook.name} (run key {plan.run_key}):")
            for d in steps:
                cond = f"   — only when {d.condition}" if d.condition else ""
                if d.decided is not None:
                    cond += " (runs with these parameters)" if d.decided else \
                        " (skipped with these parameters)"
                say(f"  {d.step.id} [{d.step.action}]{cond}")
                for line in d.lines:
                    say(f"      $ {line}")
        return 0
    case = _open_case(case_dir, title=title or f"playbook {plan.playbook.name}")

    def ask(prompt: str) -> bool | None:
        if not sys.stdin.isatty():
            return None
        reply = typer.prompt(f"{prompt} [y/N]", default="n", show_default=False)
        return reply.strip().lower() in {"y", "yes"}

    # the run's transcript is its result (stdout); progress bars are not (stderr)
    printer = EventPrinter(sys.stderr if as_json else sys.stdout, progress=sys.stderr,
                           case=case)
    final: RunFinished | None = None
    statuses: list[str] = []
    actions: dict[str, str] = {}
    report: str | None = None
    try:
        for event in engine.run(plan, case=case, confirm=ask):
            printer(event)
            if isinstance(event, StepStarted):
                actions[event.step_id] = event.action
            if isinstance(event, StepFinished):
                statuses.append(event.status)
                if actions.get(event.step_id) == "report" and event.outputs.get("path"):
                    report = str(event.outputs["path"])
            if isinstance(event, RunFinished):
                final = event
    except KeyboardInterrupt:
        printer.close()
        _interrupted(case, name, case_dir is None)
        return int(ExitCode.INTERRUPT)
    assert final is not None
    if report is None and (case.root / "report.html").is_file():
        report = str((case.root / "report.html").absolute())
    if as_json:
        emit_json({"status": final.status, "answer": final.answer,
                   "failed_step": final.failed_step, "case": str(case.root.absolute()),
                   "report": report})
    else:
        say(f"case:   {case.root.absolute()}")
        if report:
            say(f"report: {report}")
    if final.status == "stopped":
        info(f"ckptrescue: stopped at confirm gate {final.failed_step!r}; rerun "
             f"{_rerun(name, case, case_dir is None)} with --yes (scripted) or in a terminal "
             "to answer it; finished steps will not be repeated")
        return int(ExitCode.USAGE)
    if final.status == "failed":
        return int(ExitCode.REFUSED if "refused" in statuses else ExitCode.FAILURE)
    if final.status == "cancelled":
        return int(ExitCode.INTERRUPT)
    return int(ExitCode.FINDINGS if final.status == "findings" else ExitCode.OK)


def _open_case(case_dir: Path | None, *, title: str) -> Case:
    """``--case`` (created if new), else a new private case under ``$TMPDIR`` that is kept."""
    import os
    import tempfile

    from ckptrescue.record.case import Case

    if case_dir is not None:
        return Case.open_or_create(case_dir, title=title)
    scratch = Path(tempfile.mkdtemp(prefix="ckptrescue-case-"))  # mode 0700
    case = Case.create(scratch / "case", title=title)
    os.chmod(case.root, 0o700)
    info(f"case: {case.root} (a new private case; pass --case DIR to choose where)")
    return case


def _rerun(name: str, case: Case, private: bool) -> str:
    """How to resume: the same command (a private case must then be named)."""
    return (f"the same command with --case {case.root}" if private else "the same command")


def _interrupted(case: Case, name: str, private: bool) -> None:
    """Ctrl-C: say what the case keeps and what it left attached, truthfully."""
    import os

    live = case.attachments()  # as the kernel showed them when attached
    mounts = [str(a["name"]) for a in live
              if a.get("kind") == "mount" and os.path.ismount(str(a.get("name")))]
    loops = [str(a["name"]) for a in live if a.get("kind") == "loop"
             and os.path.exists(f"/sys/block/{os.path.basename(str(a.get('name')))}/loop")]
    interrupted(f"ckptrescue: interrupted; the case {case.root} keeps every finished step: "
                f"rerun {_rerun(name, case, private)} to resume")
    for mountpoint in mounts:
        info(f"ckptrescue: still mounted (read-only) by this case: {mountpoint}; release it "
             f"with: ckptrescue umount {mountpoint} --case {case.root.absolute()}")
    if loops and not mounts:
        info(f"ckptrescue: loop device(s) still attached read-only by this case: "
             f"{', '.join(loops)}")


def register(app: typer.Typer) -> None:
    app.add_typer(playbook_app, name="playbook")


__all__ = ["PlaybookError", "register"]
