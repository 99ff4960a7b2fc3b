"""Evidence pickers: block devices (size, model, mounts, read-only state) and paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, DirectoryTree, Static

from ckptrescue.display import shown
from ckptrescue.tui.messages import DevicesListed
from ckptrescue.tui.screens.frames import PickerWindow
from ckptrescue.tui.viewmodel import human_bytes
from ckptrescue.tui.widgets.footer import Footer

BROWSE = "\x00browse"  # DevicePicker's answer when the responder wants a file instead


def device_row(dev: dict[str, object]) -> tuple[str, str, str, str, str]:
    """(path, size, model, read-only, mounts) of a ``Device.to_json()``."""
    mounts = dev.get("mounts") or []
    where = ", ".join(f"{m.get('mountpoint')} ({m.get('options', '').split(',')[0]})"
                      for m in mounts if isinstance(m, dict)) or "-"
    kind = str(dev.get("type") or "")
    model = str(dev.get("model") or "-")
    backing = dev.get("loop_backing_file")
    if backing:
        model = f"loop: {backing}"
    return (str(dev.get("path")), human_bytes(int(dev.get("size") or 0)),  # type: ignore[arg-type]
            f"{kind} {model}".strip(), "ro" if dev.get("readonly") else "rw", where)


class DevicePicker(PickerWindow[str | None]):
    """Every block device the kernel lists; enter picks one."""

    DEFAULT_CSS = "DevicePicker DataTable { height: 1fr; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "browse", "Browse files instead"),
        Binding("escape", "dismiss(None)", "Cancel"),
    ]

    def __init__(self, param_type: str) -> None:
        super().__init__()
        self.param_type = param_type

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Pick the evidence device (enter). Nothing is opened for writing.",
                         classes="title")
            yield DataTable(id="devices", cursor_type="row", zebra_stripes=True)
            yield Static("listing block devices...", id="device-status", classes="hint",
                         markup=False)
            yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in ("device", "size", "kind / model", "ro", "mounted at"):
            table.add_column(column, key=column)
        table.focus()
        self.list_devices()

    @work(thread=True, exclusive=True, exit_on_error=False, description="Listing devices")
    def list_devices(self) -> None:
        try:
            from ckptrescue.storage.devices import devices

            found = [d.to_json() for d in devices()]
        except Exception as exc:  # sysfs missing in a container: say so, allow typing
            self.post_message(DevicesListed([], f"cannot list devices: {exc}"))
            return
        self.post_message(DevicesListed(found))

    @on(DevicesListed)
    def _listed(self, message: DevicesListed) -> None:
        table = self.query_one(DataTable)
        for dev in message.devices:
            table.add_row(*(Text(shown(c)) for c in device_row(dev)), key=str(dev.get("path")))
        status = message.error or f"{len(message.devices)} device(s); rw = writable by the " \
                                  "kernel: image it, never mount it read-write"
        self.query_one("#device-status", Static).update(status)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(str(event.row_key.value))

    def action_browse(self) -> None:
        """An image file rather than a device: hand over to the path picker."""
        self.dismiss(BROWSE)


class InertDirectoryTree(DirectoryTree):
    """A directory tree whose file names are shown, never obeyed (display.shown)."""

    def process_label(self, label: str | Text) -> Text:  # type: ignore[override]
        return super().process_label(shown(label) if isinstance(label, str)
                                     else Text(shown(label.plain), style=label.style))


class PathPicker(PickerWindow[str | None]):
    """Browse the filesystem; enter picks a file, u uses the highlighted directory."""

    DEFAULT_CSS = "PathPicker DirectoryTree { height: 1fr; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("u", "use", "Use highlighted"),
        Binding("escape", "dismiss(None)", "Cancel"),
    ]

    def __init__(self, param_type: str, start: str = "") -> None:
        super().__init__()
        self.param_type = param_type
        begin = Path(start).expanduser() if start else Path.cwd()
        while not begin.is_dir() and begin != begin.parent:
            begin = begin.parent
        self.root = begin if begin.is_dir() else Path(os.sep)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Pick a {self.param_type}: enter picks a file, u uses the highlighted "
                         "entry", classes="title", markup=False)
            yield Static(str(self.root), id="path-current", classes="hint", markup=False)
            yield InertDirectoryTree(str(self.root), id="tree")
            yield Footer()

    def on_mount(self) -> None:
        self.query_one(DirectoryTree).focus()

    def _highlighted(self) -> Path | None:
        node = self.query_one(DirectoryTree).cursor_node
        return node.data.path if node is not None and node.data is not None else None

    @on(DirectoryTree.NodeHighlighted)
    def _moved(self) -> None:
        path = self._highlighted()
        if path is not None:
            self.query_one("#path-current", Static).update(shown(path))

    @on(DirectoryTree.FileSelected)
    def _file(self, event: DirectoryTree.FileSelected) -> None:
        if self.param_type != "directory":
            self.dismiss(str(event.path))

    def action_use(self) -> None:
        path = self._highlighted()
        if path is not None:
            self.dismiss(str(path))
