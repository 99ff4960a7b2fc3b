"""What both exports share: reading times, and one line per audit record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ckptrescue.model import JsonObject


def parse_time(value: Any) -> datetime | None:
    """A timezone-aware datetime from an ISO 8601 string (``Z``, ``,`` or ``.`` fractions)."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace(",", ".")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None  # a time without a zone is not a point in time
    return parsed.astimezone(UTC)


def iso_utc(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00``."""
    return moment.astimezone(UTC).isoformat()


def canonical_text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


# an action's line: its details' fields by name ({argv}: the command line run)
_LINES = {
    "sandbox.run": "sandbox child: {purpose} (exit {returncode})",
    "tool.refused": "refused by the guard: {argv} ({reason})",
    "case.created": "case created",
    "case.sealed": "case sealed",
    "step.started": "playbook step {step} [{action}] started",
    "run.finished": "playbook run {status}",
    "tool.version": "tool {tool}: {version}",
    "checkpoint.probed": "probed {path}: {format}, verdict {verdict}",
    "artifact.stored": "stored artifact {name} ({kind}, {size} bytes)",
}


class _Fields(dict[str, Any]):
    """A record's details for ``str.format_map``: a field it lacks reads as ``None``."""

    def __missing__(self, key: str) -> None:
        return None


def describe_record(record: JsonObject) -> str:
    """One line for an action (attacker-chosen names stay data: it is a JSON string)."""
    d = record.get("details") or {}
    name = record["action"]
    argv = d.get("argv")
    shown = " ".join(str(a) for a in argv) if isinstance(argv, list) else ""
    if isinstance(name, str) and name in _LINES:
        return _LINES[name].format_map(_Fields({**d, "argv": shown}))
    if name == "tool.run":
        return (f"ran {shown} (exit {d.get('returncode')}, {d.get('duration_s')} s"
                + (", timed out" if d.get("timed_out") else "") + ")")
    if name == "finding":
        f = d.get("finding") or {}
        return (f"finding {f.get('code')} ({f.get('severity')}): {f.get('title')}"
                + (f" [{f.get('evidence')}]" if f.get("evidence") else ""))
    if name == "run.started":
        return f"playbook {d.get('playbook')} started" + (" (resumed)" if d.get("resumed") else "")
    if name == "step.finished":
        return (f"playbook step {d.get('step')} [{d.get('action')}] {d.get('status')}"
                + (f": {d.get('error')}" if d.get("error") else ""))
    if name == "evidence.added":
        item = d.get("item") or {}
        return f"evidence {item.get('id')} added: {item.get('kind')} {item.get('source')}"
    if name == "safety.kernel":
        return (f"kernel guarantee {d.get('guarantee')} on {d.get('target')}: "
                + ("enforced" if d.get("enforced") else "NOT enforced")
                + (f" ({d.get('how')})" if d.get("how") else ""))
    text = canonical_text(d)
    return f"{name}: {text[:2000]}" if d else name
