"""Render the report model with Jinja2 templates from ``reports/templates`` (autoescaped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckptrescue.errors import UsageError
from ckptrescue.record.case import Case
from ckptrescue.report import model as report_model
from ckptrescue.resources import data_dir

FORMATS = ("html", "md", "json")
FILE_FORMATS = (*FORMATS, "pdf")  # pdf: binary, written to a file by write()


def _env(autoescape: bool) -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(str(data_dir("report_templates"))),
        # Markdown has no autoescape: every {{ }} output goes through _md_text instead.
        finalize=None if autoescape else _md_text,
        autoescape=autoescape,  # noqa: S701 - html: on; markdown: off by design (escaped per cell)
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["human"] = _human
    env.filters["short"] = lambda s, n=12: (s or "")[:n]
    env.filters["mdcell"] = str  # escaping happens once, in finalize
    env.filters["kv"] = _kv_html
    env.filters["kvtext"] = _kv_text
    env.filters["names"] = _names
    env.filters["cssstr"] = _css_string
    env.globals["unknown_section"] = _unknown_section
    return env


def _css_string(value: Any) -> str:
    """Text safe inside a CSS string in a ``<style>`` element (the print footer): letters,
    digits and ``. : - _ / ·`` and spaces only; anything else becomes ``?``."""
    return "".join(c if c.isascii() and (c.isalnum() or c in ".:-_/ ") else
                   ("·" if c == "·" else "?") for c in str(value or ""))[:120]


def _unknown_section(name: str) -> str:
    """Called by a template for a section of the model it has no branch for: fail loudly."""
    raise ValueError(f"report template has no body for section {name!r} "
                     "(ckptrescue/report/model.py SECTIONS)")


def _md_text(value: Any) -> str:
    """Markdown-safe text: no HTML, no table breaks, no code-span breaks, no links."""
    text = str(value).replace("\n", " ").replace("|", "\\|").replace("`", "'")
    text = text.replace("[", "\\[").replace("]", "\\]")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


KV_ROWS = 12  # structured details shown per finding/object (the JSON report has them all)
NAMES_SHOWN = 12  # names listed in one cell (tensors, keys); the JSON report has them all


def _names(value: Any, limit: int = NAMES_SHOWN) -> str:
    """``a, b, c … and 14 more``: a bounded list of names for one cell."""
    items = [str(v) for v in (value or [])]
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" … and {len(items) - limit} more"


def _scalar(value: Any) -> str:
    import json

    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str, sort_keys=True)
        return text if len(text) <= 160 else text[:159] + "…"
    return str(value)


def _kv_html(value: Any) -> Any:
    """Structured details as a small key/value table (escaped), never a Python repr."""
    from markupsafe import Markup, escape

    if not isinstance(value, dict):
        return escape("" if value is None else _scalar(value))
    rows = [f"<tr><td>{escape(k)}</td><td class=\"mono\">{escape(_scalar(v))}</td></tr>"
            for k, v in sorted(value.items())[:KV_ROWS] if v not in (None, "", [], {})]
    if len(value) > KV_ROWS:
        rows.append(f"<tr><td colspan=\"2\">… {len(value) - KV_ROWS} more</td></tr>")
    # every key and value went through escape() above
    return Markup(f"<table class=\"kv\">{''.join(rows)}</table>") if rows else Markup("")  # noqa: S704


def _kv_text(value: Any) -> str:
    """Structured details as ``key: value; ...`` (Markdown cells)."""
    if not isinstance(value, dict):
        return "" if value is None else _scalar(value)
    return "; ".join(f"{k}: {_scalar(v)}" for k, v in sorted(value.items())[:KV_ROWS]
                     if v not in (None, "", [], {}))


def _human(n: Any) -> str:
    try:
        value = float(n)
    except (TypeError, ValueError):
        return str(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def render(case: Case, fmt: str = "html") -> str:
    if fmt == "pdf":
        raise UsageError("the pdf report is a file: give an output path (-o FILE.pdf)")
    if fmt not in FORMATS:
        raise UsageError(f"unknown report format {fmt!r} (one of {', '.join(FILE_FORMATS)})")
    model = report_model.build(case)
    if fmt == "json":
        return report_model.to_json(model)
    if fmt == "html":
        return str(_env(True).get_template("report.html.j2").render(r=model))
    return str(_env(False).get_template("report.md.j2").render(r=model))


def check_output(case: Case, out: Path) -> None:
    """Refuse a report path that is evidence, a device, or one of the case's own records."""
    from ckptrescue import guard
    from ckptrescue.errors import RefusedError

    ctx = guard.GuardContext(evidence_paths=tuple(case.evidence_paths()),
                             protected_paths=tuple(case.protected_paths()))
    reason = ctx.writes_forbidden(str(out))
    if reason:
        raise RefusedError(f"report: {reason}")


def write(case: Case, out: Path, fmt: str = "html", *, runner: Any = None) -> Path:
    """Render the report into ``out`` (``pdf``: the HTML printed by headless Chromium, through
    ``runner`` when given — see ``report/pdf.py``)."""
    check_output(case, out)
    if fmt == "pdf":
        from ckptrescue.report.pdf import print_pdf

        return print_pdf(render(case, "html"), out, runner=runner)
    text = render(case, fmt)
    from ckptrescue.effects import beneath

    beneath.replace_output(out, text)
    return out
