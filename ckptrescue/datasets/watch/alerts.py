"""Where a watch reports: a webhook (JSON POST) and a Prometheus textfile.

``post_webhook(url, payload)``: one POST of the pass summary and its findings, 10 s timeout,
no redirects followed (a redirect could carry the findings elsewhere); an unreachable receiver
is reported, never fatal. ``write_textfile(path, state, result)``: the node-exporter textfile
format, written to a temporary file and renamed, so a scrape never sees half a file.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ckptrescue.datasets.watch.passes import PassResult
from ckptrescue.datasets.watch.state import WatchState


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def post_webhook(url: str, payload: dict[str, Any], *, timeout: float = 10.0) -> str | None:
    """POST ``payload`` as JSON; None on success, else why it failed (one line)."""
    if not url.startswith(("http://", "https://")):
        return f"webhook {url}: only http(s) URLs"
    data = json.dumps(payload, default=str).encode()
    request = urllib.request.Request(url, data=data, method="POST",  # noqa: S310 - http(s) only
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "ckptrescue-watch"})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            if not 200 <= response.status < 300:
                return f"webhook {url}: HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"webhook {url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"webhook {url}: {getattr(exc, 'reason', exc)}"
    return None


def metrics(state: WatchState, result: PassResult, source: str) -> str:
    label = source.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    rows = [
        ("ckptrescue_watch_files_checked_total", "counter",
         "Files checked by all passes.", state.counter("files_checked_total")),
        ("ckptrescue_watch_bytes_read_total", "counter",
         "Bytes read by all passes.", state.counter("bytes_read_total")),
        ("ckptrescue_watch_passes_total", "counter", "Passes run.", state.counter("passes_total")),
        ("ckptrescue_watch_bad_files", "gauge", "Files currently bad or gone.", state.bad()),
        ("ckptrescue_watch_files", "gauge", "Files in the watched source.",
         state.counter("files_total")),
        ("ckptrescue_watch_bytes_per_second", "gauge", "Read rate of the last pass.",
         float(state.meta("last_pass_rate") or 0)),
        ("ckptrescue_watch_last_pass_timestamp_seconds", "gauge", "End of the last pass.",
         float(state.meta("last_pass") or 0)),
        ("ckptrescue_watch_last_full_pass_timestamp_seconds", "gauge",
         "End of the last full pass.", float(state.meta("last_full_pass") or 0)),
    ]
    out = []
    for name, kind, help_text, value in rows:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                f'{name}{{source="{label}"}} {value}']
    return "\n".join(out) + "\n"


def write_textfile(path: Path, state: WatchState, result: PassResult, source: str) -> None:
    from ckptrescue.record.atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic for the collector (which reads *.prom only; the temp file is .NAME.*.tmp); a
    # metrics file need not survive a crash
    write_atomic(path, metrics(state, result, source).encode(), durable=False)
