"""The silent drill's dataset: a clean baseline and a new version whose bytes are all fine but
whose content went wrong (``ckptrescue drill DIR --silent``).

Deterministic and CPU-independent: every value comes from SplitMix64 integers; numbers with a
fractional part are written as decimal text built from integers (``0.734`` is ``734``
thousandths; no float arithmetic); no clock. Two versions of one corpus, each ``SHARDS`` JSON
lines shards of ``RECORDS`` records, are different draws of the same distribution (the new
version is the same pipeline over new raw data), so a healthy shard of ``data-v2`` matches its
``data-v1`` namesake only in distribution, never byte for byte.

A record: ``id``, ``text`` (14-40 words of a generated vocabulary), ``input_ids`` (the words'
vocabulary indices: the tokenized sequence), ``label`` (0-4, weights 40/25/15/12/8), ``score``
(an Irwin-Hall sum of 12 uniform thousandths divided by 12: mean 0.5), ``source`` (``web``,
``books``, ``code``, ``wiki``) and ``meta.lang`` (``en`` 90%, ``de`` 10%).

The faults of ``data-v2`` (:data:`FAULTS`), one shard each:

* ``label-flip`` — labels flipped (``4 - label``): the class distribution of the shard inverts;
* ``emptied-field`` — a preprocessing bug wrote ``""`` for ``text``;
* ``duplicate-shard`` — the shard is a byte copy of another shard of the same version;
* ``length-blowup`` — a tokenizer/packing change doubled every sequence: ``text`` said twice,
  ``input_ids`` twice as long.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ckptrescue.model import JsonObject

MASK = (1 << 64) - 1
SHARDS = 8
RECORDS = 300
BASELINE_SEED = 1801
CURRENT_SEED = 1802
LABEL_WEIGHTS = (40, 25, 15, 12, 8)
SOURCES = (("web", 50), ("books", 20), ("code", 15), ("wiki", 15))


class SplitMix64:
    """SplitMix64 (Steele, Lea, Flood 2014): 64-bit integer arithmetic only."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n

    def between(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi)``."""
        return lo + self.below(hi - lo)


def _vocabulary() -> list[str]:
    rng = SplitMix64(18)
    syllables = ("ka", "lo", "mi", "ne", "ru", "ta", "so", "vi", "de", "pa", "qu", "ri", "zo",
                 "be", "fa", "gu")
    words: set[str] = set()
    while len(words) < 600:
        words.add("".join(syllables[rng.below(16)] for _ in range(2 + rng.below(3))))
    return sorted(words)


VOCAB = _vocabulary()


@dataclass(frozen=True)
class Fault:
    kind: str
    shard: int
    fields: tuple[str | None, ...]  # the fields a comparison must name (None: the whole shard)
    codes: tuple[str, ...]          # the code expected for each field, in the same order
    what: str
    copy_of: int | None = None


FAULTS = (
    Fault("label-flip", 2, ("label",), ("DP011",),
          "labels flipped (4 - label) for every record of the shard"),
    Fault("emptied-field", 3, ("text",), ("DP001",),
          "a preprocessing bug emptied the text field"),
    Fault("duplicate-shard", 5, (None,), ("DP006",),
          "the shard is a copy of another shard of the same version", copy_of=1),
    Fault("length-blowup", 6, ("text", "input_ids"), ("DP007", "DP009"),
          "a tokenizer change doubled every sequence (text said twice, input_ids twice as long)"),
)


def shard_name(index: int) -> str:
    return f"part-{index:05d}.jsonl"


def _weighted(rng: SplitMix64, weights: tuple[int, ...]) -> int:
    r = rng.below(sum(weights))
    for i, w in enumerate(weights):
        if r < w:
            return i
        r -= w
    return len(weights) - 1


def record(rng: SplitMix64, shard: int, i: int) -> JsonObject:
    """One clean record; ``score_milli`` is the score in thousandths (an int)."""
    ids = [rng.below(len(VOCAB)) for _ in range(rng.between(14, 41))]
    score = sum(rng.below(1000) for _ in range(12)) // 12
    source = SOURCES[_weighted(rng, tuple(w for _, w in SOURCES))][0]
    return {"id": f"doc-{shard:05d}-{i:06d}", "text": " ".join(VOCAB[t] for t in ids),
            "input_ids": [t + 3 for t in ids],  # 0-2: pad, bos, eos
            "label": _weighted(rng, LABEL_WEIGHTS), "score_milli": score, "source": source,
            "lang": "de" if rng.below(10) == 0 else "en"}


def shard_records(seed: int, shard: int, n: int = RECORDS) -> list[JsonObject]:
    rng = SplitMix64(seed * 1_000_003 + shard)
    return [record(rng, shard, i) for i in range(n)]


def apply(fault: Fault, recs: list[JsonObject]) -> list[JsonObject]:
    """The records of ``fault``'s shard after the fault (a new list; the input is unchanged)."""
    out = [dict(r) for r in recs]
    for r in out:
        if fault.kind == "label-flip":
            r["label"] = len(LABEL_WEIGHTS) - 1 - r["label"]
        elif fault.kind == "emptied-field":
            r["text"] = ""
        elif fault.kind == "length-blowup":
            r["text"] = r["text"] + " " + r["text"]
            r["input_ids"] = r["input_ids"] + r["input_ids"]
    return out


def jsonl_line(r: JsonObject) -> str:
    """The record as a JSON line; ``score`` as exact decimal text (no float formatting)."""
    score = f"{r['score_milli'] // 1000}.{r['score_milli'] % 1000:03d}"
    return ("{" + f'"id": {json.dumps(r["id"])}, "text": {json.dumps(r["text"])}, '
            f'"input_ids": {json.dumps(r["input_ids"])}, "label": {r["label"]}, '
            f'"score": {score}, "source": {json.dumps(r["source"])}, '
            f'"meta": {{"lang": {json.dumps(r["lang"])}}}' + "}\n")


def _write(path: Path, recs: list[JsonObject]) -> Path:
    path.write_bytes("".join(jsonl_line(r) for r in recs).encode())
    return path


def write_version(root: Path, seed: int, *, faults: tuple[Fault, ...] = ()) -> list[Path]:
    """Write one version of the corpus under ``root``; returns the shard paths."""
    root.mkdir(parents=True, exist_ok=True)
    by_shard = {f.shard: f for f in faults}
    paths = []
    for s in range(SHARDS):
        fault = by_shard.get(s)
        if fault is not None and fault.kind == "duplicate-shard":
            continue  # written below, as a copy of its source
        recs = shard_records(seed, s)
        paths.append(_write(root / shard_name(s), apply(fault, recs) if fault else recs))
    for fault in faults:
        if fault.kind == "duplicate-shard" and fault.copy_of is not None:
            source = root / shard_name(fault.copy_of)
            target = root / shard_name(fault.shard)
            target.write_bytes(source.read_bytes())
            paths.append(target)
    return sorted(paths)


def expected(baseline: str, current: str) -> list[JsonObject]:
    """One entry per finding a comparison of ``current`` against ``baseline`` must report."""
    out: list[JsonObject] = []
    for fault in FAULTS:
        for field, code in zip(fault.fields, fault.codes, strict=True):
            entry: JsonObject = {"kind": fault.kind, "shard": shard_name(fault.shard),
                                     "field": field, "code": code, "what": fault.what,
                                     "dataset": current, "baseline": baseline}
            if fault.copy_of is not None:
                entry["copy_of"] = shard_name(fault.copy_of)
            out.append(entry)
    return out
