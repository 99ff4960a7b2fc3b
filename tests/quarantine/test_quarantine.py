"""Quarantine lists from real audits and verifies, consumed by the real loaders' APIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptrescue.datasets.quarantine import Quarantine
from ckptrescue.datasets.quarantine.listing import build
from ckptrescue.datasets.verify import verify_dataset
from fixtures.datasets import tree_digest, truncate, write_jsonl, write_webdataset_tar


@pytest.fixture()
def damaged(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    root = tmp_path / "data"
    root.mkdir()
    write_webdataset_tar(root / "shard-0.tar")
    write_webdataset_tar(root / "shard-1.tar")
    write_webdataset_tar(root / "shard-2.tar")
    truncate(root / "shard-1.tar", (root / "shard-1.tar").stat().st_size // 2)
    for name in ("part-0.jsonl", "part-1.jsonl"):
        write_jsonl(root / name, lines=20)
    lines = (root / "part-1.jsonl").read_bytes().split(b"\n")
    lines[5] = b'{"id": 5, "text": '  # a torn line
    (root / "part-1.jsonl").write_bytes(b"\n".join(lines))
    before = tree_digest(root)
    verify = verify_dataset(root).to_json()
    assert tree_digest(root) == before
    return root, verify


def test_built_from_a_verify_saved_and_loaded(damaged: tuple[Path, dict], tmp_path: Path
                                              ) -> None:
    root, verify = damaged
    q = build(str(root), verifies=[verify])
    assert set(q.files) == {"shard-1.tar"}  # truncated tar: the shard goes whole
    assert [(r.path, r.index) for r in q.records] == [("part-1.jsonl", 5)]
    q.save(tmp_path / "q.json", tmp_path / "q.txt")
    again = Quarantine.load(tmp_path / "q.json")
    assert again.to_json() == q.to_json()
    assert (tmp_path / "q.txt").read_text() == "shard-1.tar\n"
    assert json.loads((tmp_path / "q.json").read_text())["counts"] == {"files": 1, "records": 1}
    assert not again.keep(root / "shard-1.tar") and again.keep("shard-0.tar")
    assert not again.keep("part-1.jsonl", index=5) and again.keep("part-1.jsonl", index=6)


def test_an_audit_quarantines_whole_files(tmp_path: Path) -> None:
    audit = {"files": [{"path": "a.bin", "status": "corrupted"},
                       {"path": "b.bin", "status": "ok"},
                       {"path": "c.bin", "status": "missing"},
                       {"path": "d.bin", "status": "new"}]}
    q = build("/data", audits=[audit])
    assert sorted(q.files) == ["a.bin", "c.bin"]
    assert q.keep("/data/b.bin") and q.keep("d.bin") and not q.keep("/data/a.bin")


def test_a_torch_dataset_wrapper_skips_the_bad_line(damaged: tuple[Path, dict]) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    from ckptrescue.datasets.quarantine.torch_data import QuarantinedDataset, QuarantinedIterable

    root, verify = damaged
    q = build(str(root), verifies=[verify])
    items = [(str(root / name), i, line) for name in ("part-0.jsonl", "part-1.jsonl")
             for i, line in enumerate((root / name).read_bytes().splitlines())]

    class Lines(torch_data.Dataset):  # type: ignore[misc,name-defined]
        def __len__(self) -> int:
            return len(items)

        def __getitem__(self, i: int) -> dict[str, object]:
            return json.loads(items[i][2])  # type: ignore[no-any-return]

    wrapped = QuarantinedDataset(Lines(), q, lambda i: (items[i][0], items[i][1], None))
    assert len(wrapped) == 39 and wrapped.skipped == 1
    loader = torch_data.DataLoader(wrapped, batch_size=8, collate_fn=list)
    ids = [row["id"] for batch in loader for row in batch]  # every item parses
    assert ids.count(5) == 1 and len(ids) == 39

    stream = QuarantinedIterable(iter(items), q, lambda item: (item[0], item[1], None))
    assert len([json.loads(x[2]) for x in stream]) == 39 and stream.skipped == 1


def test_webdataset_pipeline_drops_bad_shards_and_samples(damaged: tuple[Path, dict]) -> None:
    wds = pytest.importorskip("webdataset")
    from ckptrescue.datasets.quarantine.webdataset import sample_filter, shard_urls

    root, verify = damaged
    q = build(str(root), verifies=[verify])
    q.add_record("shard-2.tar", index=None, key="sample00003", offset=None,
                 reason="caption mislabelled")
    urls = shard_urls([str(root / f"shard-{i}.tar") for i in range(3)], q)
    assert urls == [str(root / "shard-0.tar"), str(root / "shard-2.tar")]
    keys = [s["__key__"] for s in wds.WebDataset(urls, shardshuffle=False)
            .select(sample_filter(q))]
    assert len(keys) == 23 and "sample00003" in keys  # shard-0's sample00003 stays
    assert keys.count("sample00003") == 1


def test_hugging_face_filter_drops_the_bad_row(damaged: tuple[Path, dict]) -> None:
    datasets = pytest.importorskip("datasets")
    from ckptrescue.datasets.quarantine.hf import hf_filter

    root, verify = damaged
    q = build(str(root), verifies=[verify])
    rows = {"source": [], "line": [], "text": []}
    for name in ("part-0.jsonl", "part-1.jsonl"):
        for i, line in enumerate((root / name).read_bytes().splitlines()):
            rows["source"].append(name)
            rows["line"].append(i)
            rows["text"].append(line.decode())
    ds = datasets.Dataset.from_dict(rows)
    kept = ds.filter(hf_filter(q, path_column="source", index_column="line"))
    assert len(kept) == 39
    assert not any(r["source"] == "part-1.jsonl" and r["line"] == 5 for r in kept)


def test_a_malformed_list_is_a_one_line_error(tmp_path: Path) -> None:
    from ckptrescue.errors import UsageError

    bad = tmp_path / "q.json"
    bad.write_text('{"schema": "something-else"}')
    with pytest.raises(UsageError, match="not a quarantine list"):
        Quarantine.load(bad)
    bad.write_text('{"schema": "ckptrescue.datasets.quarantine/1", "files": [{"nopath": 1}]}')
    with pytest.raises(UsageError, match="malformed"):
        Quarantine.load(bad)


def test_a_list_that_cannot_be_placed_leaves_the_pair_as_it_was(tmp_path: Path) -> None:
    """A path that cannot take the plain list is found before either file is written: the
    JSON and the list stay as they were (a loader never reads a new JSON beside an old or
    half-written path list), and no temp file stays."""
    old = build("/data", audits=[{"files": [{"path": "a.bin", "status": "corrupted"}]}])
    old.save(tmp_path / "q.json", tmp_path / "q.paths")
    before = (tmp_path / "q.json").read_bytes(), (tmp_path / "q.paths").read_bytes()
    new = build("/data", audits=[{"files": [{"path": "b.bin", "status": "missing"}]}])
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(IsADirectoryError):
        new.save(tmp_path / "q.json", tmp_path / "elsewhere")
    assert ((tmp_path / "q.json").read_bytes(), (tmp_path / "q.paths").read_bytes()) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    new.save(tmp_path / "q.json", tmp_path / "q.paths")
    assert (tmp_path / "q.paths").read_text() == "b.bin\n"
