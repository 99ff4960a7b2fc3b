"""``probe --scheduler ADDRESS``: probe each checkpoint of a run on a Dask worker.

Workers read the checkpoints where they live (a shared filesystem at the same path), run the
same pure probe as a local run, and send back the reports; the caller merges them in order, so
the output equals a local run's. Loads (``--load``) and case recording stay on the caller.

A multi-rank family step (``families/base.py``, generic probe) is spread over the workers rank
file by rank file: the caller reads the step's layout, submits its members in batches (a bounded
number in flight, so memory stays flat in the number of ranks), gets back one small summary per
member and merges them exactly as a local run does (``Family.probe_with``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions
from ckptrescue.checkpoints.probes.single import probe_one
from ckptrescue.errors import RemoteError

BATCH_MEMBERS = 32  # rank files per Dask task
IN_FLIGHT_PER_WORKER = 4  # tasks in flight per worker


def _probe_remote(fmt: Any, path: str, options: ProbeOptions) -> CheckpointReport:
    return probe_one(fmt, Path(path), options)


def _all_exist(paths: list[str]) -> bool:
    return all(os.path.exists(p) for p in paths)


def _summarize_batch(family: Any, members: list[Any], numeric: bool,
                     extra: frozenset[str]) -> list[tuple[Any, dict[str, Any]]]:
    from ckptrescue.checkpoints.families.base import summarize_in_worker

    return [summarize_in_worker(family, m, numeric, extra) for m in members]


def generic_family(fmt: Any) -> bool:
    """A family whose probe is the generic per-member one (so its members can be spread)."""
    from ckptrescue.checkpoints.families.base import Family

    probe = getattr(fmt, "probe", None)
    return (isinstance(fmt, type) and issubclass(fmt, Family)
            and getattr(probe, "__func__", None) is Family.probe.__func__)


def member_source(client: Any, workers: int) -> Any:
    """A ``SummarySource`` submitting a step's members to ``client`` in batches."""

    def source(family: Any, layout: Any, options: ProbeOptions) -> Iterator[Any]:
        from distributed import as_completed

        from ckptrescue.checkpoints.formats.tolerant_read import add_unreadable

        extra = family.allowed_globals | options.extra_allowed
        members = list(layout.members)
        batches = [members[i:i + BATCH_MEMBERS] for i in range(0, len(members), BATCH_MEMBERS)]
        queue = iter(batches)
        limit = max(2, workers * IN_FLIGHT_PER_WORKER)
        pending = as_completed([], loop=client.loop)
        inflight = 0
        for batch in queue:
            pending.add(client.submit(_summarize_batch, family, batch, options.numeric, extra,
                                      pure=False))
            inflight += 1
            if inflight >= limit:
                break
        while inflight:
            fut = next(pending)
            inflight -= 1
            results = fut.result()
            fut.release()
            for summary, unreadable in results:
                add_unreadable(unreadable)
                yield summary
            for batch in queue:
                pending.add(client.submit(_summarize_batch, family, batch, options.numeric,
                                          extra, pure=False))
                inflight += 1
                break

    return source


def _probe_family_step(fmt: Any, path: Path, options: ProbeOptions,
                       source: Any) -> CheckpointReport:
    """``probe_one`` for a family step whose members are probed by ``source``."""
    from ckptrescue.checkpoints.formats.tolerant_read import collect_unreadable
    from ckptrescue.checkpoints.probes.single import mark_unreadable

    with collect_unreadable() as unreadable:
        report: CheckpointReport = fmt.probe_with(path, options, source)
    if unreadable:
        mark_unreadable(report, unreadable)
    return report


def probe_on_cluster(address: str, found: list[tuple[Any, Path]],
                     options: ProbeOptions) -> list[CheckpointReport]:
    from ckptrescue.datasets.cluster import connect

    if not found:
        return []
    client = connect(address)
    try:
        roots = sorted({str(p) for _, p in found})
        seen = client.run(_all_exist, roots)
        if not seen:
            raise RemoteError(f"the Dask cluster at {address} has no workers")
        blind = sorted(w for w, ok in seen.items() if not ok)
        if blind:
            raise RemoteError(
                f"{len(blind)} Dask worker(s) do not see the checkpoints: {', '.join(blind[:3])}",
                hint="workers read files where they live: mount them at the same path")
        remote = dataclasses.replace(options, progress=None, cancel=None)  # never shipped
        futures = {i: client.submit(_probe_remote, fmt, str(path), remote, pure=False)
                   for i, (fmt, path) in enumerate(found) if not generic_family(fmt)}
        out: dict[int, CheckpointReport] = {}
        source = member_source(client, len(seen))
        for i, (fmt, path) in enumerate(found):
            if i not in futures:  # a family step: its members spread over the workers
                out[i] = _probe_family_step(fmt, path, options, source)
        for i, fut in futures.items():
            out[i] = fut.result()
        return [out[i] for i in range(len(found))]
    finally:
        client.close()
