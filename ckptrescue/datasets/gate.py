"""Verify before load: a fast go/no-go for a job launcher (``ckptrescue gate``).

``gate_dataset(dir, manifest, ...)``: every manifest entry (or those under ``only`` prefixes —
a slice of the dataset) must exist as a regular file with the manifest's size and, when the
manifest's JSON-lines sidecar recorded one, its mtime (``strict_mtime``); then a seeded sample of
the entries is hashed in full (``sample``: a fraction, ``0 < s <= 1``, 1 meaning every file; or
``sample_count`` files; the seed — fresh at every launch unless given — and the chosen paths are
in the result, so anyone can redraw it). Fail closed: a file under the gated directory (or
prefix, or ``only`` slice) that the manifest does not list is ``unverified`` — the job would load
it unchecked — and fails the gate unless ``allow_unverified`` (the reason states the count).
Cost: one directory walk and one ``stat`` per entry plus the sampled bytes — meant for every
launch; the full audit is ``manifest audit``.

``gate_checkpoint(path)``: the static probe (structure, CRC-32 of every record, pickle safety,
shard/rank completeness) — ``intact`` passes; ``suspect`` passes only with ``allow_suspect``.

Both return a :class:`GateResult` (``passed``, one-line ``reason``, the problems).
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.model import JsonObject

DEFAULT_SAMPLE = 0.01
MIN_SAMPLE = 8  # a fraction of a small slice still hashes a few files


@dataclass
class GateResult:
    target: str
    passed: bool
    reason: str
    checked: int = 0
    hashed: list[str] = field(default_factory=list)
    hashed_bytes: int = 0
    seed: int | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    # files (objects) under the target that the manifest does not list: loaded unchecked
    unverified: list[str] = field(default_factory=list)  # the first MAX_LISTED
    unverified_count: int = 0
    allow_unverified: bool = False

    def to_json(self) -> JsonObject:
        return {"target": self.target, "passed": self.passed, "reason": self.reason,
                "checked": self.checked, "hashed": self.hashed,
                "hashed_bytes": self.hashed_bytes, "seed": self.seed,
                "problems": self.problems, "unverified": self.unverified,
                "unverified_count": self.unverified_count,
                "allow_unverified": self.allow_unverified}

    def conclude(self, passed_reason: str) -> None:
        """``passed`` and the one-line reason from the problems and the unverified files."""
        fail_unverified = self.unverified_count and not self.allow_unverified
        self.passed = not self.problems and not fail_unverified
        extra = ""
        if self.unverified_count:
            extra = (f"{self.unverified_count} file(s) not in the manifest (unverified: the job "
                     f"would load them unchecked), first: {self.unverified[0]}"
                     + ("; accepted with --allow-unverified" if self.allow_unverified else
                        "; --allow-unverified accepts them"))
        if self.passed:
            self.reason = passed_reason + (f"; {extra}" if extra else "")
        elif self.problems:
            first = self.problems[0]
            self.reason = (f"{len(self.problems)} problem(s), first: {first['path']}: "
                           f"{first['problem']}" + (f"; {extra}" if extra else ""))
        else:
            self.reason = extra


MAX_LISTED = 100


def _sample_size(total: int, sample: float, count: int | None = None) -> int:
    """How many of ``total`` files to hash: ``count`` when given, else the fraction ``sample``
    (1 means every file; at least :data:`MIN_SAMPLE` of a small slice)."""
    if count is not None:
        return max(0, min(total, count))
    if total == 0 or sample <= 0:
        return 0
    if sample >= 1:
        return total
    return min(total, max(MIN_SAMPLE, round(total * sample)))


def _check_sample(sample: float, count: int | None) -> None:
    from ckptrescue.errors import UsageError

    if count is not None and count < 0:
        raise UsageError(f"--sample-count {count}: a number of files, 0 or more")
    if not 0 <= sample <= 1:
        n = int(sample) if float(sample).is_integer() else "N"
        raise UsageError(f"--sample {sample}: a fraction between 0 and 1 (1 = every file); "
                         f"a number of files is --sample-count {n}")


def _in_slice(rel: bytes, prefixes: list[bytes]) -> bool:
    return not prefixes or any(rel == p or rel.startswith(p + b"/") for p in prefixes)


def _unlisted_local(root: Path, expected: dict[bytes, Any], prefixes: list[bytes],
                    manifest: str | os.PathLike[str]) -> tuple[int, list[str]]:
    """Regular files under ``root`` (in the slice) the manifest does not list; the manifest
    and its sidecar themselves excepted."""
    from ckptrescue.datasets.manifest_files import sidecar_path

    own = {os.path.realpath(manifest), os.path.realpath(sidecar_path(manifest))}
    count, shown = 0, []
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base)
            if rel in expected or not _in_slice(rel, prefixes):
                continue
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or os.path.realpath(path) in {
                    os.fsencode(p) for p in own}:
                continue
            count += 1
            if len(shown) < MAX_LISTED:
                shown.append(os.fsdecode(rel))
    return count, shown


def gate_dataset(directory: str | os.PathLike[str], manifest: str | os.PathLike[str], *,
                 sample: float = DEFAULT_SAMPLE, seed: int | None = None,
                 only: Sequence[str] = (), strict_mtime: bool = False,
                 endpoint_url: str | None = None, sample_count: int | None = None,
                 allow_unverified: bool = False) -> GateResult:
    from ckptrescue.datasets.audit import load_expected
    from ckptrescue.datasets.hashing import hash_file
    from ckptrescue.errors import EvidenceError

    _check_sample(sample, sample_count)
    if str(directory).startswith(("s3://", "s3:/")):
        return gate_s3(str(directory), manifest, sample=sample, seed=seed, only=only,
                       strict_mtime=strict_mtime, endpoint_url=endpoint_url,
                       sample_count=sample_count, allow_unverified=allow_unverified)
    root = Path(directory)
    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    expected, _has_sizes = load_expected(manifest)
    prefixes = [os.fsencode(p.rstrip("/")) for p in only]
    entries = [e for rel, e in sorted(expected.items())
               if not prefixes or any(rel == p or rel.startswith(p + b"/") for p in prefixes)]
    if seed is None:  # a new sample at every launch (recorded): nobody can predict it
        seed = int.from_bytes(os.urandom(4), "little")
    result = GateResult(target=str(root), passed=True, reason="", seed=seed,
                        allow_unverified=allow_unverified)
    if not entries:
        result.passed = False
        result.reason = "no manifest entry matches: nothing was checked"
        return result
    result.unverified_count, result.unverified = _unlisted_local(root, expected, prefixes,
                                                                 manifest)
    present = []
    for e in entries:
        path = os.path.join(os.fsencode(root), e.rel)
        rel = os.fsdecode(e.rel)
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            result.problems.append({"path": rel, "problem": "missing"})
            continue
        except OSError as exc:
            result.problems.append({"path": rel, "problem": f"cannot stat: {exc.strerror}"})
            continue
        result.checked += 1
        if not stat.S_ISREG(st.st_mode):
            result.problems.append({"path": rel, "problem": "not a regular file"})
        elif e.size is not None and st.st_size != e.size:
            result.problems.append({"path": rel, "problem":
                                    f"size {st.st_size}, manifest says {e.size}"})
        elif strict_mtime and e.mtime_ns is not None and st.st_mtime_ns != e.mtime_ns:
            result.problems.append({"path": rel, "problem": "modified since the manifest"})
        else:
            present.append((e, path))
    rng = random.Random(seed)  # noqa: S311 - reproducible from the recorded seed, by design
    for e, path in rng.sample(present, _sample_size(len(present), sample, sample_count)):
        outcome = hash_file(path)
        rel = os.fsdecode(e.rel)
        result.hashed.append(rel)
        result.hashed_bytes += outcome.size
        if outcome.sha256 is None:
            result.problems.append({"path": rel, "problem": f"unreadable: {outcome.error}"})
        elif outcome.sha256 != e.sha256:
            result.problems.append({"path": rel, "problem": "SHA-256 differs from the manifest"})
    result.conclude(f"{result.checked} file(s) present with the manifest's sizes; "
                    f"{len(result.hashed)} sampled file(s) hash as recorded (seed {seed})")
    return result


def gate_s3(url: str, manifest: str | os.PathLike[str], *, sample: float = DEFAULT_SAMPLE,
            seed: int | None = None, only: Sequence[str] = (), strict_mtime: bool = False,
            endpoint_url: str | None = None, sample_count: int | None = None,
            allow_unverified: bool = False) -> GateResult:
    """The gate for an ``s3://`` prefix: one listing instead of a stat per file, then the
    sampled objects checked against their stored full-object SHA-256, or a stored CRC the
    manifest also recorded (no bytes read), or downloaded and hashed when the store holds
    neither. An object whose ETag differs from the one
    the manifest's sidecar recorded was written again since: with ``strict_mtime`` that is a
    problem, otherwise it is always verified, in addition to the sample."""
    from ckptrescue.datasets.audit import load_expected
    from ckptrescue.datasets.manifest_files import read_jsonl_entries, sidecar_path
    from ckptrescue.datasets.s3dataset import (
        check_stored,
        hash_object,
        list_objects,
        normalise,
        read_client,
    )
    from ckptrescue.stores.s3.client import stats

    url = normalise(url)
    expected, _has_sizes = load_expected(manifest)
    side = sidecar_path(manifest)
    recorded = list(read_jsonl_entries(side)) if side.is_file() else []
    etags = {e.rel: e.etag for e in recorded if e.etag}
    crcs = {e.rel: e.checksums for e in recorded if e.checksums}
    del recorded
    prefixes = [os.fsencode(p.rstrip("/")) for p in only]
    entries = [e for rel, e in sorted(expected.items())
               if not prefixes or any(rel == p or rel.startswith(p + b"/") for p in prefixes)]
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    _check_sample(sample, sample_count)
    result = GateResult(target=url, passed=True, reason="", seed=seed,
                        allow_unverified=allow_unverified)
    if not entries:
        result.passed = False
        result.reason = "no manifest entry matches: nothing was checked"
        return result
    bucket, objects = list_objects(url, endpoint_url=endpoint_url)
    listed = {o.rel: o for o in objects}
    unlisted = sorted(rel for rel in listed if rel not in expected and _in_slice(rel, prefixes))
    result.unverified_count = len(unlisted)
    result.unverified = [os.fsdecode(r) for r in unlisted[:MAX_LISTED]]
    present, rewritten = [], []
    for e in entries:
        rel = os.fsdecode(e.rel)
        obj = listed.get(e.rel)
        if obj is None:
            result.problems.append({"path": rel, "problem": "missing"})
            continue
        result.checked += 1
        was = etags.get(e.rel)
        if e.size is not None and obj.size != e.size:
            result.problems.append({"path": rel, "problem":
                                    f"size {obj.size}, manifest says {e.size}"})
        elif was is not None and obj.etag is not None and obj.etag != was:
            if strict_mtime:
                result.problems.append({"path": rel, "problem": "written again since the "
                                        "manifest (ETag differs)"})
            else:
                rewritten.append((e, obj))
        else:
            present.append((e, obj))
    rng = random.Random(seed)  # noqa: S311 - reproducible from the recorded seed, by design
    chosen = rng.sample(present, _sample_size(len(present), sample, sample_count)) + rewritten
    client = read_client(endpoint_url)
    for e, obj in chosen:
        rel = os.fsdecode(e.rel)
        result.hashed.append(rel)
        found = check_stored(client, bucket, obj, (e.sha256, crcs.get(e.rel) or {}))
        if found is not None:
            actual: str | None = found[0].sha256
        else:
            outcome = hash_object(client, bucket, obj)
            actual = getattr(outcome, "sha256", None)
            if actual is None:
                result.problems.append({"path": rel, "problem":
                                        f"unreadable: {getattr(outcome, 'error', '')}"})
                continue
        if actual != e.sha256:
            result.problems.append({"path": rel, "problem": "SHA-256 differs from the manifest"})
    result.hashed_bytes = stats(client).bytes_downloaded
    result.conclude(f"{result.checked} object(s) present with the manifest's sizes; "
                    f"{len(result.hashed)} sampled object(s) match (seed {seed}; "
                    f"{result.hashed_bytes} bytes downloaded)")
    return result


def gate_checkpoint(path: str | os.PathLike[str], *, allow_suspect: bool = False) -> GateResult:
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    reports = probe_paths([Path(path)], numeric=True)
    allowed = {"intact", "suspect"} if allow_suspect else {"intact"}
    result = GateResult(target=str(path), passed=bool(reports), reason="", checked=len(reports))
    for r in reports:
        if str(r.verdict) not in allowed:
            worst = next((f for f in r.findings if str(f.severity) in ("critical", "error")),
                         r.findings[0] if r.findings else None)
            result.problems.append({"path": r.path, "problem": str(r.verdict),
                                    "finding": worst.title if worst else None})
    result.passed = bool(reports) and not result.problems
    if not reports:
        result.reason = "no checkpoint found"
    elif result.passed:
        result.reason = f"{len(reports)} checkpoint(s) verified: " + ", ".join(
            sorted({str(r.verdict) for r in reports}))
    else:
        p = result.problems[0]
        result.reason = f"{p['path']}: {p['problem']}" + (f" ({p['finding']})"
                                                          if p.get("finding") else "")
    return result
