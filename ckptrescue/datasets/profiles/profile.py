"""Profile values: one shard's statistics, a dataset's, and their versioned JSON form.

A :class:`ShardProfile` is a pure function of the shard's bytes and the options; profiles merge
(:func:`merge_shards`), which is how a comparison builds "the rest of the dataset" and how a
dataset-wide view is made. JSON: :data:`SCHEMA` names the format version; :func:`load` refuses
another major version. See docs/profiles.md for every key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.datasets.profiles.fieldstats import FieldStats
from ckptrescue.datasets.profiles.sketches import BottomK
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

SCHEMA = "ckptrescue.profile/1"
# How the sketches were computed (the JSON keys are those of SCHEMA): 1 = record by record
# (BLAKE2b record hashes, k-permutation MinHash); 2 = by blocks of records (vectorised record
# hashes, one-permutation MinHash, per-block moments and top-k). Hashes and near-duplicate
# counts of two versions do not compare, so `compare` refuses profiles of different versions.
SKETCHES = 2
MAX_FIELDS = 256


@dataclass(frozen=True)
class ProfileOptions:
    """How the profiles were computed (the same options make comparable profiles)."""

    fields: tuple[str, ...] | None = None
    tokenizer: str | None = None
    sample: int | None = None

    def to_json(self) -> JsonObject:
        return {"fields": list(self.fields) if self.fields is not None else None,
                "tokenizer": self.tokenizer, "sample": self.sample}

    @classmethod
    def from_json(cls, d: JsonObject) -> ProfileOptions:
        f = d.get("fields")
        return cls(tuple(f) if f is not None else None, d.get("tokenizer"), d.get("sample"))


@dataclass
class ShardProfile:
    path: str
    format: str = "other"
    size: int = 0
    records: int = 0
    complete: bool = True
    note: str = ""
    unparsed: int = 0
    fields: dict[str, FieldStats] = field(default_factory=dict)
    overflow_fields: int = 0   # values of fields past MAX_FIELDS (not profiled)
    dup_sampled: int = 0       # records in the exact-duplicate sample
    dup_count: int = 0         # of which repeat an earlier record
    near_checked: int = 0      # records checked for near duplicates
    near_count: int = 0        # of which near-duplicate an earlier record
    record_hashes: BottomK = field(default_factory=BottomK)
    options: ProfileOptions = field(default_factory=ProfileOptions)

    def field_stats(self, name: str) -> FieldStats:
        stats = self.fields.get(name)
        if stats is None:
            stats = self.fields[name] = FieldStats()
        return stats

    def accepts(self, name: str) -> bool:
        return name in self.fields or len(self.fields) < MAX_FIELDS

    @property
    def dup_rate(self) -> float:
        return self.dup_count / self.dup_sampled if self.dup_sampled else 0.0

    @property
    def near_rate(self) -> float:
        return self.near_count / self.near_checked if self.near_checked else 0.0

    def to_json(self) -> JsonObject:
        return {
            "path": self.path, "format": self.format, "size": self.size, "records": self.records,
            "complete": self.complete, "note": self.note, "unparsed": self.unparsed,
            "overflow_fields": self.overflow_fields,
            "duplicates": {"sampled": self.dup_sampled, "exact": self.dup_count,
                           "exact_rate": self.dup_rate, "near_checked": self.near_checked,
                           "near": self.near_count, "near_rate": self.near_rate},
            "record_hashes": self.record_hashes.to_json(),
            "fields": {name: self.fields[name].to_json() for name in sorted(self.fields)},
        }

    @classmethod
    def from_json(cls, d: JsonObject, options: ProfileOptions) -> ShardProfile:
        dup = d["duplicates"]
        return cls(
            path=str(d["path"]), format=str(d["format"]), size=int(d["size"]),
            records=int(d["records"]), complete=bool(d["complete"]), note=str(d["note"]),
            unparsed=int(d["unparsed"]), overflow_fields=int(d.get("overflow_fields", 0)),
            fields={str(k): FieldStats.from_json(v) for k, v in d["fields"].items()},
            dup_sampled=int(dup["sampled"]), dup_count=int(dup["exact"]),
            near_checked=int(dup["near_checked"]), near_count=int(dup["near"]),
            record_hashes=BottomK.from_json(d["record_hashes"]), options=options,
        )


def merge_shards(shards: Iterable[ShardProfile], path: str = "*") -> ShardProfile:
    """One profile for several shards (sums and merged sketches)."""
    out = ShardProfile(path=path)
    formats: set[str] = set()
    for s in shards:
        formats.add(s.format)
        out.options = s.options
        out.size += s.size
        out.records += s.records
        out.complete = out.complete and s.complete
        out.unparsed += s.unparsed
        out.overflow_fields += s.overflow_fields
        out.dup_sampled += s.dup_sampled
        out.dup_count += s.dup_count
        out.near_checked += s.near_checked
        out.near_count += s.near_count
        out.record_hashes.merge(s.record_hashes)
        for name, stats in s.fields.items():
            out.field_stats(name).merge(stats)
    out.format = "+".join(sorted(formats)) if len(formats) > 1 else next(iter(formats), "other")
    return out


@dataclass
class DatasetProfile:
    root: str
    shards: list[ShardProfile] = field(default_factory=list)
    options: ProfileOptions = field(default_factory=ProfileOptions)
    sketches: int = SKETCHES

    def shard(self, path: str) -> ShardProfile | None:
        return next((s for s in self.shards if s.path == path), None)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.shards)

    def merged(self) -> ShardProfile:
        return merge_shards(self.shards)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "sketches": self.sketches, "root": self.root,
                "options": self.options.to_json(),
                "records": self.records,
                "shards": [s.to_json() for s in sorted(self.shards, key=lambda s: s.path)]}

    @classmethod
    def from_json(cls, d: JsonObject) -> DatasetProfile:
        schema = d.get("schema")
        if not isinstance(schema, str) or not schema.startswith("ckptrescue.profile/"):
            raise UsageError("not a ckptrescue dataset profile (no 'schema' key)")
        if schema.split("/", 1)[1].split(".")[0] != SCHEMA.split("/", 1)[1]:
            raise UsageError(f"profile schema {schema} is not supported (this kit reads {SCHEMA})")
        options = ProfileOptions.from_json(d["options"])
        return cls(str(d["root"]), [ShardProfile.from_json(s, options) for s in d["shards"]],
                   options, int(d.get("sketches", 1)))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False, allow_nan=False) + "\n"


def save(profile: DatasetProfile, path: str | Path) -> None:
    """Replaced atomically: a baseline half written is not a baseline."""
    from ckptrescue.record.atomic import write_atomic

    write_atomic(path, profile.dumps().encode())


def load(path: str | Path) -> DatasetProfile:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the profile: {exc}") from exc
    try:
        return DatasetProfile.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: malformed profile: {type(exc).__name__}: {exc}") from exc
