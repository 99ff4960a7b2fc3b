"""Typer CLI adapter: one module per command group, wired in ``main.py``."""
