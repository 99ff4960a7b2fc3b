"""Runs fuzz cases through the kit's entry points in worker processes, with a time limit.

One case = one mutant (``fixtures/fuzz/mutate.py``) written to a fresh directory and given to
the library function behind the CLI: :func:`ckptrescue.checkpoints.probes.checkpoints.probe_paths` (+ the
JSON ``ckptrescue probe --json`` prints) for checkpoints, :func:`verify_dataset` (+ its JSON,
answer and findings) for datasets. The case is *total* when no exception escapes, every report
carries a :class:`Verdict`, every file of the mutant is named by a report (checkpoints) or gets
a status (datasets), and no file is ``unchecked`` because its checker raised (``dataset
verify`` catches a checker's exception and calls the file unchecked: a swallowed crash).

Workers are spawned (never forked from a process that may hold torch's threads), take one case
at a time, and are killed and replaced when a case exceeds its time limit (the case is then a
``Timeout`` failure). Address space is limited so that a bomb is a ``MemoryError``, not an OOM.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CASE_TIMEOUT_S = float(os.environ.get("CKPTRESCUE_FUZZ_TIMEOUT", "20"))
MEMORY_LIMIT = 6 << 30


@dataclass
class CaseResult:
    case_id: str
    seed: str
    what: str = ""
    ok: bool = True
    error: str | None = None  # "ExcType" (grouping key)
    message: str = ""
    where: str = ""  # innermost ckptrescue frame
    codes: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)  # for the oracle
    elapsed: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _innermost(tb: Any) -> str:
    where = ""
    for frame in traceback.extract_tb(tb):
        if "/ckptrescue/" in frame.filename:
            where = f"{frame.filename.split('/ckptrescue/', 1)[1]}:{frame.lineno} {frame.name}"
    return where


def run_case(case_id: str, *, keep_tensors: bool = False) -> CaseResult:
    """Build the mutant ``case_id`` and run it through the kit (in this process)."""
    from fixtures.fuzz import mutate, seeds

    seed, index = mutate.parse_case_id(case_id)
    kind = seeds.SEEDS[seed][0]
    res = CaseResult(case_id, seed)
    files, res.what = mutate.mutate(seed, index, seeds.load_seed(seed))
    tmp = Path(tempfile.mkdtemp(prefix="ckr-fuzz-"))
    case_dir = tmp / seed
    case_dir.mkdir()
    for rel, data in files.items():
        (case_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (case_dir / rel).write_bytes(data)
    started = time.monotonic()
    try:
        if kind == "checkpoint":
            _probe(case_dir, files, res, keep_tensors)
        else:
            _verify(case_dir, files, res)
    except BaseException as exc:  # noqa: BLE001 - totality: everything that escapes is a failure
        if isinstance(exc, KeyboardInterrupt):
            raise
        res.ok = False
        res.error = type(exc).__name__
        res.message = str(exc)[:300]
        res.where = _innermost(exc.__traceback__)
    finally:
        res.elapsed = time.monotonic() - started
        shutil.rmtree(tmp, ignore_errors=True)
    return res


class NotTotal(AssertionError):
    """The entry point returned, but not a verdict for everything."""


def _probe(case_dir: Path, files: dict[str, bytes], res: CaseResult, keep: bool) -> None:
    from ckptrescue.checkpoints.base import Verdict
    from ckptrescue.checkpoints.probes.checkpoints import probe_json, probe_paths

    reports = probe_paths([case_dir])
    json.dumps(probe_json(reports, with_tensors=True))
    named: set[str] = set()
    for r in reports:
        if not isinstance(r.verdict, Verdict):
            raise NotTotal(f"{r.path}: verdict {r.verdict!r} is not a Verdict")
        res.verdicts.append(str(r.verdict))
        res.codes += [f.code for f in r.findings]
        named |= {os.path.realpath(p) for p in [r.path, *r.files]}
        if keep:
            res.tensors += [{**t.to_json(), "verdict": str(r.verdict)} for t in r.tensors]
    missing = [rel for rel in files if os.path.realpath(case_dir / rel) not in named
               and os.path.realpath(case_dir) not in named]
    if files and missing:
        raise NotTotal(f"no verdict names {missing}")


def _verify(case_dir: Path, files: dict[str, bytes], res: CaseResult) -> None:
    from ckptrescue.datasets.verify import verify_dataset

    result = verify_dataset(case_dir, jobs=1)
    json.dumps(result.to_json())
    result.answer()
    res.codes += [f.code for f in result.findings()]
    if len(result.files) != len(files):
        raise NotTotal(f"{len(files)} files, {len(result.files)} results")
    for f in result.files:
        if f.status not in ("ok", "damaged", "unreadable", "unchecked"):
            raise NotTotal(f"status {f.status!r}")
        res.verdicts.append(f.status)
        res.codes.append(f"status:{f.status}")
        if f.status == "unchecked" and "internal error" in f.note:
            # verify caught the checker's exception: report it as the crash it is
            name = f.note.split(": ", 1)[1] if ": " in f.note else f.note
            raise SwallowedCrash(name)


class SwallowedCrash(Exception):
    """A checker raised and ``dataset verify`` reported the file ``unchecked``."""

    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.exc_type = note.split(":", 1)[0]


def _worker(conn: Connection) -> None:
    sys.path.insert(0, str(REPO))
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        case_id, keep = msg
        try:
            res = run_case(case_id, keep_tensors=keep)
        except BaseException as exc:  # noqa: BLE001 - harness bug: still a result
            res = CaseResult(case_id, case_id.rpartition(":")[0], ok=False,
                             error=f"harness:{type(exc).__name__}", message=str(exc)[:300])
        if res.error == "SwallowedCrash":
            res.error = "swallowed:" + res.message.split(":", 1)[0]
        conn.send(res)


def run_cases(case_ids: list[str], *, workers: int = 2, keep_tensors: bool = False,
              timeout: float = CASE_TIMEOUT_S) -> list[CaseResult]:
    """Run every case in ``workers`` spawned processes; results in input order."""
    ctx = mp.get_context("spawn")
    pending = list(reversed(case_ids))
    results: dict[str, CaseResult] = {}
    slots: list[dict[str, Any]] = []

    def start() -> dict[str, Any]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "case": None, "since": 0.0}

    def feed(slot: dict[str, Any]) -> None:
        if pending:
            slot["case"] = pending.pop()
            slot["since"] = time.monotonic()
            slot["conn"].send((slot["case"], keep_tensors))
        else:
            slot["case"] = None

    for _ in range(max(1, min(workers, len(case_ids)))):
        slot = start()
        slots.append(slot)
        feed(slot)
    while any(s["case"] for s in slots):
        busy = [s for s in slots if s["case"]]
        ready = wait([s["conn"] for s in busy], timeout=1.0)
        now = time.monotonic()
        for slot in busy:
            if slot["conn"] in ready:
                try:
                    res = slot["conn"].recv()
                except EOFError:  # the worker died (segfault, abort, OOM kill)
                    code = slot["proc"].exitcode if not slot["proc"].join(5) else None
                    res = CaseResult(slot["case"], slot["case"].rpartition(":")[0], ok=False,
                                     error="WorkerDied", message=f"exit code {code}")
                    _replace(slot, start)
                results[res.case_id] = res
                feed(slot)
            elif now - slot["since"] > timeout:
                results[slot["case"]] = CaseResult(
                    slot["case"], slot["case"].rpartition(":")[0], ok=False, error="Timeout",
                    message=f"no result within {timeout:.0f} s", elapsed=now - slot["since"])
                _replace(slot, start)
                feed(slot)
    for slot in slots:
        try:
            slot["conn"].send(None)
        except (BrokenPipeError, OSError):
            pass
        slot["proc"].join(5)
        if slot["proc"].is_alive():
            slot["proc"].kill()
    return [results[c] for c in case_ids]


def _replace(slot: dict[str, Any], start: Any) -> None:
    slot["proc"].kill()  # our own worker, by its handle
    slot["proc"].join(5)
    slot["conn"].close()
    fresh = start()
    slot.update(proc=fresh["proc"], conn=fresh["conn"])
