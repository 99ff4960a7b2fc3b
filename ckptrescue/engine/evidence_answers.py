"""The parts of the one-line answer that name what a dataset audit, a shard check or an
object-store verification found: the files and objects, not "N serious finding(s); see the
report"; and what was brought back (an object version restored and verified, dataset files
recovered) (pure over audit records: each the latest step of its action, read by type)."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from ckptrescue.engine.case_outputs import DATASETS, STORES, outputs_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptrescue.datasets.outputs import (
        DatasetVerifyOutput,
        ManifestAuditOutput,
    )
    from ckptrescue.model import Finding
    from ckptrescue.record.case import Case
    from ckptrescue.stores.outputs import (
        S3HistoryOutput,
        S3RestoreOutput,
        S3VerifyOutput,
        VerifiedObject,
    )

SHOWN = 3  # files named per part; the rest counted


def _named(items: list[str], total: int | None = None) -> str:
    total = len(items) if total is None else total
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {total - SHOWN} more" if total > SHOWN else "")


def _clip(text: str, limit: int = 90) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > 0 else text[:limit]).rstrip(" ,;:(") + " …"


def _audit(out: ManifestAuditOutput) -> str | None:
    bad = [f"{PurePath(str(row.get('path'))).name} {row.get('status')}" for row in out.files
           if row.get("status") not in ("ok", None)]
    if out.ok:
        return None
    counts = out.counts or {}
    total = sum(v for k, v in counts.items() if k != "ok") or len(bad)
    text = f"dataset audit: {_named(bad, total)}" if bad else f"dataset audit: {out.answer}"
    if out.skipped and not out.allow_unverified:
        text += f"; {out.skipped} entr(ies) not checked (unverified)"
    return text


def _shards(out: DatasetVerifyOutput) -> str | None:
    bad: list[str] = []
    for f in out.files:
        status = f.get("status")
        if status not in ("damaged", "unreadable") and not (
                status == "unchecked" and f.get("format") != "other"):
            continue
        name = PurePath(str(f.get("path"))).name
        records = f.get("bad_records") or []
        why = _clip(str(records[0].get("problem"))) if records else (f.get("note") or status)
        bad.append(f"{name} {status} ({why})")
    if not bad:
        return None
    return f"shards: {_named(bad)}"


def _stores(out: S3VerifyOutput) -> str | None:
    wrong = [o for o in out.objects if o.status not in ("match", "unverified")]
    unverified = [o for o in out.objects if o.status == "unverified"]
    parts: list[str] = []
    if wrong:
        parts.append("store verify: " + _named([f"{o.key} {o.status}" + _side(o)
                                                for o in wrong]))
    if unverified:
        parts.append(f"store verify: {len(unverified)} object(s) unverified (no usable stored "
                     "checksum" + ("; accepted)" if out.allow_unverified else ")"))
    bad_latest = [o for o in wrong if o.detail.get("wrong_side") == "store"]
    if bad_latest:
        parts.append("WARNING: the store's latest object is the bad copy for "
                     + _named([o.key for o in bad_latest])
                     + " (restore the known-good version; do not re-download the latest)")
    return "; ".join(parts) or None


def _side(obj: VerifiedObject) -> str:
    side = obj.detail.get("wrong_side")
    return {"store": " (the store's object is wrong)", "local": " (the local file is wrong)",
            "both": " (neither matches the manifest)"}.get(str(side), "")


def _latest_not_known_good(history: S3HistoryOutput) -> list[str]:
    """Keys whose newest version is not the known-good one the manifest identified."""
    out = []
    for key in history.keys:
        good = key.known_good
        latest = next((v for v in key.versions if v.is_latest), None)
        if good and latest is not None and latest.version_id != good:
            out.append(f"{PurePath(key.key).name} (known-good version {good})")
    return out


def evidence_parts(case: Case, held: Callable[[str], bool] = lambda _module: True
                   ) -> list[str]:
    """Answer parts for the latest manifest audit, shard check and store verification
    (``held``: as in ``case_outputs.domains_held``; a domain the case cannot hold is skipped,
    its record types not imported)."""
    parts: list[str] = []
    stores = held(STORES)
    datasets = held(DATASETS)
    if stores:
        from ckptrescue.stores.outputs import S3HistoryOutput

        for history in outputs_of(case, S3HistoryOutput)[-1:]:
            stale = _latest_not_known_good(history)
            if stale:
                parts.append("WARNING: the store's latest object is not the known-good "
                             "version: " + _named(stale)
                             + " (a download of the latest gets the bad copy)")
    if datasets:
        from ckptrescue.datasets.outputs import DatasetVerifyOutput, ManifestAuditOutput, module_of

        for audit in outputs_of(case, ManifestAuditOutput)[-1:]:
            if (text := _audit(audit)) is not None:
                parts.append(text)
        for shards in outputs_of(case, DatasetVerifyOutput)[-1:]:
            if (text := _shards(shards)) is not None:
                parts.append(text)
    if stores:
        from ckptrescue.stores.outputs import S3RestoreOutput, S3VerifyOutput, StoreResultOutput

        for verified in outputs_of(case, S3VerifyOutput)[-1:]:
            if (text := _stores(verified)) is not None:
                parts.append(text)
        for result in outputs_of(case, StoreResultOutput)[-1:]:  # store verify (any store)
            objects = result.extra.get("objects")
            if isinstance(objects, list) and "mode" in result.extra:
                as_verify = S3VerifyOutput.from_json(result.extra)
                if (text := _stores(as_verify)) is not None:
                    parts.append(text)
        # what was brought back: a responder who restored a good copy must not read only
        # "damaged"
        parts += [text for restored in outputs_of(case, S3RestoreOutput)
                  if (text := _restored(restored, case)) is not None]
    if datasets and held(module_of("RecoverOutput")):
        from ckptrescue.datasets.outputs import RecoverOutput

        for recovered in outputs_of(case, RecoverOutput)[-1:]:
            if recovered.answer:
                parts.append(f"dataset recovery: {recovered.answer}")
    return parts


def _restored(out: S3RestoreOutput, case: Case) -> str | None:
    """"step-400.pt: version 863c… restored, verified: CASE/recovery/run/step-400.pt"."""
    if out.status != "verified" or not out.path:
        return None
    where = out.path
    root = str(case.root).rstrip("/") + "/"
    if where.startswith(root):
        where = "CASE/" + where[len(root):]
    version = f"version {out.version_id} " if out.version_id else ""
    return f"{PurePath(out.url).name}: {version}restored, verified: {where}"


def serious_named(findings: list[Finding]) -> str:
    """"3 serious finding(s): MF001 a.jsonl: corrupted; ..." — what they are, clipped."""
    seen: dict[tuple[str, str], Finding] = {}
    for f in findings:
        seen.setdefault((f.code, f.title), f)
    items = [f"{code} {_clip(title, 70)}" for code, title in seen]
    more = f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return f"{len(items)} serious finding(s): " + "; ".join(items[:SHOWN]) + more
