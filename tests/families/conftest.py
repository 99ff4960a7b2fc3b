"""tests/families: the repository root on ``sys.path`` so tests import the fixture writers
(``fixtures.families.<lib>``) directly (the library-backed ones run them in child processes)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
