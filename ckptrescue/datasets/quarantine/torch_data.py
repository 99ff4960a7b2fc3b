"""``torch.utils.data`` wrappers that skip quarantined files and records.

``QuarantinedDataset(dataset, quarantine, locate)``: a map-style dataset without the bad items;
``locate(i) -> (path, record_index_or_None, key_or_None)`` says where item ``i`` of the wrapped
dataset comes from (computed once per item at construction, so keep it cheap — a lookup in the
dataset's own index). ``QuarantinedIterable(iterable, quarantine, locate)``: the same for an
``IterableDataset``, with ``locate(item)``. Both count what they skipped (``skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ckptrescue.datasets.quarantine.listing import Quarantine

Where = tuple[str, int | None, str | None]


def _base(name: str) -> type:
    try:
        from torch.utils import data
    except ImportError:  # the wrappers also work without torch installed
        return object
    return getattr(data, name)  # type: ignore[no-any-return]


class QuarantinedDataset(_base("Dataset")):  # type: ignore[misc]
    def __init__(self, dataset: Any, quarantine: Quarantine,
                 locate: Callable[[int], Where]) -> None:
        self.dataset = dataset
        self.keep_indices = [i for i in range(len(dataset))
                             if _keeps(quarantine, locate(i))]
        self.skipped = len(dataset) - len(self.keep_indices)

    def __len__(self) -> int:
        return len(self.keep_indices)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[self.keep_indices[i]]


class QuarantinedIterable(_base("IterableDataset")):  # type: ignore[misc]
    def __init__(self, iterable: Iterable[Any], quarantine: Quarantine,
                 locate: Callable[[Any], Where]) -> None:
        self.iterable = iterable
        self.quarantine = quarantine
        self.locate = locate
        self.skipped = 0

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable:
            if _keeps(self.quarantine, self.locate(item)):
                yield item
            else:
                self.skipped += 1


def _keeps(q: Quarantine, where: Where) -> bool:
    path, index, key = where
    return q.keep(path, index=index, key=key)
