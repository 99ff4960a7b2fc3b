"""``cli/coercion.py`` converts command-line values without pydantic; what it gives must be what
typer's own conversion gives, value for value and message for message, on every parameter of
every command (a value it is unsure of is typer's to decide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.cli import coercion
from ckptrescue.cli.main import new_app

NUMBERS = ["3", "0", "1", "-1", "+2", "007", "-0", "1.0", "1.5", ".5", "5.", " 3", "3 ", "abc", "",
           "1e3", "1_000", "\u0663", "9" * 18, "9" * 19, "9" * 400, "inf", "nan", "0x10",
           "1" + "0" * 300 + ".5", "2.5e-3", "--1"]
TEXTS = ["x", "", "\u00e9t\u00e9", "-", " spaced ", "s3://b/p", "a\nb"]


def _params() -> list[tuple[str, Any]]:
    import typer.main
    from typer.core import _TyperParameter

    found: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: str) -> None:
        for p in cmd.params:
            if isinstance(p, _TyperParameter):
                found.append((f"{path} {p.name}", p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(new_app()), "ckptrescue")
    return found


def _outcome(runtime: Any, value: Any, param: Any) -> tuple[str, Any]:
    from typer._click.exceptions import BadParameter

    try:
        got = runtime._coerce_value(value, param=param, ctx=None)
    except BadParameter as exc:
        return "refused", exc.format_message()
    except Exception as exc:  # noqa: BLE001 - the same failure either way
        return "raised", f"{type(exc).__name__}: {exc}"
    items = got if isinstance(got, list) else [got]
    return "value", (type(got), [(type(x), repr(x)) for x in items])  # repr: nan is nan


def _samples(annotation: Any, tmp_path: Path, default: Any) -> list[Any]:
    from typing import get_args, get_origin

    leaf = get_args(annotation)[0] if get_origin(annotation) is list else annotation
    base: list[Any]
    if leaf in (int, float):  # and the values a default may hold
        base = [*NUMBERS, 0, 1, 7, -3, 2.5, 0.0, float("inf"), float("nan"), True, 10**30]
    elif leaf is Path:
        (tmp_path / "f").write_text("x")
        base = [str(tmp_path), str(tmp_path / "f"), str(tmp_path / "missing"), "", "-", ".",
                "rel/x", "a\x00b"]
    elif leaf is bool:
        base = [True, False, "true", "0", ""]
    else:
        base = TEXTS
    base = [*base, default] if default is not None else base
    if get_origin(annotation) is list:
        return [[v] for v in base] + [list(base[:3]), tuple(base[:2]), base[0]]
    return base


def test_every_parameter_converts_as_typer_does(tmp_path: Path) -> None:
    from typer._coercion import build_runtime_param

    params = _params()
    fast_ones = 0
    for where, param in params:
        descriptor = param.type_descriptor
        fast = coercion.fast_runtime_param(descriptor, build_runtime_param)
        if fast is None:
            continue
        fast_ones += 1
        stock = build_runtime_param(descriptor)
        for value in _samples(descriptor.annotation, tmp_path, param.default):
            assert _outcome(fast, value, param) == _outcome(stock, value, param), (where, value)
    # the kit's own parameters all take the fast way (text, numbers, flags, paths, lists)
    assert fast_ones >= 0.9 * len(params), (fast_ones, len(params))


def test_a_command_line_needs_no_pydantic(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a")
    code = (
        "import sys\n"
        "from ckptrescue.cli.main import run\n"
        f"rc = run(['manifest', 'build', {str(tmp_path / 'd')!r}, '-o', "
        f"{str(tmp_path / 'm.sha256')!r}, '--jobs', '2', '--no-progress'])\n"
        "print(rc, 'pydantic' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.stdout.split()[-2:] == ["0", "False"], proc.stdout + proc.stderr


@pytest.mark.parametrize("value, message", [
    ("abc", "Input should be a valid integer, unable to parse string as an integer"),
    ("0", "Input should be greater than or equal to 1"),
])
def test_a_bad_value_keeps_typers_words(value: str, message: str, tmp_path: Path) -> None:
    from cli_helpers import invoke

    res = invoke("manifest", "build", str(tmp_path), "-o", str(tmp_path / "m"), "--jobs", value)
    assert res.returncode == 2
    assert message in res.stderr, res.stderr
