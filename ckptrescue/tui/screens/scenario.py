"""What happened? -> the playbook the kit proposes (or any shipped playbook)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ckptrescue.errors import CkptRescueError
from ckptrescue.tui.scenarios import SCENARIOS
from ckptrescue.tui.widgets.fields import FieldOptionList, after_typed
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header


class ScenarioScreen(Screen[None]):
    """Pick what happened; the right pane shows the proposed playbook."""

    DEFAULT_CSS = """
    ScenarioScreen #choices { width: 36; border: round $primary; }
    ScenarioScreen #about { width: 1fr; border: round $secondary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        # a priority binding: the keys typed after it wait for the parameters screen
        Binding("enter", "choose", "Choose", show=False, priority=True),
        Binding("f7", "app.findings", "Findings"),
        Binding("f8", "app.report", "Report"),
        Binding("ctrl+o", "app.open_case", "Other case"),
    ]

    def compose(self) -> ComposeResult:
        from ckptrescue.playbook import load

        yield Header()
        yield Static("What happened? The kit proposes a playbook; enter to continue.",
                     classes="title")
        with Horizontal():
            options: list[Option | None] = [Option(s.title, id=f"s:{s.key}") for s in SCENARIOS]
            options.append(None)
            options += [Option(f"playbook: {name}", id=f"p:{name}") for name in load.shipped()]
            yield FieldOptionList(*options, id="choices")
            with VerticalScroll(id="about"):
                yield Static("", id="about-text", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        choices = self.query_one("#choices", OptionList)
        choices.highlighted = 0
        choices.focus()
        self._describe(choices.get_option_at_index(0).id or "")

    def _playbook_name(self, option_id: str) -> tuple[str, str]:
        kind, key = option_id.split(":", 1)
        if kind == "p":
            return key, ""
        scenario = next(s for s in SCENARIOS if s.key == key)
        return scenario.playbook, scenario.hint

    _described = ""  # the option the right pane shows (its first highlight repeats on_mount's)

    def _describe(self, option_id: str) -> None:
        from ckptrescue.playbook import load

        if not option_id or option_id == self._described:
            return
        self._described = option_id
        name, hint = self._playbook_name(option_id)
        try:
            book = load.load_file(load.resolve(name))
        except CkptRescueError as exc:
            self.query_one("#about-text", Static).update(f"{name}: {exc.message}")
            return
        lines = [hint, ""] if hint else []
        lines.append(f"Proposed playbook: {book.name}")
        lines.append(book.title)
        lines.append("")
        paragraphs = [" ".join(chunk.split()) for chunk in book.description.split("\n\n")]
        lines.append("\n\n".join(p for p in paragraphs if p))
        lines.append("")
        lines.append("It asks for: " + (", ".join(f"{p.name} ({p.type})" for p in book.parameters
                                                   if p.required and p.default is None)
                                        or "nothing required"))
        lines.append(f"Steps: {', '.join(s.id for s in book.steps)}")
        self.query_one("#about-text", Static).update("\n".join(lines))

    @on(OptionList.OptionHighlighted, "#choices")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._describe(event.option.id or "")

    @on(OptionList.OptionSelected, "#choices")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._open(event.option.id or "")

    def action_choose(self) -> None:
        """Open the highlighted entry once the list has moved with every key typed before this
        Enter; the keys typed after it wait for the parameters screen."""
        self.app.hold_keys()  # type: ignore[attr-defined]
        choices = self.query_one("#choices", OptionList)
        after_typed([choices], self._choose_highlighted)

    def _choose_highlighted(self) -> None:
        choices = self.query_one("#choices", OptionList)
        if not self.is_current or choices.highlighted is None:
            self.app.release_keys()  # type: ignore[attr-defined]
            return
        self._open(choices.get_option_at_index(choices.highlighted).id or "")

    def _open(self, option_id: str) -> None:
        from ckptrescue.playbook import load
        from ckptrescue.tui.screens.params import ParamsScreen

        name, _ = self._playbook_name(option_id)
        try:
            book = load.load_file(load.resolve(name))
        except CkptRescueError as exc:
            self.notify(exc.message, severity="error")
            self.app.release_keys()  # type: ignore[attr-defined]
            return
        self.app.push_screen(ParamsScreen(book))
