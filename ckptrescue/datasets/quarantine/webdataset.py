"""WebDataset: drop quarantined shards and samples.

``shard_urls(urls, quarantine)`` removes whole bad shards from a shard list (before any is
opened); ``sample_filter(quarantine)`` is a predicate for ``wds.select(...)`` (or any pipeline
of WebDataset sample dicts): it reads the ``__url__`` (shard) and ``__key__`` (sample key)
WebDataset puts on every sample, and keeps the sample unless its shard or its key is listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ckptrescue.datasets.quarantine.listing import Quarantine


def shard_urls(urls: Iterable[str], quarantine: Quarantine) -> list[str]:
    return [u for u in urls if not quarantine.file_quarantined(_local(u))]


def sample_filter(quarantine: Quarantine) -> Callable[[dict[str, Any]], bool]:
    def keep(sample: dict[str, Any]) -> bool:
        url = sample.get("__url__")
        if url is None:
            return True
        return quarantine.keep(_local(str(url)), key=sample.get("__key__"))

    return keep


def _local(url: str) -> str:
    return url.removeprefix("file://")
