"""Finding-code catalogue.

Each module in this package covers one emitter area and defines ``CODES``: a mapping from a code
(two letters + three digits) to ``(default severity, one-line meaning)``. :func:`all_codes` merges
them; the README's finding-code table is checked against it by the tests.
"""

from __future__ import annotations

import sys

from ckptrescue.model import Severity
from ckptrescue.plugins import plugin_modules


def all_codes() -> dict[str, tuple[Severity, str]]:
    """Every documented finding code, from every area module."""
    merged: dict[str, tuple[Severity, str]] = {}
    for module in plugin_modules(sys.modules[__name__]):
        for code, entry in getattr(module, "CODES", {}).items():
            if code in merged:
                raise RuntimeError(f"finding code {code} defined twice")
            merged[code] = entry
    return dict(sorted(merged.items()))
