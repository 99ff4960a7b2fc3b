"""The two modal frames every dialog of the TUI sits in: a question box and a picker window.

A dialog subclasses one and declares only what differs (its width, its buttons' spacing, the
height of its list): Textual applies a base's ``DEFAULT_CSS`` to its subclasses."""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen

Answer = TypeVar("Answer")


class QuestionBox(ModalScreen[Answer]):
    """A short question over the screen: a centred box with a warning border, buttons in a row."""

    DEFAULT_CSS = """
    QuestionBox { align: center middle; }
    QuestionBox > Vertical { width: 70; height: auto; border: thick $warning;
                             background: $surface; padding: 1 2; }
    QuestionBox Horizontal { height: 3; margin-top: 1; }
    QuestionBox Button { margin-right: 1; }
    """


class PickerWindow(ModalScreen[Answer]):
    """A list to pick from: a centred window over nearly the whole screen."""

    DEFAULT_CSS = """
    PickerWindow { align: center middle; }
    PickerWindow > Vertical { width: 96%; height: 90%; border: thick $primary;
                              background: $surface; }
    """
