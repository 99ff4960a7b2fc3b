"""Locate the shipped ``playbooks/`` and ``reports/templates/`` folders.

In a wheel they live at ``ckptrescue/_data/playbooks`` and ``ckptrescue/_data/report_templates``
(mapped by pyproject's package-dir); in an editable install or a checkout they are the top-level
folders, so the checkout is the fallback.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from ckptrescue.errors import CkptRescueError

_CHECKOUT = {"playbooks": "playbooks", "report_templates": "reports/templates"}


class ResourceMissingError(CkptRescueError):
    """A shipped data folder could not be found (a broken installation)."""


def data_dir(name: str) -> Path:
    """The directory holding the shipped data set ``name`` (playbooks or report_templates)."""
    if name not in _CHECKOUT:
        raise ResourceMissingError(f"unknown data folder {name!r}")
    packaged = files("ckptrescue") / "_data" / name
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / _CHECKOUT[name]
    if checkout.is_dir():
        return checkout
    raise ResourceMissingError(f"{name}: shipped data folder missing from the installation")
