"""Start: open an existing case directory or create a new one; recent cases."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ckptrescue.display import shown
from ckptrescue.errors import CkptRescueError
from ckptrescue.tui.recent import RecentCase, recent_cases
from ckptrescue.tui.widgets.fields import FieldInput, after_typed
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header


class StartScreen(Screen[None]):
    """Open or create a case."""

    DEFAULT_CSS = """
    StartScreen #start { padding: 0 1; }
    StartScreen #names { height: 3; }
    StartScreen #names Input { width: 1fr; }
    StartScreen #buttons { height: 3; }
    StartScreen #buttons Button { margin-right: 2; }
    StartScreen #recent { height: 1fr; border: round $primary; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+o", "open_case", "Open case"),
        Binding("ctrl+n", "create_case", "Create case"),
        Binding("escape", "back", "Back", show=False),
        # Enter in a field acts at once (a priority binding, handled before the next key is
        # routed): "INC-1<enter>probe my run" puts the title in the title field
        Binding("enter", "enter_field", "Next", show=False, priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._recent: list[RecentCase] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="start"):
            yield Static("Open a case directory, or create a new one for this incident.",
                         classes="title")
            yield FieldInput(placeholder="case directory, e.g. /cases/INC-042", id="case-dir")
            with Horizontal(id="names"):
                yield FieldInput(placeholder="incident title (new case)", id="title")
                yield FieldInput(placeholder="examiner (new case)", id="examiner")
            with Horizontal(id="buttons"):
                yield Button("Open (ctrl+o)", id="open", variant="primary")
                yield Button("Create (ctrl+n)", id="create", variant="success")
            yield Static("", id="start-error", classes="error")
            yield Label("Recent cases (enter opens):", classes="hint")
            yield OptionList(id="recent")
        yield Footer()

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = not self.app.is_headless
        self._recent = recent_cases(getattr(self.app, "cases_root", None))
        options = self.query_one("#recent", OptionList)
        root = getattr(self.app, "cases_root", None)
        for i, entry in enumerate(self._recent):
            options.add_option(Option(shown(entry.label(root)), id=f"recent-{i}"))
        if not self._recent:
            options.add_option(Option("(no recent cases)", disabled=True))
        self.query_one("#case-dir", Input).focus()

    def _path(self) -> Path | None:
        raw = self.query_one("#case-dir", Input).value.strip()
        if not raw:
            self._error("Type a case directory first.")
            return None
        path = Path(raw).expanduser()
        root = getattr(self.app, "cases_root", None)
        if not path.is_absolute() and root is not None:
            path = root / path
        return path

    def _error(self, text: str) -> None:
        self.query_one("#start-error", Static).update(text)

    def action_open_case(self) -> bool:
        """Open the typed case; False (and the error shown) when it cannot be."""
        from ckptrescue.record.case import Case

        path = self._path()
        if path is None:
            return False
        try:
            case = Case.open(path)
            case.manifest  # noqa: B018 - a readable manifest or a one-line error
        except CkptRescueError as exc:
            self._error(exc.message + (f" ({exc.hint})" if exc.hint else ""))
            return False
        self.app.set_case(case)  # type: ignore[attr-defined]
        return True

    def action_create_case(self) -> bool:
        """Create the typed case; False (and the error shown) when it cannot be."""
        from ckptrescue.record.case import Case

        path = self._path()
        if path is None:
            return False
        title = self.query_one("#title", Input).value.strip()
        examiner = self.query_one("#examiner", Input).value.strip()
        try:
            case = Case.create(path, title=title, examiner=examiner)
        except CkptRescueError as exc:
            self._error(exc.message)
            return False
        except OSError as exc:
            self._error(f"{path}: cannot create the case ({exc.strerror})")
            return False
        self.app.set_case(case)  # type: ignore[attr-defined]
        return True

    def action_back(self) -> None:
        if getattr(self.app, "case", None) is not None and len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    @on(Button.Pressed, "#open")
    def _open_pressed(self) -> None:
        self.action_open_case()

    @on(Button.Pressed, "#create")
    def _create_pressed(self) -> None:
        self.action_create_case()

    def action_enter_field(self) -> None:
        """Enter moves on at once (case directory -> title -> examiner), so the keys typed after
        it land in the next field; what Enter decides (open an existing case, create the new
        one) waits until the fields have every key typed before it. Elsewhere (buttons, the
        recent list) Enter is theirs."""
        focused = self.focused
        if not isinstance(focused, Input) or focused.id not in {"case-dir", "title", "examiner"}:
            raise SkipAction()
        fields = [self.query_one(f"#{name}", Input) for name in ("case-dir", "title", "examiner")]
        if focused.id == "case-dir":
            self.set_focus(fields[1])  # now (Widget.focus() would wait for the queue)
            self.app.hold_keys()  # type: ignore[attr-defined] - it may open the case
            after_typed(fields[:1], self._open_if_case)
        elif focused.id == "title":
            self.set_focus(fields[2])
        else:
            self.app.hold_keys()  # type: ignore[attr-defined] - the keys typed on go to the case
            after_typed(fields, self._create_if_current)

    def _open_if_case(self) -> None:
        raw = self.query_one("#case-dir", Input).value.strip()
        path = self._path() if raw else None
        opened = (self.is_current and path is not None and (path / "case.json").is_file()
                  and self.action_open_case())
        if not opened:  # staying here: the keys typed on belong to the title field
            self.app.release_keys()  # type: ignore[attr-defined]

    def _create_if_current(self) -> None:
        if not (self.is_current and self.action_create_case()):
            self.app.release_keys()  # type: ignore[attr-defined]

    @on(OptionList.OptionSelected, "#recent")
    def _recent_selected(self, event: OptionList.OptionSelected) -> None:
        option_id = event.option.id or ""
        if not option_id.startswith("recent-"):
            return
        entry = self._recent[int(option_id.split("-", 1)[1])]
        self.query_one("#case-dir", Input).value = str(entry.path)
        self.action_open_case()
