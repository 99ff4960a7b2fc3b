"""The pure view helpers and the small widgets: progress text and coalescing, the bad-sector
map rendering, grouping checkpoints under their evidence, inline parameter checks, and the device
picker listing what `storage.devices` lists."""

from __future__ import annotations

from pathlib import Path

from tui_testlib import drive, wait_for

from ckptrescue.engine.events import StepOutput, StepProgress
from ckptrescue.playbook.schema import Parameter
from ckptrescue.tui.viewmodel import (
    RateMeter,
    finding_lines,
    group_checkpoints,
    progress_text,
    sector_map_lines,
)


def test_progress_text_has_rate_and_eta() -> None:
    text = progress_text(12 * 2**20, 64 * 2**20, "B", 4 * 2**20, 13.2, "imaging")
    assert text == "imaging  12.0 MiB / 64.0 MiB  4.0 MiB/s  ETA 00:13"
    assert progress_text(3, None, "objects", None, None) == "3 objects"


def test_rate_and_eta_derived_when_the_action_gives_none() -> None:
    meter = RateMeter(smoothing=1.0)
    assert meter.update(10.0, 0, 1000) == (None, None)
    assert meter.update(12.0, 200, 1000) == (100.0, 8.0)  # 200 B in 2 s; 800 B to go
    assert meter.update(13.0, 400, 1000) == (200.0, 3.0)
    # an action's own figures win
    assert meter.update(14.0, 500, 1000, rate=50.0, eta_s=9.0) == (50.0, 9.0)


def test_progress_messages_coalesce_per_step() -> None:
    from ckptrescue.tui.messages import EngineEvent

    a = EngineEvent(StepProgress(step_id="image", done=1))
    b = EngineEvent(StepProgress(step_id="image", done=2))
    other = EngineEvent(StepProgress(step_id="hash", done=2))
    out = EngineEvent(StepOutput(step_id="image", text="x"))
    assert b.can_replace(a)
    assert not other.can_replace(a)
    assert not out.can_replace(a) and not a.can_replace(out)


def test_progress_panel_shows_bar_and_label() -> None:
    from textual.app import App
    from textual.widgets import Label, ProgressBar

    from ckptrescue.tui.widgets.progress import StepProgressPanel

    class Host(App[None]):
        def compose(self):
            yield StepProgressPanel()

    app = Host()
    seen = {}

    async def script(pilot) -> None:
        panel = app.query_one(StepProgressPanel)
        panel.show(StepProgress(step_id="image", done=10, total=200, label="imaging"), now=1.0)
        panel.show(StepProgress(step_id="image", done=50, total=200, label="imaging"), now=5.0)
        await pilot.pause()
        seen["label"] = str(panel.query_one("#progress-label", Label).render())
        seen["bar"] = (panel.query_one(ProgressBar).progress, panel.query_one(ProgressBar).total)
        seen["visible"] = panel.display
        panel.clear()
        await pilot.pause()
        seen["hidden"] = not panel.has_class("active")

    drive(app, script)
    assert seen["label"] == "image: imaging  50 B / 200 B  10 B/s  ETA 00:15"
    assert seen["bar"] == (50, 200) and seen["visible"] and seen["hidden"]


def test_sector_map_marks_the_bad_range_and_names_tensors() -> None:
    bsm = {"size": 1000, "image": "disk.img", "rescued_bytes": 990,
           "ranges": [{"start": 500, "end": 510, "labels": ["run/step-100.pt: model.0.weight"]}]}
    lines = sector_map_lines(bsm, width=10)
    assert lines[2] == "[▒▒▒▒▒█▒▒▒▒]"
    assert "#1 [500, 510) 10 B" in lines
    assert "   -> run/step-100.pt: model.0.weight" in lines
    assert sector_map_lines(None)[0].startswith("no imaging step")


def test_checkpoints_grouped_under_the_mounted_image_evidence() -> None:
    model = {
        "evidence": [{"id": "E001", "kind": "image", "source": "/dev/shm/x/disk.img"},
                     {"id": "E002", "kind": "s3-prefix", "source": "s3://bucket/run/"}],
        "checkpoints": [{"path": "/c/work/mnt-mount/run/step-1.pt", "verdict": "intact"},
                        {"path": "/elsewhere/step-2.pt", "verdict": "damaged"}],
    }
    mounts = [{"target": "/dev/shm/x/disk.img", "mountpoint": "/c/work/mnt-mount"}]
    groups = group_checkpoints(model, mounts, ["/c/work/mnt-mount/run", "/elsewhere"])
    assert [(g.label, [c["path"] for c in g.checkpoints]) for g in groups] == [
        ("E001 image /dev/shm/x/disk.img", ["/c/work/mnt-mount/run/step-1.pt"]),
        ("E002 s3-prefix s3://bucket/run/", []),
        ("probed /elsewhere", ["/elsewhere/step-2.pt"]),
    ]


def test_inline_check_uses_the_playbook_validation(tmp_path: Path) -> None:
    from ckptrescue.tui.screens.params import check_value

    dev = Parameter(name="source", type="block_device")
    assert check_value(dev, str(tmp_path)) == (
        False, f"parameter source: '{tmp_path}' is not a block device")
    assert check_value(dev, "") == (False, "required")
    url = Parameter(name="url", type="s3_url")
    assert check_value(url, "s3://bucket/prefix") == (True, "ok")
    assert not check_value(url, "http://bucket")[0]
    retries = Parameter(name="retries", type="integer", required=False, default=3)
    assert check_value(retries, "") == (True, "default: 3")
    assert check_value(retries, "x") == (False, "parameter retries: 'x' is not an integer")


def _picker_rows() -> list[str]:
    from textual.app import App
    from textual.widgets import DataTable

    from ckptrescue.tui.screens.pickers import DevicePicker

    app = App()
    seen: dict[str, list[str]] = {}

    async def script(pilot) -> None:
        picker = DevicePicker("image")
        await app.push_screen(picker)
        await wait_for(pilot, lambda: "device(s)" in str(
            picker.query_one("#device-status").render()) or "cannot" in str(
            picker.query_one("#device-status").render()), 30, "device list")
        table = picker.query_one(DataTable)
        seen["rows"] = [str(k.value) for k in table.rows]

    drive(app, script)
    return seen["rows"]


def test_device_picker_lists_the_kernels_devices(kernel_state_still: None) -> None:
    from ckptrescue.storage.devices import devices

    # The privileged tests attach and detach loop devices on this machine: none runs while this
    # one lists (a loop device detached and attached again between the two listings was in
    # both, and not in the picker's rows). What else changes them is out of the suite's hands:
    # the picker's rows are compared with a listing that did not change around them.
    for _attempt in range(20):
        before = [d.path for d in devices()]
        rows = _picker_rows()
        after = [d.path for d in devices()]
        if before == after:
            break
    assert before == after, "the machine's devices changed during each of 20 listings"
    assert rows == before
    assert all(row.startswith("/dev/") for row in rows)


def test_finding_lines_name_offset_tensors_and_artifacts() -> None:
    sha = "ab" * 32
    lines = finding_lines({"code": "IM001", "severity": "error", "title": "1024 unreadable bytes",
                           "evidence": "/dev/sdb", "offset": 4096, "length": 1024,
                           "tensors": ["model.0.weight"],
                           "details": {"mapfile_sha256": sha, "bad_ranges": [[4096, 5120]]}})
    assert lines == ["IM001 [error] 1024 unreadable bytes", "  evidence: /dev/sdb",
                     "  at offset 4096, 1024 bytes", "  tensors: model.0.weight",
                     "  bad_ranges: [[4096, 5120]]",
                     f"  artifact (mapfile_sha256): CASE/artifacts/{sha}"]


def test_evidence_pickers_fill_the_field(tmp_path: Path) -> None:
    """F2 on a path parameter browses files; on an image parameter it lists devices and 'b'
    switches to browsing for an image file."""
    from textual.widgets import DirectoryTree, Input

    from ckptrescue.playbook import load
    from ckptrescue.record.case import Case
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.pickers import DevicePicker, PathPicker

    (tmp_path / "ckpts").mkdir()
    (tmp_path / "ckpts" / "a.pt").write_bytes(b"x")
    app = make_app(Case.create(tmp_path / "case"))
    seen: dict[str, object] = {}

    async def pick_first_file(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PathPicker), 10, "path picker")
        tree = app.screen.query_one(DirectoryTree)
        await wait_for(pilot, lambda: len(tree.root.children) > 0, 10, "directory listing")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ParamsScreen), 10, "back")

    async def script(pilot) -> None:
        await pilot.pause()
        await app.push_screen(ParamsScreen(load.load_file(load.resolve("probe-checkpoints"))))
        field = app.screen.query_one("#p-run_dir", Input)
        field.value = str(tmp_path / "ckpts")
        field.focus()
        await pilot.press("f2")
        await pick_first_file(pilot)
        seen["run_dir"] = field.value
        app.pop_screen()
        await app.push_screen(ParamsScreen(load.load_file(load.resolve("full-incident"))))
        field = app.screen.query_one("#p-source", Input)
        field.value = str(tmp_path / "ckpts")
        field.focus()
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, DevicePicker), 10, "devices")
        await pilot.press("b")
        await pick_first_file(pilot)
        seen["source"] = field.value
        await pilot.pause()
        seen["check"] = str(app.screen.query_one("#c-source").render())

    drive(app, script)
    assert seen["run_dir"] == str(tmp_path / "ckpts" / "a.pt")
    assert seen["source"] == str(tmp_path / "ckpts" / "a.pt")
    assert seen["check"] == "✓ ok"
