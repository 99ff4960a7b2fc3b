"""A responder types at full speed: every key of a burst reaches the app before it handles the
first (``burst`` queues them all, unlike ``pilot.press`` which waits after each key). Tab and
Enter must move on before the next key is routed, or the title lands in the case directory's
name (``INC-1probe my run``). The parameters form shows a yes/no value as a checkbox; the plan
preview shows values and conditions in words, never a Python repr; a dataset case's tree does
not talk about checkpoints."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tui_testlib import drive, screen_text, tree_labels, wait_for

from ckptrescue.record.case import Case

REPR = re.compile(r"\{'|'\}|\[when |(: | = )(True|False|None)$|\['", re.M)


def burst(app: Any, keys: list[str]) -> None:
    """Queue every key at once, as a fast typist's terminal delivers them."""
    from textual import events

    for key in keys:
        name = {" ": "space", "\t": "tab", "-": "minus", "/": "slash", ".": "full_stop",
                "_": "underscore"}.get(key, key)
        char = key if len(key) == 1 else {"tab": "\t", "enter": "\r", "space": " "}.get(key)
        event = events.Key(name, char)
        event.set_sender(app)
        app._driver.send_message(event)  # noqa: SLF001 - the driver is where a terminal's keys arrive


def text(s: str) -> list[str]:
    return list(s)

def _probe_form_app(tmp_path: Path) -> tuple[Path, Any]:
    """(a run directory, the app on a new case) for probe-checkpoints' parameters form."""
    from ckptrescue.tui.app import make_app

    run = tmp_path / "run"
    run.mkdir()
    return run, make_app(Case.create(tmp_path / "case", title="t"))


async def _open_probe_form(pilot: Any, app: Any) -> None:
    """From the scenario list to probe-checkpoints' parameters form."""
    from ckptrescue.playbook import load
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
    await app.push_screen(ParamsScreen(load.load_file(load.resolve("probe-checkpoints"))))
    await pilot.pause()



def test_typing_straight_on_after_tab_lands_in_the_new_field(tmp_path: Path) -> None:
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    cases = tmp_path / "cases"
    cases.mkdir()
    app = make_app(None, cases_root=cases)

    async def script(pilot: Any) -> None:
        await pilot.pause()
        burst(app, [*text("INC-1"), "tab", *text("probe my run"), "tab", *text("alice")])
        await wait_for(pilot, lambda: app.screen.query_one("#examiner", Input).value == "alice",
                       10, "the burst to be handled")
        values = {i.id: i.value for i in app.screen.query(Input)}
        assert values == {"case-dir": "INC-1", "title": "probe my run", "examiner": "alice"}
        burst(app, ["shift+tab", "end", *text(" 7")])  # back one field, straight on
        await wait_for(pilot, lambda: app.screen.query_one("#title", Input).value.endswith("7"),
                       10, "shift+tab")
        assert app.screen.query_one("#title", Input).value == "probe my run 7"
        burst(app, ["ctrl+n"])
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen)
                       and app.sub_title == "probe my run 7", 10, "the case, titled")
        await pilot.pause()

    drive(app, script)
    assert [p.name for p in cases.iterdir()] == ["INC-1"]
    manifest = json.loads((cases / "INC-1" / "case.json").read_text())
    assert manifest["title"] == "probe my run 7" and manifest["examiner"] == "alice"


def test_editing_keys_apply_in_the_order_typed(tmp_path: Path) -> None:
    """Backspace and the arrows are the field's own bindings: at full speed they still apply
    between the characters typed around them."""
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app

    app = make_app(None, cases_root=tmp_path)

    async def script(pilot: Any) -> None:
        await pilot.pause()
        burst(app, [*text("INC-19"), "backspace", *text("2"), "left", "left", *text("X"),
                    "end", *text("!")])
        await wait_for(pilot, lambda: app.screen.query_one("#case-dir", Input).value
                       .endswith("!"), 10, "the burst")
        assert app.screen.query_one("#case-dir", Input).value == "INC-X12!"

    drive(app, script)


def test_enter_moves_on_at_once_and_creates_the_case(tmp_path: Path) -> None:
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    cases = tmp_path / "cases"
    cases.mkdir()
    app = make_app(None, cases_root=cases)

    async def script(pilot: Any) -> None:
        await pilot.pause()
        burst(app, [*text("INC-2"), "enter", *text("disk died"), "enter", *text("bob"),
                    "enter"])
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen)
                       and app.sub_title == "disk died", 10, "the case, titled")
        await pilot.pause()

    drive(app, script)
    manifest = json.loads((cases / "INC-2" / "case.json").read_text())
    assert (manifest["title"], manifest["examiner"]) == ("disk died", "bob")


def test_parameters_typed_at_full_speed_and_a_boolean_is_a_checkbox(tmp_path: Path) -> None:
    from textual.widgets import Checkbox, Input

    from ckptrescue.tui.screens.plan import PlanScreen

    run, app = _probe_form_app(tmp_path)

    async def script(pilot: Any) -> None:
        await _open_probe_form(pilot, app)
        screen = app.screen
        load_box = screen.query_one("#p-load")
        assert isinstance(load_box, Checkbox) and load_box.value is False
        assert not [i for i in screen.query(Input) if i.value in {"False", "True"}]
        # the path, Tab, Space ticks the box, Tab back, straight on: all at full speed
        burst(app, [*text(str(run)), "tab", "space", "shift+tab", "end", *text("/.")])
        await wait_for(pilot, lambda: screen.query_one("#p-run_dir", Input).value.endswith("."),
                       10, "the burst")
        assert screen.values() == {"run_dir": f"{run}/.", "load": "true"}
        burst(app, ["f5"])
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 10, "the plan")
        plan = screen_text(app)
        assert "load: yes" in plan, plan
        assert "salvage [salvage]   — only when step probe ended with findings" in plan
        assert not REPR.search(plan), REPR.search(plan)

    drive(app, script)


def test_enter_through_the_form_reaches_the_plan_with_every_key(tmp_path: Path) -> None:
    """Enter moves field to field at once; on the last field it opens the plan only after the
    fields hold every key typed before it."""
    from textual.widgets import Input

    from ckptrescue.playbook import load
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.plan import PlanScreen

    data = tmp_path / "data"
    data.mkdir()
    manifest = tmp_path / "m.sha256"
    manifest.write_text("")
    case = Case.create(tmp_path / "case", title="t")
    app = make_app(case)
    book = load.load_file(load.resolve("dataset-audit"))

    async def script(pilot: Any) -> None:
        from ckptrescue.tui.screens.scenario import ScenarioScreen

        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
        await app.push_screen(ParamsScreen(book))
        await pilot.pause()
        typed = {"dir": str(data), "manifest": str(manifest),
                 "recovery_dir": str(tmp_path / "rec"), "endpoint_url": "http://127.0.0.1:9"}
        keys: list[str] = []
        for control in app.screen._controls():  # noqa: SLF001 - the form's fields, in order
            name = str(control.id)[2:]
            if isinstance(control, Input):
                keys += [*text(typed.get(name, "")), "enter"]  # others keep their default
            else:
                keys.append("enter")  # a checkbox: Enter moves on, its value kept
        assert set(typed) <= {str(c.id)[2:] for c in app.screen._controls()}  # noqa: SLF001
        burst(app, keys)
        try:
            await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 60, "the plan")
        except AssertionError:
            raise AssertionError(f"no plan: {app.screen!r}, focus {app.focused!r}, "
                                 f"{screen_text(app)[-600:]}") from None
        params = app.screen.plan.params
        assert (params["dir"], params["manifest"]) == (str(data), str(manifest))
        assert params["recovery_dir"] == str(tmp_path / "rec")
        assert params["endpoint_url"] == "http://127.0.0.1:9" and params["backups"] == ""
        await pilot.pause()  # let the plan screen finish mounting before the app exits

    drive(app, script)


def test_the_plan_and_dry_run_read_as_words(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cli_helpers import run_cli

    from ckptrescue.engine import executor as engine
    from ckptrescue.tui.screens.plan import plan_lines

    image = tmp_path / "disk.img"
    image.write_bytes(b"\0" * 4096)
    plan = engine.prepare("full-incident", {"source": str(image), "image_dest": str(tmp_path),
                                            "s3_url": "s3://bucket/run"})
    lines = "\n".join(plan_lines(plan))
    assert not REPR.search(lines), REPR.search(lines)
    assert "s3_verify [s3.verify]   — only when s3_url is given (runs with these parameters)" \
        in lines
    assert ("s3_history [s3.history]   — only when s3_key_url is given and known_good is "
            "given (skipped with these parameters)") in lines
    assert "health_before_image: no" in lines
    res = run_cli("playbook", "run", "full-incident", "--dry-run", "--case",
                  str(tmp_path / "c"), "-p", f"source={image}", "-p", f"image_dest={tmp_path}")
    assert res.returncode == 0, res.stderr
    shown = res.stdout + res.stderr
    assert "locate [locate]   — only when image.bad_ranges is not empty" in shown
    assert not REPR.search(shown), REPR.search(shown)


def test_a_dataset_case_tree_does_not_talk_about_checkpoints(tmp_path: Path) -> None:
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen

    case = Case.create(tmp_path / "case", title="shards rotting")
    data = tmp_path / "data"
    data.mkdir()
    case.ensure_evidence(data, how="examined in place (read-only)")
    sha = case.store_artifact(json.dumps({"counts": {"ok": 9, "corrupted": 1}}).encode(),
                              name="audit.json", kind="result:manifest.audit")
    case.log("step.finished", {"run_key": "r1", "step": "audit", "action": "manifest.audit",
                               "status": "findings", "summary": "9 ok, 1 corrupted",
                               "outputs_sha256": sha}, artifacts=[sha])
    app = make_app(case)

    async def script(pilot: Any) -> None:
        await pilot.pause()
        app.action_findings()
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen)
                       and app.screen.model is not None, 30, "the findings tree")
        from textual.widgets import Tree

        labels = tree_labels(app.screen.query_one("#tree", Tree))
        shown = "\n".join(labels) + screen_text(app)
        assert "no checkpoint probed" not in shown and "checkpoints -> tensors" not in shown
        assert any("manifest.audit" in label and "9 ok, 1 corrupted" in label
                   for label in labels), labels

    drive(app, script)


def test_enter_on_a_checkbox_moves_on_and_never_toggles_it(tmp_path: Path) -> None:
    """Found by a responder: path, Enter, Enter in probe-checkpoints' form toggled `load` on
    and stayed in the form (the docs say Enter in the last field opens the plan); a third Enter
    toggled it back. Space toggles; Enter moves on, the last field's Enter opens the plan."""
    from textual.widgets import Checkbox

    from ckptrescue.tui.screens.plan import PlanScreen

    run, app = _probe_form_app(tmp_path)

    async def script(pilot: Any) -> None:
        await _open_probe_form(pilot, app)
        assert isinstance(app.screen._controls()[-1], Checkbox)  # noqa: SLF001 - the last field
        burst(app, [*text(str(run)), "enter", "enter"])
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 10, "the plan")
        assert app.screen.plan.params["load"] is False
        assert "load: no" in screen_text(app)
        await pilot.pause()

    drive(app, script)


def test_keys_typed_on_through_a_screen_change_reach_the_next_screen(tmp_path: Path) -> None:
    """Found by a responder in tmux: ``INC-8 Tab title Tab name Enter Down Enter`` in one burst
    created the case and left the scenario list on its first entry: the Down and Enter typed
    while the case was being created went to the start screen, which was going away. Keys typed
    while a screen change is pending wait for the next screen (type-ahead), there and on from
    the scenario list to the parameters and on to the plan."""
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.plan import PlanScreen

    run = tmp_path / "run"
    run.mkdir()
    cases = tmp_path / "cases"
    cases.mkdir()
    app = make_app(None, cases_root=cases)

    async def script(pilot: Any) -> None:
        await pilot.pause()
        # the scenario list's second entry is "Corrupted checkpoint" -> probe-checkpoints
        burst(app, [*text("INC-8"), "tab", *text("bit flips"), "tab", *text("eve"), "enter",
                    "down", "enter", *text(str(run)), "enter", "enter"])
        try:
            await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 20, "the plan")
        except AssertionError:
            inputs = {i.id: i.value for i in app.screen.query(Input)}
            raise AssertionError(f"no plan: {app.screen!r} {inputs}") from None
        plan = app.screen.plan
        assert plan.playbook.name == "probe-checkpoints"
        assert plan.params["run_dir"] == str(run) and plan.params["load"] is False
        await pilot.pause()

    drive(app, script)
    manifest = json.loads((cases / "INC-8" / "case.json").read_text())
    assert (manifest["title"], manifest["examiner"]) == ("bit flips", "eve")
