"""``probe --scheduler ADDRESS``: probe each checkpoint of a run on a Dask worker.

Workers read the checkpoints where they live (a shared filesystem at the same path), run the
same pure probe as a local run, and send back the reports; the caller merges them in order, so
the output equals a local run's. Loads (``--load``) and case recording stay on the caller.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckptrescue.checkpoint import CheckpointReport, ProbeOptions
from ckptrescue.errors import RemoteError
from ckptrescue.probes.single import probe_one


def _probe_remote(fmt: Any, path: str, options: ProbeOptions) -> CheckpointReport:
    return probe_one(fmt, Path(path), options)


def _all_exist(paths: list[str]) -> bool:
    return all(os.path.exists(p) for p in paths)


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
        futures = [client.submit(_probe_remote, fmt, str(path), options, pure=False)
                   for fmt, path in found]
        return [f.result() for f in futures]
    finally:
        client.close()
