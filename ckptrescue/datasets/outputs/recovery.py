"""The record of the recover action (``datasets/actions/recovery.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class RecoverOutput(StepOutputs):
    """What the ``recover`` step records (each field: docs/step-outputs.md)."""

    source: str = doc_field("", "Snapshots directory or s3:// prefix.")
    to: str = doc_field("", "The recovery directory.")
    files: list[JsonObject] = doc_field([],
        "Per damaged file: path, damage, status, source, sha256, reason, tried.")
    counts: dict[str, int] = doc_field({}, "recovered, unrecoverable.")
    answer: str = answer_field()
    plan: list[JsonObject] = doc_field([],
        "With --plan: the swap-back plan, one entry per recovered file: path, damage, target "
        "(the damaged file in DIR, or where the missing file belongs), replacement (the verified "
        "copy), source (snapshot or object version), sha256, size, expected_sha256, and command "
        "(the script's line for it); the kit never applies it.")
    plan_file: str | None = doc_field(None,
        "With --plan: the plan written as JSON (and a shell script beside it, for review).")
    clean_view: str | None = doc_field(None,
        "With --clean-view: a tree of symlinks to verified files only (intact originals and "
        "recovered copies), with its own manifest, for the rerun to train on.")
    plan_script: str | None = doc_field(None,
        "With --plan: the bash script written beside the plan (PLAN.sh), for review; run it as "
        "`bash PLAN.sh [DATASET-ROOT]`.")
    plan_unrecoverable: list[JsonObject] = doc_field([],
        "With --plan: files with no verified replacement: path, damage, reason.")
    clean_view_manifest: str | None = doc_field(None,
        "With --clean-view: the view's manifest VIEW.sha256 (sidecar VIEW.sha256.jsonl).")
    clean_view_files: int = doc_field(0, "With --clean-view: files linked in the view.")
    clean_view_left_out: list[JsonObject] = doc_field([],
        "With --clean-view: files neither ok nor recovered, left out: path, reason.")

    @property
    def ok(self) -> bool:
        return not any(f.get("status") != "recovered" for f in self.files)
