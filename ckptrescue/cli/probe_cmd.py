"""``ckptrescue probe | salvage | rank``: thin adapters over probes.checkpoints, salvage, rank."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptrescue.cli.options import JsonOpt, OptionalCaseOpt
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.errors import ExitCode


def _open_case(case_dir: Path | None):  # noqa: ANN202
    if case_dir is None:
        return None
    from ckptrescue.case import Case

    return Case.open(case_dir)


def probe_command(
    paths: Annotated[list[Path], typer.Argument(help="Checkpoint files, checkpoint directories "
                                                "or run directories (all probed).")],
    reference: Annotated[Path | None, typer.Option(
        "--reference", help="A previous checkpoint to compare with.")] = None,
    load: Annotated[bool, typer.Option(
        "--load", help="Also run the real loader in a sandboxed child (only when the "
        "structural verdict allows).")] = False,
    no_numeric: Annotated[bool, typer.Option("--no-numeric",
                                             help="Skip the numerical health scan.")] = False,
    tensors: Annotated[bool, typer.Option("--tensors", help="Include the per-tensor map "
                                          "(file, offset, length, status) in --json.")] = False,
    scheduler: Annotated[str | None, typer.Option(
        "--scheduler", help="Dask scheduler address: probe each checkpoint on a worker "
        "(needs the [cluster] extra; workers must see the same paths).")] = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Verify checkpoints without executing them; exit 0 when every one is intact, else 1.

    Formats: torch.save zip and legacy, safetensors, Hugging Face sharded, torch DCP,
    TensorFlow TensorBundle / SavedModel / checkpoint state, Keras .keras / .h5.
    Verdicts: intact, suspect, damaged, truncated, incomplete, unsafe, unreadable.

    Example:

        ckptrescue probe runs/exp1/ --reference runs/exp1/step_900.pt --json
    """
    from ckptrescue.probes.checkpoints import probe_json, probe_paths

    case = _open_case(case_dir)
    if case is not None:  # recorded in the case: a one-step plan on the engine
        from ckptrescue.cli.bridge import run_action

        reports = run_action("probe", {"paths": [str(p) for p in paths],
                                       "reference": str(reference) if reference else None,
                                       "load": load, "numeric": not no_numeric,
                                       "scheduler": scheduler}, case=case)
    else:
        reports = probe_paths(paths, reference=reference, load=load, case=None,
                              numeric=not no_numeric, scheduler=scheduler)
    if as_json:
        emit_json(probe_json(reports, with_tensors=tensors))
    else:
        for r in reports:
            say(f"{r.verdict.upper():<10} {r.format:<12} {r.path}  ({r.tensors_total} tensors)")
            for label, names in (("damaged", r.damaged_tensors), ("missing", r.missing_tensors),
                                 ("suspect", r.suspect_tensors)):
                if names:
                    say(f"    {label}: " + ", ".join(names[:12])
                        + (f" ... (+{len(names) - 12})" if len(names) > 12 else ""))
            for f in r.findings:
                if f.severity != "info":
                    say(f"    [{f.code}] {f.title}")
            if r.load is not None:
                say(f"    load: {r.load.get('status')}")
    if not reports:
        info("ckptrescue: no checkpoints found")
        return int(ExitCode.FINDINGS)
    return 0 if all(r.verdict == "intact" for r in reports) else int(ExitCode.FINDINGS)


def salvage_command(
    checkpoint: Annotated[Path, typer.Argument(help="The damaged checkpoint.")],
    out_dir: Annotated[Path, typer.Argument(help="New recovery directory (not next to the "
                                            "input, not on a read-only mount).")],
    fill_from: Annotated[Path | None, typer.Option(
        "--fill-from", help="Take lost tensors from this reference checkpoint.")] = None,
    allow_next_to_input: Annotated[bool, typer.Option(
        "--allow-next-to-input", help="Allow OUT_DIR inside the input's directory.")] = False,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Write every verified tensor into OUT_DIR/<name>.salvaged.safetensors + salvage.json.

    Exit 0 only when every tensor came back verified; 1 when some were lost (listed with
    reasons), numerically suspect (written apart to OUT_DIR/<name>.suspect.safetensors) or
    when nothing at all could be recovered.

    Example:

        ckptrescue salvage /evidence/step_1200.pt /recovery/step_1200 --fill-from step_1100.pt
    """
    from ckptrescue.salvage import salvage

    case = _open_case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("salvage", {"checkpoint": str(checkpoint), "out_dir": str(out_dir),
                                        "fill_from": str(fill_from) if fill_from else None,
                                        "allow_next_to_input": allow_next_to_input}, case=case)
    else:
        result = salvage(checkpoint, out_dir, fill_from=fill_from, case=None,
                         allow_next_to_input=allow_next_to_input)
    if as_json:
        emit_json(result.to_json())
    else:
        say(f"wrote {result.output}")
        say(f"recovered {len(result.recovered)}, lost {len(result.lost)}, "
            f"filled {len(result.filled)}, suspect {len(result.suspect)}")
        for item in result.lost:
            say(f"    lost {item['name']}: {item['reason']}")
        for sus in result.suspect:
            say(f"    suspect {sus['name']}: {'; '.join(sus['reasons'])}")
        if result.suspect_output:
            say(f"suspect tensors written apart to {result.suspect_output}")
        if result.unaccounted:
            say(f"not complete: {result.unaccounted}")
        if not (result.recovered or result.filled):
            say("nothing was recovered")
    return 0 if result.clean else int(ExitCode.FINDINGS)


def rank_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory holding checkpoints.")],
    case_dir: OptionalCaseOpt = None,
    load: Annotated[bool, typer.Option(
        "--load", help="Also load each checkpoint with its real library in the sandbox; a file "
                       "the loader refuses (or that tries to escape) is never recommended.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """List a run's checkpoints newest first with a verdict each, and the one to resume from.

    Exit 0 when a resumable (intact) checkpoint exists, else 1.

    Example:

        ckptrescue rank runs/exp1 --load --json
    """
    from ckptrescue.rank import rank

    case = _open_case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("rank", {"run_dir": str(run_dir), "record_findings": True,
                                     "load": load}, case=case)
    else:
        result = rank(run_dir, case=None, load=load)
    if as_json:
        emit_json(result.to_json())
    else:
        for c in result.checkpoints:
            say(f"{c.verdict.upper():<10} {c.path}")
        say(f"resume from: {result.resume_from or '(none)'}")
    return 0 if result.resume_from else int(ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_command)
    app.command("salvage")(salvage_command)
    app.command("rank")(rank_command)
