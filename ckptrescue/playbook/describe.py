"""Playbook values and step conditions as a person reads them (the TUI's plan preview,
``playbook run --dry-run``, ``playbook show``): never a Python repr.

``{"step_status": {"step": "probe", "is": "findings"}}`` reads "step probe ended with
findings"; ``{"all": [{"nonempty": "$s3_key_url"}, {"nonempty": "$known_good"}]}`` reads
"s3_key_url is given and known_good is given"; a boolean parameter reads "yes" or "no".
Pure: no engine, no front end.
"""

from __future__ import annotations

import shlex
from typing import Any

from ckptrescue.playbook.schema import REF_RE


def value_text(value: Any) -> str:
    """One parameter value: ``yes``/``no``, a list as shell words, nothing as ``(not given)``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == "":
        return "(not given)"
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value) if value else "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    return str(value)


def _operand(value: Any) -> str:
    """A reference as its name (``$volume`` -> volume, ``${image.bad_ranges}`` ->
    image.bad_ranges); a literal quoted."""
    if isinstance(value, str):
        whole = REF_RE.fullmatch(value)
        if whole and whole.group(0) != "$$":
            return whole.group(1) or whole.group(2)
        if REF_RE.search(value):
            return '"' + REF_RE.sub(lambda m: "$" if m.group(0) == "$$" else
                                     "<" + (m.group(1) or m.group(2)) + ">", value) + '"'
        return f'"{value}"'
    return value_text(value)


def _is_parameter(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    whole = REF_RE.fullmatch(value)
    return bool(whole and whole.group(2))


_PHRASES = {
    "truthy": "{a} is on", "falsy": "{a} is off", "empty": "{a} is empty",
    "nonempty": "{a} is not empty", "equals": "{a} is {b}", "not_equals": "{a} is not {b}",
    "gt": "{a} > {b}", "lt": "{a} < {b}",
}


def when_text(cond: Any) -> str:
    """A step's ``when`` condition in words."""
    if cond is None:
        return "always"
    if isinstance(cond, str):
        return f"{_operand(cond)} is on"
    if not isinstance(cond, dict) or len(cond) != 1:
        return str(cond)
    (op, operand), = cond.items()
    if op in {"all", "any"} and isinstance(operand, list):
        parts = [when_text(c) for c in operand]
        joined = (" and " if op == "all" else " or ").join(
            f"({p})" if (" and " in p or " or " in p) else p for p in parts)
        return joined or ("always" if op == "all" else "never")
    if op == "step_status" and isinstance(operand, dict):
        return f"step {operand.get('step')} ended with {operand.get('is')}"
    if op in {"nonempty", "empty"} and _is_parameter(operand):
        return f"{_operand(operand)} is {'given' if op == 'nonempty' else 'not given'}"
    phrase = _PHRASES.get(op)
    if phrase is None:
        return f"{op} {value_text(operand)}"
    if isinstance(operand, list) and len(operand) == 2:
        return phrase.format(a=_operand(operand[0]), b=_operand(operand[1]))
    return phrase.format(a=_operand(operand), b="")


def depends_on_steps(cond: Any) -> bool:
    """Whether ``cond`` needs the run (a step's status or output), not only the parameters."""
    if isinstance(cond, dict):
        if "step_status" in cond:
            return True
        return any(depends_on_steps(v) for v in cond.values())
    if isinstance(cond, list):
        return any(depends_on_steps(v) for v in cond)
    if isinstance(cond, str):
        return any(m.group(1) for m in REF_RE.finditer(cond))
    return False
