"""The record of a watch pass (``datasets/actions/watch.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class WatchPassOutput(StepOutputs):
    """What the ``watch.pass`` step records (each field: docs/step-outputs.md)."""

    source: str = doc_field("", "The watched directory or s3:// prefix.")
    full: bool = doc_field(False, "A full pass (else only inotify's paths).")
    files_total: int = doc_field(0, "Files in the source.")
    checked: int = doc_field(0, "Files checked (new or changed).")
    new: int = doc_field(0, "New files.")
    changed: int = doc_field(0, "Changed files.")
    missing: int = doc_field(0, "Files gone since the last pass.")
    bytes_read: int = doc_field(0, "Bytes read.")
    elapsed_s: float = doc_field(0.0, "Wall time of the pass.")
    bad: list[JsonObject] = doc_field([], "Per bad file: path, code (WA001-WA005), problem.")
    bad_total: int = doc_field(0, "Files bad or gone in the whole state.")
    notes: list[str] = doc_field([], "Alerts that could not be delivered.")
    answer: str = answer_field()
