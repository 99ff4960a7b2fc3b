"""Parameter values: parse ``-p KEY=VALUE`` strings and validate them by type before a run."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ckptrescue.errors import PlaybookError
from ckptrescue.playbook.schema import Playbook


def _is_block(path: Path) -> bool:
    try:
        return stat.S_ISBLK(path.stat().st_mode)
    except OSError:
        return False


def convert(ptype: str, name: str, raw: Any) -> Any:
    """Convert and validate one value; raises PlaybookError with a clear message."""
    def bad(why: str) -> PlaybookError:
        return PlaybookError(f"parameter {name}: {raw!r} {why}")

    if ptype == "integer":
        if isinstance(raw, bool):
            raise bad("is not an integer")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise bad("is not an integer") from None
    if ptype == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in {"true", "yes", "1", "on"}:
            return True
        if text in {"false", "no", "0", "off"}:
            return False
        raise bad("is not a boolean (true/false)")
    if ptype == "string":
        return str(raw)
    if ptype == "s3_url":
        text = str(raw)
        if not text.startswith("s3://") or len(text) <= 5 or text[5] == "/":
            raise bad("is not an s3://bucket[/prefix] URL")
        return text
    path = Path(os.path.expanduser(str(raw)))
    if ptype == "block_device":
        if not _is_block(path):
            raise bad("is not a block device")
    elif ptype == "image":
        if not (_is_block(path) or path.is_file()):
            raise bad("is neither a block device nor an image file")
    elif ptype == "path":
        if not path.exists():
            raise bad("does not exist")
    elif ptype == "file":
        if not path.is_file():
            raise bad("is not an existing file")
    elif ptype == "directory":
        if not path.is_dir():
            raise bad("is not an existing directory")
    elif ptype == "new_directory":
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise bad("exists and is not an empty directory")
    else:
        raise bad(f"has unknown type {ptype}")
    return str(path.resolve()) if path.exists() else str(path.absolute())


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise PlaybookError(f"-p {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def load_file(path: Path) -> dict[str, Any]:
    """Parameters from a JSON or YAML mapping file."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PlaybookError(f"{path}: cannot read parameters ({exc})") from exc
    if not isinstance(data, dict):
        raise PlaybookError(f"{path}: parameters file must be a mapping")
    return {str(k): v for k, v in data.items()}


def bind(playbook: Playbook, given: dict[str, Any]) -> dict[str, Any]:
    """Validate every parameter before anything runs; returns typed values."""
    unknown = sorted(set(given) - {p.name for p in playbook.parameters})
    if unknown:
        raise PlaybookError(
            f"{playbook.source}: unknown parameter(s) {', '.join(unknown)} "
            f"(this playbook takes: {', '.join(p.name for p in playbook.parameters) or 'none'})"
        )
    values: dict[str, Any] = {}
    for param in playbook.parameters:
        if param.name in given:
            values[param.name] = convert(param.type, param.name, given[param.name])
        elif param.default is not None:
            values[param.name] = convert(param.type, param.name, param.default)
        elif param.required:
            raise PlaybookError(
                f"{playbook.source}: missing required parameter {param.name} "
                f"({param.type}: {param.description or 'no description'}); pass -p {param.name}=..."
            )
        else:
            values[param.name] = None
    return values
