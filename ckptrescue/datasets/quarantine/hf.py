"""Hugging Face ``datasets``: a predicate for ``Dataset.filter`` that drops quarantined rows.

``hf_filter(quarantine, path_column=..., index_column=None, key_column=None)`` returns a
function of one example (``batched=False``); the dataset must carry the source file of each row
(``path_column``) and, for record-level quarantine, the row's index in that file or its key.
``ds.filter(hf_filter(q, path_column="source"))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptrescue.datasets.quarantine.listing import Quarantine


def hf_filter(quarantine: Quarantine, *, path_column: str, index_column: str | None = None,
              key_column: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def keep(example: dict[str, Any]) -> bool:
        index = example.get(index_column) if index_column else None
        key = example.get(key_column) if key_column else None
        return quarantine.keep(str(example[path_column]),
                               index=int(index) if index is not None else None,
                               key=str(key) if key is not None else None)

    return keep
