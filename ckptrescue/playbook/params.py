"""Parameter values: parse ``-p KEY=VALUE`` strings and validate them by type before a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckptrescue.engine.argtypes import PLAYBOOK_TYPES, BadValue
from ckptrescue.errors import PlaybookError
from ckptrescue.model import JsonObject
from ckptrescue.playbook.schema import Playbook


def convert(ptype: str, name: str, raw: Any) -> Any:
    """Convert and validate one value by its type (``engine/argtypes.py``); raises
    PlaybookError with a clear message."""
    kind = PLAYBOOK_TYPES.get(ptype)
    if kind is None:
        raise PlaybookError(f"parameter {name}: {raw!r} has unknown type {ptype}")
    try:
        return kind.value(name, raw)
    except BadValue as exc:
        raise PlaybookError(str(exc)) from None


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise PlaybookError(f"-p {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def load_file(path: Path) -> JsonObject:
    """Parameters from a JSON or YAML mapping file."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PlaybookError(f"{path}: cannot read parameters ({exc})") from exc
    if not isinstance(data, dict):
        raise PlaybookError(f"{path}: parameters file must be a mapping")
    return {str(k): v for k, v in data.items()}


def bind(playbook: Playbook, given: JsonObject) -> JsonObject:
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
