"""Typed step outputs of the foundation's actions (confirm, exec, collect.logs, case.verify,
report, drill.load): one record type per action, read by type, never by action-name strings.
The wings keep theirs (``checkpoints/outputs.py``, ``storage/outputs.py``,
``datasets/outputs/``, ``stores/outputs.py``).

A step's outputs are stored as a JSON artifact (``engine.run``); each action names its record
type (``Action.output_type``), and readers — the CLI's renderers, ``answer.py``, the report,
the TUI — turn the stored JSON back into that type with ``from_json``. Keys a record does not
declare are kept in ``extra`` so that ``to_json`` gives the stored JSON back unchanged, and a
record from an older case (a key missing) loads with the field's default.

``json_keys``, when set, is the documented ``--json`` shape of the command: the keys the CLI
prints. A step may record more than that (e.g. ``locate`` keeps its notes and the ranges it
could not map, which the human output shows and ``--json`` never did).

``docs/step-outputs.md`` is generated from these classes by ``docs/generate.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject, StepOutputs, doc_field

# ---- the foundation --------------------------------------------------------------------------

@dataclass
class ConfirmOutput(StepOutputs):
    """What the ``confirm`` step records (each field: docs/step-outputs.md)."""

    confirmed: bool = doc_field(False, "The responder confirmed the gate.")


@dataclass
class ExecOutput(StepOutputs):
    """What the ``exec`` step records (each field: docs/step-outputs.md)."""

    returncode: int | None = doc_field(None, "The tool's exit status.")
    stdout_sha256: str | None = doc_field(None, "SHA-256 of the stdout artifact.")
    stderr_sha256: str | None = doc_field(None, "SHA-256 of the stderr artifact.")
    stdout: str = doc_field("", "The first 64 KiB of stdout (text).")


@dataclass
class CollectLogsOutput(StepOutputs):
    """What the ``collect.logs`` step records (each field: docs/step-outputs.md)."""

    logs: JsonObject = doc_field({},
        "Per tool run (dmesg, journalctl, sacct, scontrol, kubectl): argv, returncode, sha256 "
        "of the captured artifact, bytes.")
    files: list[JsonObject] = doc_field([],
        "Per log file kept: path, kind (log:NAME or cloudtrail), size, offset, read, "
        "truncated, sha256, error.")


@dataclass
class CaseVerifyOutput(StepOutputs):
    """What the ``case.verify`` step records (each field: docs/step-outputs.md)."""

    ok: bool = doc_field(False, "The audit chain and every artifact verify.")


@dataclass
class ReportOutput(StepOutputs):
    """What the ``report`` step records (each field: docs/step-outputs.md)."""

    path: str = doc_field("", "Where the report was written.")
    sha256: str = doc_field("", "SHA-256 of the report (also stored as an artifact).")
    format: str = doc_field("", "html, md or json.")


@dataclass
class DrillLoadOutput(StepOutputs):
    """What the ``drill.load`` step records (each field: docs/step-outputs.md)."""

    image: str = doc_field("", "The drill's disk image.")
    badsectors_map: str = doc_field("", "ddrescue test-mode map of its bad sectors.")
    known_good_manifest: str = doc_field("", "Manifest of the drill dataset's good state.")
    endpoint_url: str = doc_field("", "Local S3 endpoint ('' without S3).")
    bucket: str = doc_field("", "Its bucket.")
    s3_prefix_url: str = doc_field("", "s3://bucket/prefix of the drill's objects.")
    has_s3: bool = doc_field(False, "The drill has an S3 part.")
    faults: list[Any] = doc_field([], "The faults the drill planted.")
