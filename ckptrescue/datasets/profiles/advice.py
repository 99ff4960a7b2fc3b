"""Findings from checks: the title, the details a responder needs, and what to check next."""

from __future__ import annotations

from pathlib import Path

from ckptrescue.datasets.profiles.checks import Check, Thresholds
from ckptrescue.datasets.profiles.profile import DatasetProfile, ShardProfile
from ckptrescue.model import Finding, Severity

SOURCE = "dataset.compare"

NEXT: dict[str, str] = {
    "DP001": "Open the spot check: the field is empty in this shard where the reference has "
             "values. Find the preprocessing run that wrote this shard (its logs, code and config "
             "version) and check the step that fills this field; re-generate the shard.",
    "DP002": "Open the spot check for the null values; check the join or extraction that fills "
             "this field for this shard's source, and whether an upstream source stopped "
             "providing it.",
    "DP003": "The field is absent from records of this shard: check for a schema change or a "
             "writer version difference in the pipeline that produced this shard.",
    "DP004": "Compare the duplicated records in the spot check; look for a pipeline step that ran "
             "twice or a source that was ingested twice into this shard.",
    "DP005": "Inspect near-duplicate records (boilerplate, templated or scraped pages); check "
             "this shard's source filtering and deduplication step.",
    "DP006": "The two shards hold the same records: check the sharding/upload step (a shard "
             "written or copied twice, an off-by-one in shard numbering) and whether a shard "
             "that should be there is missing.",
    "DP007": "Byte lengths shifted: check the text normalisation/truncation step and the source "
             "of this shard (a changed extractor, a dropped or duplicated segment).",
    "DP008": "Token lengths shifted: check which tokenizer (name, version, vocab) and "
             "normalisation produced this shard compared with the reference.",
    "DP009": "Sequence lengths shifted: check packing/truncation settings (max length, "
             "concatenation) and the tokenizer used for this shard.",
    "DP010": "Numeric values drifted: check this source's units, scaling and normalisation "
             "statistics and any upstream change in how the value is computed.",
    "DP011": "The value/label distribution differs: compare the label mapping (class index "
             "order, vocabulary) used for this shard's source with the reference; look at the "
             "spot check for shifted or flipped labels.",
    "DP012": "The field's type changed: check the writer's schema and the serialisation of this "
             "field (numbers written as strings, lists instead of scalars).",
    "DP014": "The record count changed: check whether the shard was truncated or rewritten "
             "(run `ckptrescue dataset verify` and compare with the manifest).",
}
_SEVERITY = {"DP006": Severity.ERROR, "DP001": Severity.ERROR}


def _title(check: Check) -> str:
    where = f"{check.shard}" + (f", field {check.field!r}" if check.field else "")
    eff = ", ".join(f"{k} {v:.3g}" for k, v in check.effect.items()
                    if k in check.threshold)
    p = "" if check.p_value is None else f", p={check.p_value:.2g}"
    return f"{where}: {check.summary} [{check.test}{p}; {eff}]"


def finding(check: Check, root: str, level: float) -> Finding:
    details = {
        "shard": check.shard, "field": check.field, "measure": check.measure,
        "reference": check.reference, "test": check.test, "statistic": check.statistic,
        "dof": check.dof, "p_value": check.p_value, "significance_level": level,
        "effect_size": check.effect, "threshold": check.threshold, "next": NEXT[check.code],
        **check.extra,
    }
    return Finding(check.code, _SEVERITY.get(check.code, Severity.WARNING), _title(check),
                   evidence=str(Path(root) / check.shard), source=SOURCE,
                   details=_json_safe(details))


def _json_safe(value: object) -> object:
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def count_change(cur: ShardProfile, base: ShardProfile, th: Thresholds) -> list[Check]:
    if not base.records:
        return []
    change = (cur.records - base.records) / base.records
    return [Check("DP014", cur.path, f"baseline {base.path}", None, "records",
                  "record count comparison", float(cur.records), None,
                  {"relative_change": change}, {"relative_change": th.count_change},
                  abs(change) >= th.count_change,
                  f"{cur.records} records vs {base.records} in the baseline ({change:+.1%})")]


def only_in(baseline_only: list[str], current_only: list[str], base_root: str,
            cur_root: str) -> list[Finding]:
    out = []
    for name in baseline_only:
        out.append(Finding("DP013", Severity.INFO, f"{name}: in the baseline profile only "
                           "(missing from the current version)", evidence=str(Path(base_root) / name),
                           source=SOURCE, details={"shard": name, "side": "baseline"}))
    for name in current_only:
        out.append(Finding("DP013", Severity.INFO, f"{name}: in the current profile only (new "
                           "shard, not compared)", evidence=str(Path(cur_root) / name),
                           source=SOURCE, details={"shard": name, "side": "current"}))
    return out


def incomplete(prof: DatasetProfile) -> list[Finding]:
    out = []
    for s in prof.shards:
        if not s.complete:
            out.append(Finding("DP015", Severity.WARNING, f"{s.path}: profile incomplete after "
                               f"{s.records} records: {s.note}", evidence=str(Path(prof.root) / s.path),
                               source=SOURCE, details={"shard": s.path, "records": s.records,
                                                       "reason": s.note, "format": s.format}))
        if s.unparsed:
            out.append(Finding("DP016", Severity.WARNING, f"{s.path}: {s.unparsed} record(s) do "
                               "not parse and are not in the profile",
                               evidence=str(Path(prof.root) / s.path), source=SOURCE,
                               details={"shard": s.path, "unparsed": s.unparsed,
                                        "next": "run `ckptrescue dataset verify` on the shard"}))
    return out
