"""The block (vectorised) profile path equals the value-by-value definitions it replaced.

Inputs are generated from SplitMix64 integers (fixtures/profiles.py), so every run and machine
sees the same values. Where a result is defined as a sketch of the values (counts, bins, types,
hashes, signatures), block and scalar results must be equal; moments are compared with a
relative tolerance of 1e-12 (block sums are correctly rounded, Welford's update is not).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.datasets.profiles import batch, minhash, vhash
from ckptrescue.datasets.profiles.build import _Builder, profile_shard
from ckptrescue.datasets.profiles.compare import compare
from ckptrescue.datasets.profiles.fieldstats import FieldStats
from ckptrescue.datasets.profiles.profile import SKETCHES, DatasetProfile, ShardProfile, load, save
from ckptrescue.datasets.profiles.readers import ReadState, _jsonl
from ckptrescue.datasets.profiles.sketches import BottomK, DupSample, Moments, TopK
from ckptrescue.datasets.profiles.values import Opaque, flatten, quote
from ckptrescue.errors import UsageError
from fixtures.profiles import SplitMix

MASK = (1 << 64) - 1


def _value(rng: SplitMix) -> Any:
    """A value of any kind the profiler meets, from integers only."""
    k = rng.below(20)
    r = rng.next()
    if k == 0:
        return None
    if k == 1:
        return bool(r & 1)
    if k == 2:
        return int(r % 7)
    if k == 3:
        return (r >> 1) - (1 << 62)
    if k == 4:
        return [1 << 64, -(1 << 70), 10**400][r % 3]  # past int64, past float
    if k == 5:
        return (r % 20001 - 10000) / 1000  # decimal-looking floats
    if k == 6:
        return [math.inf, -math.inf, math.nan, 0.0, -0.0, 2.0**60, 5e-324][r % 7]
    if k == 7:
        return ["", " ", "\t\n", "\u3000\u2028", "\x1c"][r % 5]  # empty per str.strip()
    if k == 8:
        return "w" * (r % 100) + "é" * (r % 3)  # short and long, ASCII and not
    if k == 9:
        return ["en", "de", "fr", 'q"uo\\te'][r % 4]
    if k == 10:
        return bytes(r % 9)
    if k == 11:
        return list(range(r % 4))
    if k == 12:
        return {} if r & 1 else {"deep": r % 3}
    if k == 13:
        return Opaque(int(r % 5), b"\x01" * 8)
    if k == 14:
        return (1, 2)
    return f"text {r % 50} " * (1 + r % 5)


def _values(seed: int, n: int) -> list[Any]:
    rng = SplitMix(seed)
    return [_value(rng) for _ in range(n)]


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


def _same_stats(block: FieldStats, scalar: FieldStats) -> None:
    bj, sj = block.to_json(), scalar.to_json()
    for key in ("present", "nulls", "empties", "nonfinite", "types"):
        assert bj[key] == sj[key], key
    assert bj["dists"].keys() == sj["dists"].keys()
    for m, d in bj["dists"].items():
        s = sj["dists"][m]
        assert d["hist"] == s["hist"], m
        assert (d["p50"], d["p99"]) == (s["p50"], s["p99"])
        bm, sm = d["moments"], s["moments"]
        assert (bm["n"], bm["min"], bm["max"]) == (sm["n"], sm["min"], sm["max"]), m
        assert _close(bm["mean"], sm["mean"]) and _close(bm["m2"], sm["m2"]), (m, bm, sm)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_block_field_stats_equal_value_by_value(seed: int) -> None:
    values = _values(seed, 3000)
    scalar, block = FieldStats(), FieldStats()
    for v in values:
        scalar.add(v, len)
    for i in range(0, len(values), 512):
        batch.add_values(block, values[i:i + 512], len)
    _same_stats(block, scalar)
    # top-k: exact while at most k distinct values were seen; always within the MG bound
    true: dict[str, int] = {}
    for key, c in scalar.top.counts.items():
        true[key] = c
    assert block.top.total == scalar.top.total
    if block.top.exact:
        assert block.top.counts == scalar.top.counts


def test_block_top_k_keeps_the_misra_gries_bound() -> None:
    rng = SplitMix(9)
    values = [int(rng.below(40) if rng.below(3) else rng.below(5000)) for _ in range(20000)]
    t = TopK(k=16)
    for i in range(0, len(values), 1000):
        counts: dict[str, int] = {}
        for v in values[i:i + 1000]:
            counts[str(v)] = counts.get(str(v), 0) + 1
        t.add_counts(counts)
    truth: dict[str, int] = {}
    for v in values:
        truth[str(v)] = truth.get(str(v), 0) + 1
    assert t.total == len(values) and not t.exact and len(t.counts) <= 16
    for key, c in truth.items():
        assert c - t.decrements <= t.counts.get(key, 0) <= c


def test_block_moments_are_order_independent_and_match_welford() -> None:
    rng = SplitMix(4)
    xs = [(rng.next() % 2_000_001 - 1_000_000) / 997 for _ in range(5000)]
    import numpy as np

    a, b = Moments.of(np.array(xs)), Moments.of(np.array(xs[::-1]))
    assert (a.n, a.mean, a.m2, a.min, a.max) == (b.n, b.mean, b.m2, b.min, b.max)
    w = Moments()
    for x in xs:
        w.add(x)
    assert _close(a.mean, w.mean) and _close(a.m2, w.m2) and (a.min, a.max) == (w.min, w.max)
    big = Moments.of(np.array([1e308, 1e308, 1e308]))  # fsum overflows: Welford instead
    assert big.n == 3 and big.mean == 1e308 and big.m2 == 0.0


def test_dup_sample_and_bottom_k_blocks_equal_one_by_one() -> None:
    import numpy as np

    rng = SplitMix(5)
    hashes = [rng.next() >> (rng.below(3) * 20) for _ in range(6000)]
    hashes += hashes[:700]  # duplicates
    one, many = DupSample(capacity=1000), DupSample(capacity=1000)
    k1, k2 = BottomK(k=64), BottomK(k=64)
    for h in hashes:
        one.add(h)
        k1.add(h)
    for i in range(0, len(hashes), 333):
        many.add_many(np.array(hashes[i:i + 333], dtype=np.uint64))
        k2.add_many(np.array(hashes[i:i + 333], dtype=np.uint64))
    assert (many.limit, many.seen) == (one.limit, one.seen)
    assert (many.sampled, many.duplicates) == (one.sampled, one.duplicates)
    assert k1.hashes == k2.hashes


def _segment_hash_reference(seg: bytes, tag: int) -> int:
    pad = seg + bytes(-len(seg) % 8)
    total = 0
    for k in range(len(pad) // 8):
        w = int.from_bytes(pad[8 * k: 8 * k + 8], "little")
        total = (total + vhash.mix_int(w ^ vhash.mix_int((k + tag) & MASK))) & MASK
    return vhash.mix_int(total ^ vhash.mix_int(len(seg) ^ tag))


def test_segment_hashes_equal_their_scalar_definition() -> None:
    import numpy as np

    rng = SplitMix(6)
    segs = [bytes(rng.below(256) for _ in range(rng.below(40))) for _ in range(300)]
    data = np.frombuffer(b"".join(segs), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in segs])])
    got = vhash.segment_hashes(data, offsets, vhash.TAG_BYTES).tolist()
    assert got == [_segment_hash_reference(s, vhash.TAG_BYTES) for s in segs]
    h, n = vhash.bytes_hashes(segs)
    assert h.tolist() == got and n.tolist() == [len(s) for s in segs]
    text = ["", "a", "é" * 9, "x" * 17]
    assert vhash.str_hashes(text)[0].tolist() == [
        _segment_hash_reference(t.encode(), vhash.TAG_STR) for t in text]


def test_value_hashes_are_canonical() -> None:
    h = vhash.value_hashes([1, 1.0, -0.0, 0, 2.5, "1", b"1", True, None, [1], 1 << 70, 1 << 70])
    h = h.tolist()
    assert h[0] == h[1] and h[2] == h[3]  # 1.0 is 1 (JSON numbers), -0.0 is 0
    assert len({h[0], h[4], h[5], h[6], h[7], h[8], h[9], h[10]}) == 8
    assert h[10] == h[11]
    mixed = _values(7, 500)
    one_by_one = [int(vhash.value_hashes([v])[0]) for v in mixed]
    assert vhash.value_hashes(mixed).tolist() == one_by_one


def _oph_reference(text: bytes) -> list[int]:
    """One-permutation MinHash with densification by rotation, one text, in plain Python."""
    empty = MASK
    bins = [empty] * minhash.PERMUTATIONS
    for i in range(len(text) - minhash.SHINGLE + 1):
        x = (int.from_bytes(text[i:i + minhash.SHINGLE], "little") + minhash._SEED) & MASK
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & MASK
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & MASK
        x ^= x >> 31
        b, v = x >> 58, x & ((1 << 52) - 1)
        bins[b] = min(bins[b], v)
    out = []
    for j in range(minhash.PERMUTATIONS):
        t = 0
        while bins[(j + t) % minhash.PERMUTATIONS] == empty:
            t += 1
        out.append(bins[(j + t) % minhash.PERMUTATIONS] + (t << 52))
    return out


def test_signatures_equal_scalar_one_permutation_minhash() -> None:
    rng = SplitMix(8)
    texts = [minhash.normalise(" ".join(f"w{rng.below(50)}" for _ in range(1 + rng.below(60))))
             for _ in range(60)] + [b"abcde", b"hello world"]
    texts = [t for t in texts if len(t) >= minhash.SHINGLE]
    sigs = minhash.signatures(texts)
    for t, s in zip(texts, sigs.tolist(), strict=True):
        assert s == _oph_reference(t)


def _near_reference(sigs: list[Any]) -> int:
    """The streaming LSH band tables (first record per band key), record by record."""
    tables: list[dict[bytes, int]] = [{} for _ in range(minhash.BANDS)]
    near = 0
    for i, sig in enumerate(sigs):
        found = False
        for band in range(minhash.BANDS):
            key = sig[band * minhash.ROWS:(band + 1) * minhash.ROWS].tobytes()
            other = tables[band].get(key)
            if other is None:
                tables[band][key] = i
            elif not found and (sigs[other] == sig).mean() >= minhash.JACCARD:
                found = True
        near += found
    return near


def test_near_count_equals_streaming_band_tables() -> None:
    rng = SplitMix(10)
    words = [f"v{i}" for i in range(300)]
    texts = []
    for _ in range(400):
        base = [words[rng.below(300)] for _ in range(30 + rng.below(30))]
        texts.append(" ".join(base))
        if rng.below(3) == 0:  # an edited copy: some near, some not
            edit = list(base)
            for _ in range(rng.below(12)):
                edit[rng.below(len(edit))] = words[rng.below(300)]
            texts.append(" ".join(edit))
    nd = minhash.NearDup()
    nd.add_many(texts[:250])
    for t in texts[250:]:
        nd.add(t)
    nd.finish()
    sigs = minhash.signatures([minhash.normalise(t) for t in texts])
    want = _near_reference(list(sigs))
    assert nd.checked == len(texts) and nd.near == want and 0 < want < len(texts)


def _jsonl_reference(data: bytes) -> tuple[list[Any], int]:
    """The previous reader: readline, strip, json.loads (bytes), skip blank lines."""
    out, bad = [], 0
    for line in data.splitlines(keepends=True) if b"\r" not in data else data.split(b"\n"):
        body = line.strip()
        if not body:
            continue
        try:
            out.append(flatten(json.loads(body)))
        except (ValueError, RecursionError):
            bad += 1
    return out, bad


def test_jsonl_block_reader_equals_line_by_line() -> None:
    import io

    lines = [b'{"a": 1, "b": {"c": "x"}}', b"", b"   ", b'1, 2', b"[3", b"4]", b'"s"',
             b'\x0c{"f": 1.5}\x0b', b'{"a": 2}\r', b"\xef\xbb\xbf{\"bom\": 1}", b'{"z": "\xff"}',
             b'{"nul": "\x00"}', b"nan", b"NaN", b"{} {}", b'{"deep": {"a": {"b": {"c": 1}}}}',
             b'{"u": "\xc3\xa9 \\u2028"}', b"null", b"[]", b"tru"] * 3
    for tail in (b"", b"\n"):
        data = b"\n".join(lines) + tail
        want, bad = _jsonl_reference(data.replace(b"\r", b""))
        for raw in (False, True):
            state = ReadState()
            got = [r for block in _jsonl(io.BytesIO(data), state, raw) for r in block]
            if raw:
                got = [flatten(v) for v in got]
            assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
            assert state.unparsed == bad and state.stopped is None


def _records(seed: int, n: int) -> list[dict[str, Any]]:
    rng = SplitMix(seed)
    out = []
    for i in range(n):
        out.append({
            "id": f"r{i:05d}", "label": int(rng.below(5)) if rng.below(9) else None,
            "text": [" ", "", "hello there " * (1 + rng.below(9)), "é and ü " * 3, "\u3000\u2028",
                     "\x85", " a", "\x1c", "é" * (30 + rng.below(50)), "x" * (60 + rng.below(9)),
                     "\u2000b"][rng.below(11)],
            "score": (rng.below(20000) - 10000) / 1000 if rng.below(7) else None,
            "flag": bool(rng.below(2)), "blob": bytes(rng.below(6)),
            "tags": ["a"] * rng.below(3),
            "meta": {"lang": ["en", "de"][rng.below(2)], "src": {"n": int(rng.below(3))}},
        })
    return out


def _profile_of(items: list[Any]) -> ShardProfile:
    prof = ShardProfile(path="x")
    b = _Builder(prof, None, None, None)
    for item in items:
        b.add(item)
    b.finish()
    return prof


def test_arrow_columns_equal_the_row_path() -> None:
    import pyarrow as pa

    recs = _records(11, 3000)
    table = pa.Table.from_pylist(recs)
    rows = _profile_of([flatten(r) for r in table.to_pylist()])
    cols = _profile_of([batch.ArrowBatch(b) for b in table.to_batches(max_chunksize=700)])
    raw = _profile_of([batch.JsonBlock(recs[i:i + 450]) for i in range(0, 3000, 450)])
    assert set(cols.fields) == set(rows.fields) == set(raw.fields)
    for name in rows.fields:
        _same_stats(cols.fields[name], rows.fields[name])
        _same_stats(raw.fields[name], rows.fields[name])
        assert cols.fields[name].top.to_json() == rows.fields[name].top.to_json(), name
    for p in (cols, raw):
        assert p.records == rows.records == 3000
        assert p.record_hashes.hashes == rows.record_hashes.hashes
        assert (p.dup_sampled, p.dup_count) == (rows.dup_sampled, rows.dup_count)
        assert (p.near_checked, p.near_count) == (rows.near_checked, rows.near_count)


def test_jsonl_and_parquet_of_the_same_records_hash_alike(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [r | {"meta": {"lang": r["meta"]["lang"]}} for r in _records(12, 800)]
    for r in recs:
        r.pop("blob")  # JSON has no bytes
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "a.parquet", row_group_size=300)
    j, p = profile_shard(tmp_path / "a.jsonl"), profile_shard(tmp_path / "a.parquet")
    assert j.record_hashes.hashes == p.record_hashes.hashes
    assert {k: f.to_json()["types"] for k, f in j.fields.items()} == \
        {k: f.to_json()["types"] for k, f in p.fields.items()}


def test_struct_nulls_take_the_row_path() -> None:
    import pyarrow as pa

    recs = [{"m": {"a": 1}}, {"m": None}, {"m": {"a": None}}] * 20
    table = pa.Table.from_pylist(recs)
    cols = _profile_of([batch.ArrowBatch(b) for b in table.to_batches(max_chunksize=25)])
    rows = _profile_of([flatten(r) for r in table.to_pylist()])
    assert cols.to_json() == rows.to_json()
    assert cols.fields["m"].nulls == 20 and cols.fields["m.a"].present == 40


def test_compare_refuses_profiles_of_other_sketch_versions(tmp_path: Path) -> None:
    new = DatasetProfile(root="/x")
    save(new, tmp_path / "new.json")
    data = json.loads((tmp_path / "new.json").read_text())
    assert data["sketches"] == SKETCHES == 2
    del data["sketches"]  # a profile written before the key existed: version 1
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load(tmp_path / "old.json")
    assert old.sketches == 1 and load(tmp_path / "new.json").sketches == 2
    with pytest.raises(UsageError, match="different sketch versions"):
        compare(old, load(tmp_path / "new.json"))


def test_add_top_equals_adding_every_key() -> None:
    rng = SplitMix(13)
    for text in (True, False):
        a, b = TopK(k=8), TopK(k=8)
        for _ in range(60):
            counted: dict[Any, int] = {}
            for _ in range(rng.below(40)):
                v = rng.below(3) if rng.below(2) else rng.below(200)
                key: Any = ['a"', "b\\", "c"][v] if text and v < 3 else (f"t{v}" if text else v)
                counted[key] = counted.get(key, 0) + 1 + rng.below(2)
            batch.add_top(a, list(counted), list(counted.values()), text)
            b.add_counts({(quote(k) if text else str(k)): c for k, c in counted.items()})
            assert a.to_json() == b.to_json()
        assert not a.exact


def test_whitespace_is_what_str_strip_strips() -> None:
    import sys

    assert "".join(
        c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) == batch.WHITESPACE


def test_add_top_arrow_equals_adding_every_key() -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = SplitMix(14)
    for text in (True, False):
        a, b = TopK(k=8), TopK(k=8)
        for _ in range(60):
            vals: list[Any] = []
            for _ in range(rng.below(60)):
                v = rng.below(3) if rng.below(2) else rng.below(300)
                vals.append((['a"', "b\\", "c"][v] if v < 3 else f"t{v}") if text else v - 150)
            if not vals:
                continue
            vc = pc.value_counts(pa.array(vals, type=pa.string() if text else pa.int64()))
            batch.add_top_arrow(a, vc, text)
            counted: dict[str, int] = {}
            for v in vals:
                key = quote(v) if text else str(v)
                counted[key] = counted.get(key, 0) + 1
            b.add_counts(counted)
            assert a.to_json() == b.to_json()
        assert not a.exact


@pytest.mark.parametrize("ascii_only", [True, False])
def test_arrow_normalised_texts_equal_normalise_of_text_of(ascii_only: bool) -> None:
    import pyarrow as pa

    rng = SplitMix(15)
    parts = ["Hello", "WORLD", " ", "\t", "\x0b", "\x1c", "\r\n", "a" * 40, "Zz"]
    if not ascii_only:
        parts += ["\u3000", "Ärger", "İ", "ΣΑΣ"]
    cols: dict[str, list[Any]] = {"b": [], "a": [], "c": []}
    for i in range(600):
        for name in cols:
            if rng.below(9) == 0:
                cols[name].append(None)
            else:
                cols[name].append("".join(parts[rng.below(len(parts))]
                                          for _ in range(rng.below(6 if i % 50 else 900))))
    columns = [(name, None, pa.array(vals, pa.string())) for name, vals in cols.items()]
    got = batch.arrow_normalised_texts(columns)
    if not ascii_only:
        assert got is None
        return
    assert got is not None
    data, lengths = got
    want = [minhash.normalise(t) for t in batch.texts_of(
        [(n, None, v) for n, v in cols.items()], 600)]
    assert bytes(data) == b"".join(want) and lengths.tolist() == [len(w) for w in want]
    assert max(lengths.tolist()) == minhash.MAX_TEXT


def test_near_duplicates_alike_in_jsonl_and_parquet(tmp_path: Path) -> None:
    from fixtures.profiles import jsonl_line, shard_records, write_parquet

    recs = shard_records(3, 1, 3000)
    recs += [dict(r, id=r["id"] + "x") for r in recs[:400]]  # near copies (the id differs)
    (tmp_path / "a.jsonl").write_text("".join(jsonl_line(r) for r in recs))
    write_parquet(tmp_path / "a.parquet", recs)
    j, p = profile_shard(tmp_path / "a.jsonl"), profile_shard(tmp_path / "a.parquet")
    assert (j.near_checked, j.near_count) == (p.near_checked, p.near_count)
    assert p.near_checked == 3400 and 380 <= p.near_count <= 400


def test_normalise_ascii_equals_normalise() -> None:
    import numpy as np

    rng = SplitMix(16)
    alphabet = "aB \t\n\x0b\x0c\r\x1c\x1d\x1e\x1fZz.9"
    for _ in range(200):
        texts = ["".join(alphabet[rng.below(len(alphabet))] for _ in range(rng.below(25)))
                 for _ in range(1 + rng.below(8))]
        if rng.below(10) == 0:
            texts.append("Q" * 9000 + "  a ")
        raw = "".join(texts).encode("ascii")
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])])
        data, lengths = minhash.normalise_ascii(np.frombuffer(raw, dtype=np.uint8), offsets)
        want = [minhash.normalise(t) for t in texts]
        assert bytes(data) == b"".join(want) and lengths.tolist() == [len(w) for w in want]


def test_normalise_many_equals_normalise() -> None:
    rng = SplitMix(17)
    alphabet = ["Ab", " ", "\t", "\x1c", "\u3000", "İ", "ΣΑΣ ", "x" * 70]
    for ascii_only in (True, False):
        for _ in range(50):
            texts = ["".join(alphabet[rng.below(4 if ascii_only else len(alphabet))]
                             for _ in range(rng.below(12))) for _ in range(1 + rng.below(9))]
            data, lengths = minhash.normalise_many(texts)
            want = [minhash.normalise(t) for t in texts]
            assert bytes(data) == b"".join(want) and lengths.tolist() == [len(w) for w in want]
