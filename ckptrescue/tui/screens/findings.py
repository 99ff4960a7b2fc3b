"""Findings: a tree evidence -> checkpoint -> tensor with verdicts, every finding's details, the
bad-sector map and the "resume from" answer. Everything comes from the case (the report model),
built off the UI thread."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from ckptrescue.display import shown
from ckptrescue.model import JsonObject
from ckptrescue.tui.messages import CaseDataLoaded
from ckptrescue.tui.viewmodel import (
    VERDICT_ICON,
    checkpoint_label,
    dataset_steps,
    finding_lines,
    group_checkpoints,
    sector_map_lines,
    step_label,
    tree_words,
)
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header

SEVERITIES = ("critical", "error", "warning", "info")
TABLE_PAGE = 200  # rows of an aggregated finding's table shown at a time


def _lost_line(item: Any) -> str:
    """A salvage ``lost``/``filled`` item: an object with a name and a reason (or a name)."""
    if isinstance(item, dict):
        why = item.get("reason") or item.get("from") or ""
        return f"{item.get('name')}" + (f": {why}" if why else "")
    return str(item)


def spot_lines(spot: JsonObject) -> list[str]:
    """A spot check side by side: flagged records, then the reference's; marked values first
    (they drove the flag), with the seed and indices to redraw it."""
    if spot.get("error"):
        return [f"spot check of {spot.get('shard')}: {spot['error']}"]
    flagged = spot.get("flagged") or {}
    reference = spot.get("reference") or {}
    lines = [f"spot check of {spot.get('shard')}", f"seed {spot.get('seed')}, records "
             f"{flagged.get('indices')}" + (f"; reference {reference.get('shard')} records "
                                            f"{reference.get('indices')}" if reference else ""),
             ""]
    for label, sample in (("flagged", flagged), ("reference", reference)):
        for rec in sample.get("records") or []:
            marked = rec.get("marked") or {}
            values = rec.get("values") or {}
            parts = [f">>{k}={values.get(k, '')!r} ({why})<<" for k, why in marked.items()]
            parts += [f"{k}={v!r}" for k, v in values.items() if k not in marked]
            lines.append(f"{label} #{rec.get('index')}: " + "  ".join(parts))
    return lines


def load_case_data(case: Any) -> CaseDataLoaded:
    """Read the report model and what groups it (runs in a worker thread)."""
    from ckptrescue.engine.answer import outputs_of
    from ckptrescue.report import model as report_model
    from ckptrescue.storage.outputs import MountOutput

    model = report_model.build(case)
    roots: list[str] = []
    for record in case.records("step.started"):
        details = record["details"]
        if details.get("action") == "probe":
            paths = (details.get("args") or {}).get("paths") or []
            roots += [str(p) for p in (paths if isinstance(paths, list) else [paths])]
    return CaseDataLoaded(model, [m.to_json() for m in outputs_of(case, MountOutput)], roots)


class FindingsScreen(Screen[None]):
    """Tree on the left, details of the highlighted node on the right."""

    DEFAULT_CSS = """
    FindingsScreen #answer { height: auto; max-height: 3; }
    FindingsScreen #tree { width: 3fr; border: round $primary; }
    FindingsScreen #detail-box { width: 2fr; border: round $secondary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "sector_map", "Bad-sector map"),
        Binding("g", "reload", "Reload"),
        Binding("f8", "app.report", "Report"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.model: JsonObject | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the case...", id="answer", classes="answer", markup=False)
        with Horizontal():
            tree: Tree[JsonObject] = Tree("case", id="tree")
            tree.show_root = False
            yield tree
            with VerticalScroll(id="detail-box"):
                yield Static("", id="detail", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tree").focus()
        self.action_reload()

    def action_reload(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, description="Reading the case")
    def load(self) -> None:
        try:
            self.post_message(load_case_data(self.app.case))  # type: ignore[attr-defined]
        except Exception as exc:  # a damaged case: say so
            self.post_message(CaseDataLoaded({"answer": f"cannot read the case: {exc}"}, [], []))

    @on(CaseDataLoaded)
    def _loaded(self, message: CaseDataLoaded) -> None:
        model = self.model = message.model
        resume = model.get("resume_from")
        head = f"resume from: {resume}\n" if resume else ""
        self.query_one("#answer", Static).update(f"{head}answer: {model.get('answer')}")
        tree = self.query_one("#tree", Tree)
        tree.clear()
        groups = group_checkpoints(model, message.mounts, message.probed_roots)
        words = tree_words(model)
        evidence = tree.root.add(words.root, expand=True, data={"kind": "help"})
        for g in groups:
            node = evidence.add(Text(g.label), expand=True, data={"kind": "evidence", **g.detail})
            root = g.detail.get("mountpoint") or g.detail.get("path")
            for m in message.mounts:
                if g.detail.get("id") and m.get("target") and \
                        str(g.detail.get("source")) == str(m.get("target")):
                    root = m.get("mountpoint")
            for ckpt in g.checkpoints:
                self._add_checkpoint(node, ckpt, root)
            if not g.checkpoints and words.no_checkpoints:
                node.add_leaf(Text(words.no_checkpoints), data=node.data)
        if not groups and words.empty:
            evidence.add_leaf(Text(words.empty))
        steps = dataset_steps(model)
        if steps:
            node = tree.root.add("Dataset steps", expand=True, data={"kind": "help"})
            for row in steps:
                node.add_leaf(Text(step_label(row)), data={"kind": "step", "step": row})
        tree.root.add_leaf("Bad-sector map", data={"kind": "map"})
        by_sev = model.get("findings_by_severity") or {}
        total = sum(len(v) for v in by_sev.values())
        findings = tree.root.add(f"All findings ({total})", data={"kind": "help"})
        for sev in SEVERITIES:
            items = by_sev.get(sev) or []
            if not items:
                continue
            sev_node = findings.add(f"{sev} ({len(items)})", expand=sev in {"critical", "error"})
            for f in items:
                rows = int((f.get("details") or {}).get("aggregated") or 0)
                if not rows or not (f.get("details") or {}).get("table"):
                    sev_node.add_leaf(Text(f"{f.get('code')} {f.get('title')}"),
                                      data={"kind": "finding", "finding": f})
                    continue
                # many findings of one kind: one node, its table paged through
                agg = sev_node.add(Text(f"{f.get('code')} {f.get('title')}"),
                                   data={"kind": "finding", "finding": f})
                for start in range(0, rows, TABLE_PAGE):
                    end = min(rows, start + TABLE_PAGE)
                    agg.add_leaf(Text(f"rows {start + 1}-{end} of {rows}"),
                                 data={"kind": "table_page", "finding": f, "start": start})
        if model.get("multirank"):
            tree.root.add_leaf(Text(f"multi-rank steps ({model['multirank'].get('family')})"),
                               data={"kind": "multirank", "multirank": model["multirank"]})
        if model.get("training_state"):
            tree.root.add_leaf(Text("training state across checkpoints"),
                               data={"kind": "training_state",
                                     "training_state": model["training_state"]})
        content = model.get("dataset_content")
        if content:
            node = tree.root.add(Text("dataset content against its baseline"), expand=True,
                                 data={"kind": "dataset_content", "dataset_content": content})
            for spot in content.get("spot_checks") or []:
                node.add_leaf(Text(f"spot check: {spot.get('shard')}"),
                              data={"kind": "spot", "spot": spot})
        for s in model.get("salvage") or []:
            tree.root.add_leaf(Text(f"salvaged {s.get('checkpoint')}: {len(s.get('recovered', []))} "
                                    f"recovered, {len(s.get('lost', []))} lost"),
                               data={"kind": "salvage", "salvage": s})
        tree.cursor_line = 0
        self._show(tree.root.children[0].data if tree.root.children else None)

    def _add_checkpoint(self, parent: TreeNode[JsonObject], ckpt: JsonObject,
                        root: str | None) -> None:
        node = parent.add(Text(checkpoint_label(ckpt, root)), data={"kind": "checkpoint", **ckpt},
                          expand=ckpt.get("verdict") not in ("intact", None))
        for row in ckpt.get("rows", []):
            icon = VERDICT_ICON.get("damaged" if row["status"] != "suspect" else "suspect")
            node.add_leaf(Text(f"{icon} [{row['status']}] {row['name']}"),
                          data={"kind": "tensor", "checkpoint": ckpt.get("path"), **row})
        total = ckpt.get("tensors_total") or 0
        intact = max(0, total - len(ckpt.get("rows", [])))
        node.add_leaf(Text(f"✓ {intact} of {total} tensors verify"), data={"kind": "checkpoint",
                                                                     **ckpt})

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted[JsonObject]) -> None:
        self._show(event.node.data)

    def _show(self, data: JsonObject | None) -> None:
        self.query_one("#detail", Static).update("\n".join(self._detail_lines(data)))

    def _table_page(self, finding: JsonObject, start: int) -> list[str]:
        """One page of an aggregated finding's per-tensor table, read from its artifact."""
        from ckptrescue.record.findings_table import rows

        lines = [f"{finding.get('code')}: rows {start + 1}-"
                 f"{start + TABLE_PAGE} of {(finding.get('details') or {}).get('aggregated')}",
                 ""]
        try:
            for i, row in enumerate(rows(self.app.case, finding,  # type: ignore[attr-defined]
                                         start=start, limit=TABLE_PAGE), start=start + 1):
                where = f" @ {row.offset}+{row.length}" if row.offset is not None else ""
                lines.append(shown(f"{i}. {row.title}{where}"))
        except OSError as exc:
            lines.append(f"cannot read the table: {exc.strerror or exc}")
        return lines

    def _detail_lines(self, data: JsonObject | None) -> list[str]:
        model = self.model or {}
        if not data or data.get("kind") == "help":
            return ["Highlight a node for its details.", "",
                    "Evidence: what was examined (image, device, copy, probed path).",
                    "Checkpoints carry a verdict; under each, the tensors that do not verify.",
                    "m: the bad-sector map.   F8: the report.",
                    "", f"answer: {model.get('answer')}"]
        kind = data["kind"]
        if kind == "map":
            width = max(20, self.query_one("#detail-box").size.width - 6)
            return sector_map_lines(model.get("bad_sector_map"), width=width)
        if kind == "finding":
            return finding_lines(data["finding"])
        if kind == "table_page":
            return self._table_page(data["finding"], int(data["start"]))
        if kind == "tensor":
            lines = [f"tensor {data['name']}", f"status: {data['status']}",
                     f"checkpoint: {data.get('checkpoint')}"]
            lines += [f"  {r}" for r in data.get("reasons") or []] or ["  (no finding names it)"]
            return lines
        if kind == "checkpoint":
            lines = [f"{data.get('path')}", f"format: {data.get('format')}",
                     f"verdict: {data.get('verdict')}",
                     f"tensors: {data.get('tensors_total')}, not verifying: "
                     f"{len(data.get('rows', []))}", ""]
            for f in data.get("findings", []):
                lines += finding_lines(f)
            return lines
        if kind == "salvage":
            s = data["salvage"]
            lost = [f"  {_lost_line(item)}" for item in s.get("lost") or []]
            filled = [f"  {_lost_line(item)}" for item in s.get("filled") or []]
            return [f"salvage of {s.get('checkpoint')}", f"output: {s.get('output')}",
                    f"recovered: {len(s.get('recovered') or [])}",
                    f"lost: {len(lost) or 'none'}", *lost,
                    *([f"filled from {s.get('fill_from')}: {len(filled)}", *filled]
                      if filled else [])]
        if kind == "multirank":
            m = data["multirank"]
            lines = [f"family: {m.get('family')}", f"resume from: {m.get('resume_from')}"]
            fix = m.get("pointer_fix")
            if fix:
                lines += ["", f"pointer {fix.get('pointer')} says {fix.get('current')}",
                          f"write {fix.get('write')} into it to resume from the newest "
                          "complete step (the kit never writes it)"]
            for step in m.get("steps") or []:
                bad = step.get("bad_ranks") or []
                lines.append(f"{step.get('verdict'):<10} {step.get('path')}"
                             + (f"  bad ranks: {', '.join(bad[:8])}"
                                + (f" (+{step.get('bad_ranks_total', 0) - 8})"
                                   if (step.get("bad_ranks_total") or 0) > 8 else "")
                                if bad else ""))
            return lines
        if kind == "training_state":
            t = data["training_state"]
            lines = [str(t.get("answer")), ""]
            for f in t.get("findings") or []:
                lines += finding_lines(f)
            for row in t.get("tensors") or []:
                rel = row.get("max_rel_l2")
                lines.append(f"{'frozen ' if row.get('frozen') else ''}{row.get('name')}: "
                             f"largest update {rel if rel is not None else '-'}")
            return lines
        if kind == "spot":
            return spot_lines(data["spot"])
        if kind == "step":
            row = data["step"]
            return [f"step {row.get('step')} [{row.get('action')}]",
                    f"status: {row.get('status')}", f"findings: {row.get('findings')}",
                    str(row.get("note") or ""), "", "F8: the report, with its results."]
        if kind == "dataset_content":
            d = data["dataset_content"]
            lines = [str(d.get("answer")), f"{d.get('tests_run')} tests, mode {d.get('mode')}",
                     ""]
            for c in d.get("flagged") or []:
                lines += [f"[{c.get('code')}] {c.get('shard')} {c.get('field') or ''}",
                          f"  {c.get('test')}: statistic {c.get('statistic')}, "
                          f"p {c.get('p_value')}, effect {c.get('effect')}, "
                          f"threshold {c.get('threshold')}", f"  {c.get('summary')}"]
            return lines
        # evidence
        lines = [f"{k}: {v}" for k, v in data.items() if k not in {"kind", "details"}]
        for k, v in sorted((data.get("details") or {}).items()):
            lines.append(f"  {k}: {v}")
        return lines

    def action_sector_map(self) -> None:
        self._show({"kind": "map"})
