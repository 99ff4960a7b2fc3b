"""Recent cases for the start screen: a small list kept in the user's state directory.

``$XDG_STATE_HOME/ckptrescue/recent-cases.json`` (default ``~/.local/state``) holds the case
directories opened or created in the TUI, newest first; case directories directly under
``cases_root`` are listed too. Only ``case.json`` is read (title, examiner).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

MAX_RECENT = 20


@dataclass(frozen=True)
class RecentCase:
    path: Path
    title: str
    examiner: str

    def label(self, cases_root: Path | None = None) -> str:
        shown = str(self.path)
        if cases_root is not None:
            try:
                shown = str(self.path.relative_to(cases_root))
            except ValueError:
                pass
        who = f" ({self.examiner})" if self.examiner else ""
        return f"{shown}  {self.title or '(untitled)'}{who}"


def state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ckptrescue" / "recent-cases.json"


def _read_small(path: Path, limit: int = 4 << 20) -> bytes:
    """A small file the start screen reads (through a link, as ``Case.open`` does), never from
    a FIFO or a device put at its name (a FIFO there hung the start screen); anything but a
    regular file is an ``OSError``."""
    from ckptrescue.effects.files import proven_regular
    from ckptrescue.errors import CkptRescueError

    try:
        fd = proven_regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path)
    except CkptRescueError as exc:
        raise OSError(exc.message) from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit)


def _read_case(path: Path) -> RecentCase | None:
    try:
        manifest = json.loads(_read_small(path / "case.json"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    return RecentCase(path=path, title=str(manifest.get("title") or ""),
                      examiner=str(manifest.get("examiner") or ""))


def _remembered() -> list[str]:
    try:
        data = json.loads(_read_small(state_file()))
    except (OSError, ValueError):
        return []
    return [str(p) for p in data if isinstance(p, str)] if isinstance(data, list) else []


def recent_cases(cases_root: Path | None = None) -> list[RecentCase]:
    """Remembered cases (newest first) that still exist, then cases under ``cases_root``."""
    seen: set[Path] = set()
    out: list[RecentCase] = []
    candidates = [Path(p) for p in _remembered()]
    if cases_root is not None and cases_root.is_dir():
        candidates += sorted(p for p in cases_root.iterdir() if p.is_dir())
    for path in candidates:
        resolved = path.resolve()
        if resolved in seen:
            continue
        entry = _read_case(resolved)
        if entry is not None:
            seen.add(resolved)
            out.append(entry)
    return out


def remember(path: Path) -> None:
    """Put ``path`` first in the recent list (best effort: a read-only home is not an error)."""
    target = state_file()
    entries = [str(path.resolve())] + [p for p in _remembered() if p != str(path.resolve())]
    from ckptrescue.errors import CkptRescueError
    from ckptrescue.record.atomic import write_atomic

    if target.is_symlink():  # kept by a dotfile manager: never written through, never
        return  # replaced (it would lose the list it points to)
    try:  # a temp file of its own
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, json.dumps(entries[:MAX_RECENT], indent=1).encode(),
                     durable=False)
    except (OSError, CkptRescueError):
        pass
