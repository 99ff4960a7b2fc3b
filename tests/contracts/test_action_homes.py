"""``actions.ACTIONS`` looks one action up without importing every wing: ``actions.homes()``
reads where each action is defined from the action modules' source. A wrong or missing place
would cost speed only (the lookup falls back to the whole registry); this keeps every built-in
action placed where it is defined, and shows that a command's lookup imports no other wing."""

from __future__ import annotations

import subprocess
import sys

from ckptrescue.actions import ACTIONS, homes, registry


def test_every_action_is_placed_where_it_is_defined() -> None:
    found = registry()
    assert sorted(homes()) == sorted(found)
    for name, cls in found.items():
        assert cls.__module__ == homes()[name], name
        assert ACTIONS[name] is cls
    assert "no.such.action" not in ACTIONS
    assert ACTIONS.get("no.such.action") is None


def test_one_lookup_imports_one_wing() -> None:
    code = ("import sys\nfrom ckptrescue.actions import ACTIONS\nACTIONS['manifest.build']\n"
            "print(sorted(m for m in sys.modules if m.startswith('ckptrescue.')"
            " and '.actions.' in m))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "['ckptrescue.datasets.actions.manifests']", proc.stdout
