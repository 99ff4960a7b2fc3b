"""Validate a playbook file against the published JSON Schema (problems name file and line)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ckptrescue.playbook.lint import LintProblem
from ckptrescue.playbook.load import line_map
from ckptrescue.playbook.schema import json_schema


def schema_problems(path: Path) -> list[LintProblem]:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is a core dependency
        return []
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
        lines = line_map(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [LintProblem(str(path), mark.line + 1 if mark else 1, "not valid YAML")]
    validator = jsonschema.Draft202012Validator(json_schema())
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
        where = tuple(error.absolute_path)
        line = lines.get(where) or lines.get(where[:-1]) or 1
        loc = "/".join(str(p) for p in where) or "(top)"
        problems.append(LintProblem(str(path), line, f"{loc}: {error.message}"))
    return problems
