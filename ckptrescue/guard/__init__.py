"""The safety policy: decides, before anything runs, whether an argv may run.

Pure: argv and a :class:`GuardContext` in, a :class:`Decision` out. Each allowlisted tool has
one grammar (``guard/tools/``) that reads its argv exactly as the tool does — which options
exist, which take values, long-option abbreviation, combined short flags, ``--``, repeated
options, subcommands after global options, commands inside option values — and decides on
what the tool would actually do. Unknown tool, unknown option, unparseable argv: refused. The
runner consults this for every command, and ``playbook lint`` for every ``exec`` step.
"""

from __future__ import annotations

import re

from ckptrescue.guard.check import allowed_tools, check
from ckptrescue.guard.context import GuardContext
from ckptrescue.guard.decision import Decision
from ckptrescue.guard.tools.mounting import KIT_DM_PREFIX

__all__ = ["KIT_DM_PREFIX", "Decision", "GuardContext", "allowed_tools", "check",
           "looks_like_shell"]

_PIPE_CHARS = re.compile(r"[|;&<>`$]")


def looks_like_shell(text: str) -> bool:
    """True when a single string looks like shell text rather than one argument."""
    return bool(_PIPE_CHARS.search(text))
