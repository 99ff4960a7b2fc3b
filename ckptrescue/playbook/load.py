"""Load playbook files (YAML, safe loading) into the model, naming file and line on errors."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import PlaybookError
from ckptrescue.playbook.schema import (
    PARAM_KEYS,
    PARAM_TYPES,
    SCHEMA_VERSION,
    STEP_KEYS,
    TOP_KEYS,
    Parameter,
    Playbook,
    Step,
)
from ckptrescue.resources import data_dir

if TYPE_CHECKING:
    import yaml


def line_map(node: yaml.Node | None) -> dict[tuple[Any, ...], int]:
    """Map a path of keys/indexes to the 1-based line where it starts."""
    import yaml  # PyYAML only when a playbook is read: every command imports this module

    lines: dict[tuple[Any, ...], int] = {}

    def walk(n: yaml.Node, path: tuple[Any, ...]) -> None:
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for key_node, value_node in n.value:
                key = key_node.value
                lines[(*path, key)] = key_node.start_mark.line + 1
                walk(value_node, (*path, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                walk(item, (*path, i))

    if node is not None:
        walk(node, ())
    return lines


def _parse(text: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line numbers) and the data, from one parse: libyaml's parser when
    PyYAML has it (a playbook in ~1 ms instead of ~13: the TUI's first screen describes one),
    the same safe constructor either way; a document libyaml refuses is parsed again by the
    pure-Python parser, so that errors read the same everywhere."""
    import yaml

    loaders = [getattr(yaml, "CSafeLoader", None), yaml.SafeLoader]
    for loader_class in [cls for cls in loaders if cls is not None]:
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            return node, (loader.construct_document(node) if node is not None else None)
        except yaml.YAMLError:
            if loader_class is yaml.SafeLoader:
                raise
        finally:
            loader.dispose()
    raise AssertionError("unreachable: the pure-Python loader returns or raises")


def load_text(text: str, *, source: str = "<memory>") -> Playbook:
    import yaml

    try:
        node, data = _parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlaybookError(f"{where}: not valid YAML ({problem})") from exc
    lines = line_map(node)

    def err(path: tuple[Any, ...], message: str) -> PlaybookError:
        line = lines.get(path) or lines.get(path[:-1]) or 1
        return PlaybookError(f"{source}:{line}: {message}")

    if not isinstance(data, dict):
        raise err((), "a playbook must be a mapping with name, parameters and steps")
    for key in data:
        if key not in TOP_KEYS:
            raise err((key,), f"unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})")
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        raise err(("schema",), f"schema must be {SCHEMA_VERSION} (got {schema!r})")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise err(("name",), "name is required")
    params: list[Parameter] = []
    for i, raw in enumerate(data.get("parameters") or []):
        if not isinstance(raw, dict):
            raise err(("parameters", i), "each parameter must be a mapping")
        for key in raw:
            if key not in PARAM_KEYS:
                raise err(("parameters", i, key), f"parameter: unknown key {key!r}")
        pname, ptype = raw.get("name"), raw.get("type")
        if not isinstance(pname, str):
            raise err(("parameters", i), "parameter needs a name")
        if ptype not in PARAM_TYPES:
            raise err(("parameters", i, "type"),
                      f"parameter {pname!r}: unknown type {ptype!r} "
                      f"(one of: {', '.join(sorted(PARAM_TYPES))})")
        if any(p.name == pname for p in params):
            raise err(("parameters", i), f"parameter {pname!r} declared twice")
        params.append(Parameter(
            name=pname, type=ptype, description=str(raw.get("description", "")),
            required=bool(raw.get("required", "default" not in raw)),
            default=raw.get("default"), line=lines.get(("parameters", i), 0),
        ))
    steps: list[Step] = []
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise err(("steps",), "steps must be a non-empty list")
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise err(("steps", i), "each step must be a mapping")
        for key in raw:
            if key not in STEP_KEYS:
                raise err(("steps", i, key),
                          f"step {raw.get('id', i)!r}: unknown key {key!r} "
                          f"(allowed: {', '.join(sorted(STEP_KEYS))})")
        sid, action = raw.get("id"), raw.get("action")
        if not isinstance(sid, str) or not isinstance(action, str):
            raise err(("steps", i), "each step needs an id and an action")
        args = raw.get("with") or {}
        if not isinstance(args, dict):
            raise err(("steps", i, "with"), f"step {sid!r}: with must be a mapping")
        on_failure = raw.get("on_failure", "stop")
        if on_failure not in {"stop", "continue"}:
            raise err(("steps", i, "on_failure"), f"step {sid!r}: on_failure is stop or continue")
        steps.append(Step(
            id=sid, action=action, args=args, when=raw.get("when"), on_failure=on_failure,
            title=str(raw.get("title", "")), line=lines.get(("steps", i), 0),
            arg_lines={k: lines.get(("steps", i, "with", k), 0) for k in args},
        ))
    return Playbook(
        name=name, title=str(data.get("title", name)),
        description=str(data.get("description", "")), parameters=tuple(params),
        steps=tuple(steps), schema=schema, references=tuple(data.get("references") or ()),
        source=source, digest=hashlib.sha256(text.encode()).hexdigest(),
    )


def load_file(path: Path) -> Playbook:
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlaybookError(f"{path}: cannot read playbook ({exc.strerror})") from exc
    return load_text(text, source=str(path))


def shipped() -> dict[str, Path]:
    """Shipped playbooks by name (file stem)."""
    folder = data_dir("playbooks")
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def resolve(name_or_file: str) -> Path:
    """A shipped playbook name or a path to a playbook file."""
    path = Path(name_or_file)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        if not path.is_file():
            raise PlaybookError(f"{path}: no such playbook file")
        return path
    found = shipped()
    if name_or_file not in found:
        raise PlaybookError(
            f"unknown playbook {name_or_file!r}",
            hint="`ckptrescue playbook list` shows the shipped playbooks",
        )
    return found[name_or_file]
