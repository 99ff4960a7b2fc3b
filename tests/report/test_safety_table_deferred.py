"""The report's safety table counts a loop release the kernel deferred until it is released,
by the attachment's identity, in the order of the log: one loop device may be attached,
deferred and released again and again under the same name."""

from __future__ import annotations

from ckptrescue.report.model import safety_table


def _rec(seq: int, action: str, **details: object) -> dict:
    loop = {"kind": "loop", "name": "/dev/loop3", "rdev": "7:3", "backing_dev": "254:0",
            "backing_ino": 42, "readonly": True}
    return {"seq": seq, "action": action, "details": {**loop, **details}}


def _note(records: list[dict]) -> str:
    row = next(r for r in safety_table(records) if r["guarantee"].startswith("attachments"))
    return row["note"]


def test_a_deferral_released_later_is_no_longer_counted() -> None:
    records = [_rec(1, "safety.attached"), _rec(2, "safety.detach_deferred", why="held"),
               _rec(3, "safety.detached")]
    assert _note(records) == "1 attached, 1 released"


def test_the_same_loop_deferred_again_after_a_release_is_counted() -> None:
    records = [_rec(1, "safety.attached"), _rec(2, "safety.detach_deferred", why="held"),
               _rec(3, "safety.detached"), _rec(4, "safety.attached"),
               _rec(5, "safety.detach_deferred", why="held")]
    assert _note(records) == \
        "2 attached, 1 released, 1 release(s) deferred (still held open elsewhere)"


def test_another_backing_file_on_the_same_node_is_another_attachment() -> None:
    records = [_rec(1, "safety.attached"), _rec(2, "safety.detach_deferred", why="held"),
               _rec(3, "safety.detached", backing_ino=43)]
    assert _note(records).endswith("1 release(s) deferred (still held open elsewhere)")
