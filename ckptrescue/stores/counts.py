"""What a preserve did, in the same words for the terminal, the answer and the audit log:
"0 of 3 preserved, 3 failed: HTTP 500" (store preserve and s3 preserve)."""

from __future__ import annotations

from typing import Any


def short_reason(exc: BaseException) -> str:
    """Why one object failed, in a few words a count can group ("HTTP 500", "connection
    reset mid-body", "access denied (AccessDenied)")."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
        if status:
            return f"HTTP {status}"
        if code:
            return str(code)
    message = getattr(exc, "message", None) or str(exc)
    if "reset in the middle of the body" in message:
        return "connection reset mid-body"
    message = message.split(": ", 1)[-1] if message.startswith(("s3://", "az://", "gs://")) \
        else message
    return message if len(message) <= 80 else message[:77] + "..."


def counts_line(objects: list[Any], *, ok: tuple[str, ...] = ("match", "unverifiable",
                                                              "mismatch")) -> str:
    """"2 of 3 preserved (1 already by an earlier run), 1 failed: HTTP 500": what happened,
    the same words for the terminal, the answer and the audit log."""
    from collections import Counter

    total = len(objects)
    done = [o for o in objects if o.status in ok]
    failed = [o for o in objects if o.status not in ok]
    parts = [f"{len(done)} of {total} preserved"]
    resumed = sum(1 for o in done if o.detail.get("resumed"))
    mismatched = sum(1 for o in done if o.status == "mismatch")
    notes = []
    if resumed:
        notes.append(f"{resumed} already by an earlier run")
    if mismatched:
        notes.append(f"{mismatched} kept as received but not matching the stored checksum")
    if notes:
        parts[0] += f" ({'; '.join(notes)})"
    if failed:
        reasons = Counter(str(o.detail.get("reason") or o.detail.get("message") or "error")
                          for o in failed)
        why = ", ".join(r if n == len(failed) else f"{r} ({n})"
                        for r, n in reasons.most_common(3))
        parts.append(f"{len(failed)} failed: {why}")
    return ", ".join(parts)
