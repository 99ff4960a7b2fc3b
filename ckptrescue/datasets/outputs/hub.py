"""The record of the hub-cache action (``datasets/actions/hub.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class HubCacheOutput(StepOutputs):
    """What the ``hub.verify`` step records (each field: docs/step-outputs.md)."""

    root: str = doc_field("", "The hub cache directory verified.")
    counts: dict[str, int] = doc_field({},
        "repos, revisions, blobs, blobs_ok, blobs_bad, incomplete, links_ok, links_bad, "
        "broken_revisions.")
    repos: list[JsonObject] = doc_field([],
        "Per repository: folder, repo_type, repo_id, refs, revisions, blobs (those not ok: "
        "name, size, kind, status, actual, error, linked_from), blobs_total, blobs_ok, bytes, "
        "links (those not ok: revision, path, status, blob, detail), links_ok, "
        "broken_revisions (revision -> what breaks it), problems.")
    problems: list[str] = doc_field([], "Entries of the cache root that are not repositories.")
    bytes_hashed: int = doc_field(0, "Bytes read and hashed.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        c = self.counts
        return not (c.get("blobs_bad") or c.get("links_bad") or c.get("incomplete")
                    or self.problems or any(r.get("problems") for r in self.repos))
