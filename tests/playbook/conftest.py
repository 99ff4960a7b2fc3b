"""The shipped-playbook tests build real checkpoints with ``fixtures/`` (the repository root on
``sys.path``, as ``tests/checkpoints/conftest.py`` has it), so that the directory runs alone."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
