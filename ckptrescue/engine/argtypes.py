"""The one table of argument types: what an action's ``ArgSpec.type`` and a playbook
parameter's ``type`` may be, and for each how the command line declares it, how text typed
into a TUI field or given as ``-p KEY=VALUE`` becomes a value (checked), how a literal in a
playbook is linted, what the playbook schema says of it and which evidence picker the TUI
offers. The CLI (``cli/from_action.py``), the TUI's forms (``tui/form.py``), the playbook
parameters (``playbook/params.py``, ``schema.py``) and the linter (``playbook/lint.py``) all
read this table; a new type is one row here.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class BadValue(ValueError):
    """A value that is not of its type; the message completes ``parameter NAME: 'RAW' ...``."""


def _is_block(path: Path) -> bool:
    try:
        return stat.S_ISBLK(path.stat().st_mode)
    except OSError:
        return False


def _text(raw: Any) -> str:
    return str(raw)


def _integer(raw: Any) -> int:
    if isinstance(raw, bool):
        raise BadValue("is not an integer")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise BadValue("is not an integer") from None


def _number(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise BadValue("is not a number") from None


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"true", "yes", "1", "on"}:
        return True
    if text in {"false", "no", "0", "off"}:
        return False
    raise BadValue("is not a boolean (true/false)")


def _s3_url(raw: Any) -> str:
    text = str(raw)
    if not text.startswith("s3://") or len(text) <= 5 or text[5] == "/":
        raise BadValue("is not an s3://bucket[/prefix] URL")
    return text


def _words(raw: Any) -> list[str]:
    if isinstance(raw, list):
        return [str(x) for x in raw]
    try:
        return shlex.split(str(raw))
    except ValueError as exc:
        raise BadValue(f": {exc}") from None


def _local(check: Callable[[Path], bool], why: str) -> Callable[[Any], str]:
    """A local path that passes ``check`` (else ``why``), made absolute (resolved when it
    exists)."""
    def convert(raw: Any) -> str:
        path = Path(os.path.expanduser(str(raw)))
        if not check(path):
            raise BadValue(why)
        return str(path.resolve()) if path.exists() else str(path.absolute())
    return convert


def _new_directory(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


@dataclass(frozen=True)
class ArgType:
    """One argument type.

    ``meaning``: what the playbook schema and ``--help`` say of it. ``python``: the value's
    type on the command line (typer converts to it). ``convert``: text (or a JSON value) to
    the value, raising :class:`BadValue`. ``literal``: what a literal playbook value must be
    (``str``, ``bool``, ``int``, ``float``, ``list``; None: anything). ``parameter``: a
    playbook parameter may have it. ``boolean``: a switch (a flag, a checkbox). ``picker``:
    the TUI's evidence picker for it."""

    name: str
    meaning: str
    python: type = str
    convert: Callable[[Any], Any] = _text
    literal: type | tuple[type, ...] | None = None
    parameter: bool = False
    boolean: bool = False
    picker: str | None = None

    def value(self, name: str, raw: Any) -> Any:
        """``raw`` as this type; raises :class:`BadValue` with the whole sentence."""
        try:
            return self.convert(raw)
        except BadValue as exc:
            why = str(exc)
            raise BadValue(f"parameter {name}: {raw!r}"
                           + (why if why.startswith(":") else f" {why}")) from None

    def literal_problem(self, value: Any) -> str | None:
        """Why a literal playbook value is not of this type (None: it is)."""
        if self.literal is None:
            return None
        if self.literal is int and (isinstance(value, bool) or not isinstance(value, int)):
            return f"must be a whole number (got {value!r})"
        if self.literal == (int, float) and (isinstance(value, bool)
                                             or not isinstance(value, int | float)):
            return f"must be a number (got {value!r})"
        if self.literal is bool and not isinstance(value, bool):
            return f"must be true or false (got {value!r})"
        if self.literal is list and not isinstance(value, list):
            return f"must be a list (got {value!r})"
        if self.literal is str and not isinstance(value, str):
            return f"must be text (got {value!r})"
        if self.name == "s3_url" and value and not str(value).startswith("s3://"):
            return f"must be an s3:// URL (got {value!r})"
        return None


_TYPES = (
    ArgType("string", "any text", literal=str, parameter=True),
    ArgType("integer", "a whole number", int, _integer, int, parameter=True),
    ArgType("number", "a number", float, _number, (int, float)),
    ArgType("boolean", "true or false", bool, _boolean, bool, parameter=True, boolean=True),
    ArgType("s3_url", "an s3://bucket[/prefix] URL", str, _s3_url, str, parameter=True),
    ArgType("path", "an existing file or directory", Path,
            _local(Path.exists, "does not exist"), str, parameter=True, picker="paths"),
    ArgType("location", "a local path or an s3://, az://, gs:// URL", literal=str,
            picker="paths"),
    ArgType("block_device", "an existing block device (e.g. /dev/sdb)", Path,
            _local(_is_block, "is not a block device"), str, parameter=True, picker="devices"),
    ArgType("image", "a block device or a disk-image file", Path,
            _local(lambda p: _is_block(p) or p.is_file(),
                   "is neither a block device nor an image file"), str, parameter=True,
            picker="devices"),
    ArgType("file", "an existing regular file", Path,
            _local(Path.is_file, "is not an existing file"), str, parameter=True,
            picker="paths"),
    ArgType("directory", "an existing directory", Path,
            _local(Path.is_dir, "is not an existing directory"), str, parameter=True,
            picker="paths"),
    ArgType("new_directory", "a directory that does not exist yet or is empty", Path,
            _local(_new_directory, "exists and is not an empty directory"), str,
            parameter=True),
    ArgType("list", "a list (one value per repeated option; words in a field)", list,
            _words, list),
    ArgType("mapping", "a mapping"),
    ArgType("any", "any value"),
)

ARG_TYPES: dict[str, ArgType] = {t.name: t for t in _TYPES}
PLAYBOOK_TYPES: dict[str, ArgType] = {t.name: t for t in _TYPES if t.parameter}


def arg_type(name: str) -> ArgType:
    """The row of ``name``; an unknown type reads as text."""
    return ARG_TYPES.get(name) or ArgType(name, "text")
