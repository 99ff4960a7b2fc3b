"""One table of argument types (``engine/argtypes.py``) for the CLI, the TUI and playbook
parameters: every type an action declares, and every playbook parameter type, is a row of it;
the playbook schema's types are its parameter rows; the TUI and ``-p`` convert alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptrescue.actions import registry
from ckptrescue.engine.argtypes import ARG_TYPES, PLAYBOOK_TYPES, BadValue
from ckptrescue.errors import PlaybookError, UsageError
from ckptrescue.playbook import params
from ckptrescue.playbook.schema import PARAM_TYPES
from ckptrescue.tui import form


def test_every_declared_type_is_in_the_table() -> None:
    for name, action in registry().items():
        for spec in action.args:
            assert spec.type in ARG_TYPES, f"{name}.{spec.name}: {spec.type}"
            if spec.type == "list":
                assert spec.item in ARG_TYPES, f"{name}.{spec.name}: list of {spec.item}"


def test_playbook_types_are_the_parameter_rows() -> None:
    assert set(PARAM_TYPES) == set(PLAYBOOK_TYPES)
    assert {"block_device", "image", "integer", "boolean", "new_directory"} <= set(PARAM_TYPES)
    assert "number" not in PARAM_TYPES and "list" not in PARAM_TYPES


@pytest.mark.parametrize(("kind", "raw", "value"), [
    ("integer", "12", 12), ("boolean", "yes", True), ("boolean", "off", False),
    ("number", "0.5", 0.5), ("list", "a 'b c'", ["a", "b c"]), ("s3_url", "s3://b/p", "s3://b/p"),
    ("location", "gs://b/x", "gs://b/x")])
def test_the_tui_and_the_table_agree(kind: str, raw: str, value: object) -> None:
    spec = form.ArgSpec("x", kind)
    assert form.convert(spec, raw) == value == ARG_TYPES[kind].value("x", raw)
    if kind in PLAYBOOK_TYPES:
        assert params.convert(kind, "x", raw) == value


def test_bad_values_say_why_in_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match=r"^parameter n: 'x' is not an integer$"):
        params.convert("integer", "n", "x")
    with pytest.raises(UsageError, match=r"^parameter n: 'x' is not a number$"):
        form.convert(form.ArgSpec("n", "number"), "x")
    with pytest.raises(PlaybookError, match="exists and is not an empty directory"):
        (tmp_path / "f").write_text("x")
        params.convert("new_directory", "d", str(tmp_path))
    with pytest.raises(BadValue, match=r"^parameter l: \"'a\": No closing quotation$"):
        ARG_TYPES["list"].value("l", "'a")
    with pytest.raises(PlaybookError, match="has unknown type number"):
        params.convert("number", "n", "1")
