"""The records of the pre-load actions (``datasets/actions/preload.py``): quarantine lists and the
gate."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class QuarantineOutput(StepOutputs):
    """What the ``dataset.quarantine`` step records (each field: docs/step-outputs.md)."""

    quarantine: JsonObject = doc_field({},
        "The quarantine list (schema ckptrescue.datasets.quarantine/1): files, records, sources.")
    output: str | None = doc_field(None, "The JSON list written.")
    path_list: str | None = doc_field(None, "The plain list of whole bad files written.")
    answer: str = answer_field()


@dataclass
class GateOutput(StepOutputs):
    """What the ``gate`` step records (each field: docs/step-outputs.md)."""

    target: str = doc_field("", "The dataset directory or checkpoint gated.")
    passed: bool = doc_field(False, "True when the job may start.")
    reason: str = doc_field("", "The one-line reason.")
    checked: int = doc_field(0, "Files (or checkpoints) checked.")
    hashed: list[str] = doc_field([], "The sampled files hashed in full.")
    hashed_bytes: int = doc_field(0, "Bytes hashed.")
    seed: int | None = doc_field(None, "The sample's seed (redraw with it).")
    problems: list[JsonObject] = doc_field([],
        "Per problem: path, problem (and the worst finding for a checkpoint).")
    unverified: list[str] = doc_field([],
        "Files under the target the manifest does not list (the first 100).")
    unverified_count: int = doc_field(0, "How many such files: they fail the gate unless allow_unverified.")
    allow_unverified: bool = doc_field(False, "Files not in the manifest were accepted.")
