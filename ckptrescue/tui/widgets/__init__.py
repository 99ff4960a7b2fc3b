"""Reusable TUI widgets; they receive data as attributes/method calls and import no effects."""
