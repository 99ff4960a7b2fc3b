"""Every shipped playbook loads, validates against the JSON Schema, dry-runs, and runs for real
through the CLI on real data (evidence hashed before and after where there is evidence)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.playbook import load
from ckptrescue.playbook.lint import lint
from ckptrescue.playbook.schema import json_schema
from ckptrescue.playbook.validate import schema_problems
from fixtures.det import det_bytes
from fixtures.storage import detach_own

SHIPPED = load.shipped()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_playbook(name: str, case: Path, **params: object) -> tuple[int, dict, str]:
    argv = ["playbook", "run", name, "--case", str(case), "--yes", "--json"]
    for key, value in params.items():
        argv += ["-p", f"{key}={value}"]
    res = invoke(*argv, env_extra={"AWS_ACCESS_KEY_ID": "testing",
                                   "AWS_SECRET_ACCESS_KEY": "testing"})
    try:
        data = json.loads(res.stdout)
    except ValueError:
        data = {}
    return res.returncode, data, res.stderr


def statuses(case: Path) -> dict[str, str]:
    out = {}
    for line in (case / "audit.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["action"] == "step.finished":
            out[rec["details"]["step"]] = rec["details"]["status"]
    return out


def test_the_expected_playbooks_ship() -> None:
    assert set(SHIPPED) >= {"triage", "preserve-block-device", "preserve-mounted-fs",
                            "preserve-s3-prefix", "inspect-xfs", "inspect-ext4", "inspect-zfs",
                            "verify-s3-prefix", "probe-checkpoints", "dataset-audit",
                            "full-incident", "inspect-zfs-member", "collect-host", "silent-failure",
                            "resume-checks", "hub-cache"}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_playbook_lints_and_validates(name: str) -> None:
    path = SHIPPED[name]
    assert schema_problems(path) == []
    book = load.load_file(path)
    assert book.name == name == path.stem
    assert lint(book) == []
    assert book.description.strip(), "every playbook says what it does"


def test_published_json_schema_matches_the_model(tmp_path: Path) -> None:
    res = invoke("playbook", "schema")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json_schema()
    committed = Path(__file__).resolve().parents[2] / "docs" / "playbook.schema.json"
    assert json.loads(committed.read_text()) == json_schema(), "regenerate docs (make docs)"


def test_triage_runs(tmp_path: Path) -> None:
    rc, out, err = run_playbook("triage", tmp_path / "case", volume=str(tmp_path), seconds=1)
    assert rc in (0, 1), err
    assert statuses(tmp_path / "case")["triage"] in {"ok", "findings"}
    assert (tmp_path / "case" / "report.html").exists()


@pytest.mark.needs_tool("mkfs.xfs", "xfs_db", "xfs_logprint", "xfs_repair")
def test_inspect_xfs_runs_and_changes_nothing(tmp_path: Path) -> None:
    img = tmp_path / "xfs.img"
    with open(img, "wb") as fh:
        fh.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", str(img)], check=True)
    before = sha256(img)
    rc, out, err = run_playbook("inspect-xfs", tmp_path / "case", target=str(img))
    assert rc in (0, 1), err
    st = statuses(tmp_path / "case")
    assert st["superblock"] == "ok" and st["log"] == "ok" and st["repair_dry_run"] == "ok"
    assert sha256(img) == before


@pytest.mark.needs_tool("mkfs.ext4", "dumpe2fs", "e2fsck")
def test_inspect_ext4_runs_and_changes_nothing(tmp_path: Path) -> None:
    img = tmp_path / "ext4.img"
    with open(img, "wb") as fh:
        fh.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    before = sha256(img)
    rc, out, err = run_playbook("inspect-ext4", tmp_path / "case", target=str(img))
    assert rc in (0, 1), err
    assert statuses(tmp_path / "case")["superblock"] == "ok"
    assert sha256(img) == before


def test_inspect_zfs_runs_or_names_the_missing_tool(tmp_path: Path) -> None:
    rc, out, err = run_playbook("inspect-zfs", tmp_path / "case", pool="tank")
    if shutil.which("zpool") is None:
        # ZFS cannot run on this machine: the run must fail cleanly, naming the tool
        assert rc == 4 and out["status"] == "failed" and out["failed_step"] == "status"
        audit = (tmp_path / "case" / "audit.jsonl").read_text()
        assert "zpool: not installed" in audit
    else:
        assert rc in (0, 1, 4)
    verify = invoke("case", "verify", str(tmp_path / "case"))
    assert verify.returncode == 0


@pytest.mark.privileged
@pytest.mark.needs_tool("ddrescue", "mkfs.ext4")
def test_preserve_block_device_images_with_simulated_bad_sectors(tmp_path: Path) -> None:
    img = tmp_path / "disk.img"
    with open(img, "wb") as fh:
        fh.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    before = sha256(img)
    badmap = tmp_path / "bad.map"
    size = img.stat().st_size
    badmap.write_text(f"0 +\n0x0 0x{1 << 20:x} +\n0x{1 << 20:x} 0x400 -\n"
                      f"0x{(1 << 20) + 0x400:x} 0x{size - (1 << 20) - 0x400:x} +\n")
    dest = Path("/dev/shm") / f"ckptrescue-test-{os.getpid()}"
    dest.mkdir(exist_ok=True)
    try:
        rc, out, err = run_playbook("preserve-block-device", tmp_path / "case", source=str(img),
                                    image_dest=str(dest), retries=1,
                                    simulate_bad_map=str(badmap))
        assert rc == 1, err  # bad sectors are a finding
        image_out = json.loads((tmp_path / "case" / "artifacts" / next(
            r["details"]["outputs_sha256"] for r in map(json.loads, (
                tmp_path / "case" / "audit.jsonl").read_text().splitlines())
            if r["action"] == "step.finished" and r["details"]["step"] == "image")).read_text())
        assert image_out["bad_ranges"] == [[1 << 20, (1 << 20) + 0x400]]
    finally:
        from ckptrescue.storage import writeblock

        writeblock.clear_immutable_tree(dest)  # the kit made its acquired image immutable
        shutil.rmtree(dest, ignore_errors=True)
    assert sha256(img) == before


@pytest.mark.privileged
@pytest.mark.needs_tool("mkfs.ext4", "rsync")
def test_preserve_mounted_fs_copies_and_verifies(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "run").mkdir(parents=True)
    (tree / "run" / "a.bin").write_bytes(det_bytes(10000, 1))
    (tree / "notes.txt").write_text("hello")
    img = tmp_path / "vol.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(img)], check=True)
    before = sha256(img)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    loop = subprocess.run(["losetup", "--read-only", "--find", "--show", str(img)],
                          capture_output=True, text=True, check=True).stdout.strip()
    dest = Path("/dev/shm") / f"ckptrescue-copy-{os.getpid()}"  # other media than /tmp
    try:
        subprocess.run(["mount", "-t", "ext4", "-o", "ro,noload", loop, str(mnt)], check=True)
        rc, out, err = run_playbook("preserve-mounted-fs", tmp_path / "case",
                                    mountpoint=str(mnt), dest=str(dest))
        assert rc in (0, 1), err
        assert (dest / "run" / "a.bin").read_bytes() == (tree / "run" / "a.bin").read_bytes()
        assert statuses(tmp_path / "case")["copy"] in {"ok", "findings"}
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        detach_own(loop, img)
        shutil.rmtree(dest, ignore_errors=True)
    assert sha256(img) == before


@pytest.fixture
def s3(tmp_path: Path):  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    server = start_local_s3()
    try:
        client = server.writer_client()
        client.create_bucket(Bucket="ckpts")
        client.put_bucket_versioning(Bucket="ckpts",
                                     VersioningConfiguration={"Status": "Enabled"})
        local = tmp_path / "local"
        local.mkdir()
        for name in ("a.bin", "b.bin"):
            data = det_bytes(3000, 2, name)
            (local / name).write_bytes(data)
            client.put_object(Bucket="ckpts", Key=f"run/{name}", Body=data,
                              ChecksumAlgorithm="SHA256")
        (local / "b.bin").write_bytes(b"x" + (local / "b.bin").read_bytes()[1:])
        yield server, local
    finally:
        server.stop()


def test_verify_s3_prefix_runs(tmp_path: Path, s3) -> None:  # noqa: ANN001
    server, local = s3
    rc, out, err = run_playbook("verify-s3-prefix", tmp_path / "case", url="s3://ckpts/run/",
                                local_dir=str(local), endpoint_url=server.endpoint_url)
    assert rc == 1, err
    art = tmp_path / "case" / "artifacts"
    outputs = [json.loads((art / r["details"]["outputs_sha256"]).read_text())
               for r in map(json.loads, (tmp_path / "case" / "audit.jsonl").read_text()
                            .splitlines())
               if r["action"] == "step.finished" and r["details"]["step"] == "verify_s3"][0]
    by_key = {o["key"]: o["status"] for o in outputs["objects"]}
    assert by_key == {"a.bin": "match", "b.bin": "mismatch"} or \
        by_key == {"run/a.bin": "match", "run/b.bin": "mismatch"}


def test_preserve_s3_prefix_runs(tmp_path: Path, s3) -> None:  # noqa: ANN001
    server, _ = s3
    rc, out, err = run_playbook("preserve-s3-prefix", tmp_path / "case", url="s3://ckpts/run/",
                                endpoint_url=server.endpoint_url)
    assert rc in (0, 1), err
    assert statuses(tmp_path / "case")["preserve"] in {"ok", "findings"}
    evidence = json.loads((tmp_path / "case" / "evidence.json").read_text())
    assert len(evidence) >= 2


def test_probe_checkpoints_runs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from fixtures.checkpoints import exact_tensor

    run = tmp_path / "run"
    run.mkdir()
    for step in (1, 2):
        torch.save({"model": {"w": exact_tensor(64, 64, seed=step)}, "step": step},
                   run / f"step-{step}.pt")
    data = bytearray((run / "step-2.pt").read_bytes())
    del data[len(data) // 2:]
    (run / "step-2.pt").write_bytes(bytes(data))
    before = {p.name: sha256(p) for p in run.iterdir()}
    rc, out, err = run_playbook("probe-checkpoints", tmp_path / "case", run_dir=str(run))
    assert rc == 1, err
    assert "resume from step-1.pt" in out["answer"] and "step-2.pt truncated" in out["answer"]
    assert {p.name: sha256(p) for p in run.iterdir()} == before


def test_dataset_audit_runs_and_recovers_from_snapshots(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"part-{i}.jsonl").write_text("".join(f'{{"i": {j}}}\n' for j in range(50)))
    manifest = tmp_path / "MANIFEST.sha256"
    manifest.write_text(subprocess.run(["sha256sum", "part-0.jsonl", "part-1.jsonl",
                                        "part-2.jsonl"], cwd=data, capture_output=True,
                                       text=True, check=True).stdout)
    snap = tmp_path / "snapshots" / "daily-1"
    shutil.copytree(data, snap)
    with open(data / "part-1.jsonl", "r+b") as fh:
        fh.seek(10)
        fh.write(b"X")
    rc, out, err = run_playbook("dataset-audit", tmp_path / "case", dir=str(data),
                                manifest=str(manifest), backups=str(tmp_path / "snapshots"),
                                recovery_dir=str(tmp_path / "recovered"))
    assert rc == 1, err
    # the answer says what the serious findings are, not "2 serious finding(s); see the report"
    assert "see the report" not in out["answer"], out["answer"]
    assert "dataset audit: part-1.jsonl corrupted" in out["answer"], out["answer"]
    assert "shards: part-1.jsonl damaged (line 2: does not parse" in out["answer"], out["answer"]
    assert (tmp_path / "recovered" / "part-1.jsonl").read_bytes() == \
        (snap / "part-1.jsonl").read_bytes()
    assert b"X" in (data / "part-1.jsonl").read_bytes(), "never writes into the dataset"


@pytest.mark.privileged
def test_inspect_zfs_member_reads_labels_everywhere(tmp_path: Path) -> None:
    """A real pool image (made by OpenZFS in the lab VM, copied while imported): the label step
    works without ZFS; where the ZFS module is missing the import step fails cleanly."""
    import lzma

    src = Path(__file__).resolve().parents[2] / "fixtures/transcripts/zfs/images"
    img = tmp_path / "member.img"
    img.write_bytes(lzma.decompress((src / "small-active.img.xz").read_bytes()))
    before = sha256(img)
    rc, out, err = run_playbook("inspect-zfs-member", tmp_path / "case", target=str(img))
    st = statuses(tmp_path / "case")
    assert st["labels"] == "findings"  # ZF006: never exported
    if not Path("/dev/zfs").exists():
        assert rc == 4 and out["failed_step"] == "mount", err
    else:
        assert rc in (0, 1), err
    assert sha256(img) == before
    verify = invoke("case", "verify", str(tmp_path / "case"))
    assert verify.returncode == 0
