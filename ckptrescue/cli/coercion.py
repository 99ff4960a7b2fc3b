"""Command-line values converted without a pydantic model per parameter, with typer's results.

typer converts every parameter's text through a pydantic ``TypeAdapter`` that it builds when the
command line is parsed: importing pydantic and building the adapters is about a third of a
short command's start-up. The kit's parameters are text, whole numbers, numbers, flags, paths
and lists of these (``engine/argtypes.py``). For those, :func:`fast_runtime_param` converts a
value itself only when it is sure typer would give the same value: plain decimal digits for a
whole number within its bounds, a plain decimal for a number, text for text, and paths through
typer's own path checks. Anything else (a value that does not parse, a bound that fails, a
parser, a choice, a clamp) goes to typer's stock conversion, which gives its own result or
message. The result and every message are therefore typer's; ``tests/cli/test_coercion.py``
compares the two on every parameter of every command.

:func:`install` routes typer's parameters through this once; if typer's internals are not the
ones this was written for, it leaves typer as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

_WHOLE = re.compile(r"[+-]?[0-9]{1,18}\Z")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,300}(?:\.[0-9]{0,300})?|\.[0-9]{1,300})\Z")


class _Unsure(Exception):
    """This value is left to typer's own conversion."""


def _within(value: float, info: Any) -> float:
    if (info.min is not None and value < info.min) or (info.max is not None and value > info.max):
        raise _Unsure
    return value


def _whole(text: Any, info: Any, param: Any, ctx: Any) -> int:
    if type(text) is int:  # a default
        return int(_within(text, info))
    if not isinstance(text, str) or not _WHOLE.match(text):
        raise _Unsure
    return int(_within(int(text), info))


def _number(text: Any, info: Any, param: Any, ctx: Any) -> float:
    if type(text) in (int, float) and text == text:  # a default (not NaN)
        return float(_within(text, info))
    if not isinstance(text, str) or not _DECIMAL.match(text):
        raise _Unsure
    return float(_within(float(text), info))


def _text(text: Any, info: Any, param: Any, ctx: Any) -> str:
    if not isinstance(text, str):
        raise _Unsure
    return text


def _flag(value: Any, info: Any, param: Any, ctx: Any) -> bool:
    if not isinstance(value, bool):  # typer passes flags through as they are
        raise _Unsure
    return value


def _leaf(annotation: Any, info: Any) -> Callable[..., Any] | None:
    """The converter ``(value, info, param, ctx)`` of one value of ``annotation``, or None when
    typer's is needed."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is int or annotation is float:
        if info.clamp:
            return None
        return _whole if annotation is int else _number
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation is Path and info.path_type in (None, Path):
        return _path
    return None


def _path(text: Any, info: Any, param: Any, ctx: Any) -> Any:
    if not isinstance(text, str) or "\x00" in text:  # pydantic refuses a NUL in its words
        raise _Unsure
    from typer._param_types import coerce_cli_path  # the checks and messages of typer itself

    # typer makes the text a Path (pydantic's Path(text)) before its checks; given a Path, it
    # does the same checks without building a model
    return coerce_cli_path(Path(text), info, path_type=Path, param=param, ctx=ctx)


def fast_runtime_param(descriptor: Any, stock: Callable[[Any], Any]) -> Any:
    """A runtime parameter for ``descriptor`` that converts what it is sure of and hands the
    rest to ``stock(descriptor)`` (typer's, built only when first needed)."""
    from typer._coercion import RuntimeParam

    info = descriptor.parameter_info
    annotation = descriptor.annotation
    if descriptor.file_annotation is not None:
        return None
    many = get_origin(annotation) is list
    leaf = _leaf(get_args(annotation)[0] if many else annotation, info) \
        if not many or len(get_args(annotation)) == 1 else None
    if leaf is None:
        return None
    held: list[Any] = []

    def typer_own() -> Any:
        if not held:
            held.append(stock(descriptor))
        return held[0]

    class Fast(RuntimeParam):  # type: ignore[misc]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                if many:
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [leaf(item, info, param, ctx) for item in items]
                return leaf(value, info, param, ctx)
            except _Unsure:
                return typer_own()._coerce_value(value, param=param, ctx=ctx)

    return Fast(parameter_info=info, annotation=annotation)


def install() -> bool:
    """Route typer's parameters through :func:`fast_runtime_param`; False (typer untouched)
    when typer's internals are not the expected ones."""
    try:
        from typer import _coercion, core
    except ImportError:  # pragma: no cover - another typer
        return False
    cls = getattr(core, "_TyperParameter", None)
    stock = getattr(_coercion, "build_runtime_param", None)
    if cls is None or stock is None or not hasattr(cls, "get_runtime_param") \
            or not hasattr(_coercion, "RuntimeParam"):
        return False
    if getattr(cls, "_ckptrescue_fast", False):
        return True

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            self._runtime_param = fast_runtime_param(self.type_descriptor, stock) \
                or stock(self.type_descriptor)
        return self._runtime_param

    cls.get_runtime_param = get_runtime_param
    cls._ckptrescue_fast = True
    return True
