"""The step list of a run: one row per step with a live status and its summary."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ckptrescue.tui.viewmodel import STATUS_ICON


class StepTable(DataTable[object]):
    """Rows keyed by step id; columns: status, step, action, summary."""

    DEFAULT_CSS = """
    StepTable { height: auto; max-height: 9; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.statuses: dict[str, str] = {}

    def on_mount(self) -> None:
        self.add_column("", key="status", width=2)
        self.add_column("step", key="step", width=12)
        self.add_column("status", key="state", width=9)
        self.add_column("summary", key="summary", width=48)

    def set_steps(self, steps: list[tuple[str, str]]) -> None:
        """``steps``: (step id, action) in plan order, all pending."""
        self.clear()
        self.statuses = {}
        for step_id, _action in steps:
            self.statuses[step_id] = "pending"
            self.add_row(STATUS_ICON["pending"], Text(step_id), "pending", "", key=step_id)

    def set_status(self, step_id: str, status: str, summary: str = "") -> None:
        if step_id not in self.statuses:
            return
        self.statuses[step_id] = status
        self.update_cell(step_id, "status", STATUS_ICON.get(status, "?"))
        self.update_cell(step_id, "state", status)
        if summary or status in {"running", "pending"}:
            self.update_cell(step_id, "summary", Text(summary.replace("\n", " ")[:200]))
        if status == "running":
            self.move_cursor(row=self.get_row_index(step_id))
