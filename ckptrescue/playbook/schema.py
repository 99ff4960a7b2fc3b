"""The playbook model (schema version 1): frozen dataclasses, no I/O.

A playbook is data: parameters (typed) and steps that name built-in actions. Substitution is
only ``$param`` / ``${param}`` for parameters and ``${step_id.key.subkey}`` for an earlier step's
outputs; ``$$`` is a literal dollar sign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.engine.argtypes import PLAYBOOK_TYPES
from ckptrescue.model import JsonObject

SCHEMA_VERSION = 1

# the playbook parameter types: the rows of the one table of argument types marked "parameter"
PARAM_TYPES = {name: t.meaning for name, t in PLAYBOOK_TYPES.items()}

STEP_KEYS = {"id", "action", "title", "with", "when", "on_failure"}
PARAM_KEYS = {"name", "type", "description", "required", "default"}
TOP_KEYS = {"schema", "name", "title", "description", "references", "parameters", "steps"}
WHEN_OPS = {"truthy", "falsy", "empty", "nonempty", "equals", "not_equals", "gt", "lt",
            "step_status", "all", "any"}

ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# $name, ${name}, ${step.key.sub}; $$ escapes
REF_RE = re.compile(r"\$\$|\$\{([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\}|\$([A-Za-z][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Parameter:
    """A parameter a playbook declares (``parameters:``)."""

    name: str
    type: str
    description: str = ""
    required: bool = True
    default: Any = None
    line: int = 0


@dataclass(frozen=True)
class Step:
    """One step of a playbook: an action, its arguments and its condition."""

    id: str
    action: str
    args: dict[str, Any] = field(default_factory=dict)
    when: Any = None
    on_failure: str = "stop"
    title: str = ""
    line: int = 0
    arg_lines: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Playbook:
    """A loaded playbook (``playbook/load.py`` checks it against the schema)."""

    name: str
    title: str
    description: str
    parameters: tuple[Parameter, ...]
    steps: tuple[Step, ...]
    schema: int = SCHEMA_VERSION
    references: tuple[str, ...] = ()
    source: str = "<memory>"
    digest: str = ""

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)


def references(value: Any) -> list[tuple[str, str]]:
    """Every reference in a (nested) value: ``("param", name)`` or ``("step", "id.key...")``."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        for match in REF_RE.finditer(value):
            if match.group(0) == "$$":
                continue
            braced, bare = match.group(1), match.group(2)
            if bare:
                found.append(("param", bare))
            elif braced and "." in braced:
                found.append(("step", braced))
            elif braced:
                found.append(("param", braced))
    elif isinstance(value, dict):
        for v in value.values():
            found.extend(references(v))
    elif isinstance(value, list | tuple):
        for v in value:
            found.extend(references(v))
    return found


def json_schema() -> JsonObject:
    """The JSON Schema of playbook files (schema version 1)."""
    scalar = {"type": ["string", "number", "integer", "boolean", "null"]}
    anything = {}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ckptrescue.invalid/schemas/playbook-v1.json",
        "title": "ckptrescue playbook (schema 1)",
        "type": "object",
        "additionalProperties": False,
        "required": ["schema", "name", "steps"],
        "properties": {
            "schema": {"const": SCHEMA_VERSION},
            "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
            "title": {"type": "string"},
            "description": {"type": "string"},
            "references": {"type": "array", "items": {"type": "string"}},
            "parameters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "type"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                        "type": {"enum": sorted(PARAM_TYPES)},
                        "description": {"type": "string"},
                        "required": {"type": "boolean"},
                        "default": scalar,
                    },
                },
            },
            "steps": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["id", "action"],
                    "properties": {
                        "id": {"type": "string", "pattern": ID_RE.pattern},
                        "action": {"type": "string"},
                        "title": {"type": "string"},
                        "with": {"type": "object"},
                        "when": anything,
                        "on_failure": {"enum": ["stop", "continue"]},
                    },
                },
            },
        },
    }
