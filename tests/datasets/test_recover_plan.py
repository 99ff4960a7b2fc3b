"""recover --plan and --clean-view: the swap-back script is run for real (bash) on a copy of the
damaged dataset, whose manifest then passes ``sha256sum -c``; hostile names (spaces, newlines,
leading dashes, shell syntax, non-UTF-8 bytes, bidi controls) survive quoting; the clean view is a
symlink tree that ``sha256sum -c`` checks inside it; the evidence is byte-identical throughout.

Every file's bytes come from integer generators."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.datasets.actions.recovery import Recover
from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.outputs import RecoverOutput
from ckptrescue.datasets.recover import recover
from ckptrescue.datasets.recover_plan import bash_word, comment_text, verify_view
from ckptrescue.datasets.walk import from_json_path, to_json_path
from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.errors import UsageError
from fixtures.datasets import tree_digest

HOSTILE = [
    b"with space/file name.txt",
    b"-rf --no-preserve-root",
    b"-dir/-x",
    b"dir/new\nline.bin",
    b"bad\xff\xfe-not-utf8.bin",
    b"quote's $(touch PWNED) `touch PWNED2`; touch PWNED3.bin",
    b"back\\slash\\n.bin",
    b"\xe2\x80\xaeevil-rlo.txt",
    b"tab\there\r.bin",
    b"gone-dir/deep/missing.bin",
]
PLAIN = [b"plain/a.bin", b"plain/b.bin", b"ok/untouched.bin"]


def _data(i: int, size: int) -> bytes:
    return bytes((i * 31 + k * 7 + (k >> 8)) % 251 for k in range(size))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _p(root: Path, rel: bytes) -> bytes:
    return os.path.join(os.fsencode(root), rel)  # noqa: PTH118


def _write(root: Path, rel: bytes, data: bytes) -> None:
    path = _p(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)  # noqa: PTH103, PTH120
    with open(path, "wb") as fh:
        fh.write(data)


def _read(root: Path, rel: bytes) -> bytes:
    with open(_p(root, rel), "rb") as fh:
        return fh.read()


def _run(argv: list[str | bytes], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, timeout=120, check=False,
                          env={"PATH": os.environ["PATH"], "LC_ALL": "C"})


def _names_under(root: Path) -> set[bytes]:
    out = set()
    for dirpath, _dirs, files in os.walk(os.fsencode(root)):
        out |= {os.path.relpath(os.path.join(dirpath, f), os.fsencode(root))  # noqa: PTH118
                for f in files}
    return out


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, object]:
    """A dataset with hostile names; a manifest of its good state; one snapshot of it; then every
    hostile file and plain/a.bin damaged (flipped, truncated, deleted, a whole directory gone)."""
    root = tmp_path / "ds"
    good = {}
    for i, rel in enumerate(HOSTILE + PLAIN):
        data = _data(i, 3000 + 517 * i)
        _write(root, rel, data)
        good[rel] = data
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    snaps = tmp_path / "snapshots"
    shutil.copytree(root, snaps / "2024-05-01")
    for i, rel in enumerate([*HOSTILE, b"plain/a.bin"]):
        path = _p(root, rel)
        if rel.startswith(b"gone-dir/"):
            continue
        if i % 3 == 0:
            with open(path, "r+b") as fh:
                fh.seek(100)
                byte = fh.read(1)
                fh.seek(100)
                fh.write(bytes([byte[0] ^ 0x5A]))
        elif i % 3 == 1:
            os.truncate(path, 1000)
        else:
            os.unlink(path)
    shutil.rmtree(_p(root, b"gone-dir"))
    return {"root": root, "manifest": manifest, "snaps": snaps, "good": good}


def _copy(root: Path, dest: Path) -> Path:
    shutil.copytree(root, dest, symlinks=True)
    return dest


def test_the_plan_repairs_a_copy_with_hostile_names(hostile, tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    good: dict[bytes, bytes] = hostile["good"]  # type: ignore[assignment]
    evidence_before, snaps_before = tree_digest(root), tree_digest(snaps)
    to, plan = tmp_path / "recovered", tmp_path / "plans" / "swap-back.json"
    result = recover(root, manifest=manifest, source=snaps, to=to, plan=plan)
    assert result.ok, result.lines()
    damaged = set(HOSTILE) | {b"plain/a.bin"}
    assert {r.rel for r in result.recovered} == damaged

    data = json.loads(plan.read_text())
    assert data["schema"] == "ckptrescue.swap-back-plan/1" and data["unrecoverable"] == []
    assert data["script"] == str(tmp_path / "plans" / "swap-back.sh") == result.plan_script
    by = {from_json_path(e["path"]): e for e in data["entries"]}
    assert set(by) == damaged
    for rel, e in by.items():
        assert from_json_path(e["target"]) == _p(root, rel)
        assert from_json_path(e["replacement"]) == _p(to, rel)
        assert e["source"] == "snapshot 2024-05-01"
        assert e["sha256"] == e["expected_sha256"] == _sha(good[rel])
        assert e["size"] == len(good[rel])
    assert by[b"gone-dir/deep/missing.bin"]["damage"] == "missing"
    assert result.to_json()["plan"] == data["entries"]

    script = Path(data["script"]).read_bytes()
    # nothing in the script but printable text and newlines: no raw control byte from a name
    assert all(b >= 0x20 or b == 0x0A for b in script), "raw control byte in the script"
    assert b"\xff" not in script and "\u202e".encode() not in script
    assert script.count(b"\nswap_back ") == len(damaged)

    copy = _copy(root, tmp_path / "copy")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    applied = _run(["bash", str(plan.with_suffix(".sh")), str(copy)], cwd)
    assert applied.returncode == 0, applied.stderr.decode(errors="replace")
    assert f"{len(damaged)} installed, 0 already in place".encode() in applied.stdout
    check = _run(["sha256sum", "-c", "--strict", str(manifest)], copy)
    assert check.returncode == 0, check.stdout.decode(errors="replace")
    assert check.stdout.count(b": OK\n") == len(HOSTILE) + len(PLAIN)
    assert _names_under(copy) == set(good)  # no temporary file, nothing else
    assert not list(cwd.iterdir())
    assert not {p.name for p in tmp_path.rglob("*")} & {"PWNED", "PWNED2", "PWNED3.bin"}
    # the kit's own audit agrees; run again: everything is already in place
    assert audit(copy, manifest).ok
    again = _run(["bash", str(plan.with_suffix(".sh")), str(copy)], cwd)
    assert again.returncode == 0 and b"0 installed, 11 already in place" in again.stdout
    assert tree_digest(root) == evidence_before and tree_digest(snaps) == snaps_before


def test_bash_words_give_back_the_exact_bytes(tmp_path: Path) -> None:
    names = [*HOSTILE, b"a", b"-", b"--", b"$HOME", b"*", b"~x", b"\x01\x7f\x80"]
    script = "".join(f"printf '%s\\0' {bash_word(n)}\n" for n in names)
    out = _run(["bash", "-c", script], tmp_path)
    assert out.returncode == 0 and out.stdout.split(b"\0")[:-1] == names
    assert comment_text("a\nrm -rf /\r\u202e") == "a\\x0arm -rf /\\x0d\\u202e"


def test_a_replacement_changed_after_the_plan_is_never_installed(hostile,
                                                                 tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    to, plan = tmp_path / "r", tmp_path / "plan.json"
    recover(root, manifest=manifest, source=snaps, to=to, plan=plan)
    first = sorted(set(HOSTILE) | {b"plain/a.bin"})[0]  # the script goes in name order
    victim = _p(to, first)
    with open(victim, "r+b") as fh:
        fh.write(b"\0")
    copy = _copy(root, tmp_path / "copy")
    before = tree_digest(copy)
    proc = _run(["bash", str(tmp_path / "plan.sh"), str(copy)], tmp_path)
    assert proc.returncode != 0
    assert b"SHA-256 differs from the plan; nothing installed" in proc.stderr
    assert tree_digest(copy) == before  # stopped at the first file: nothing touched


@pytest.mark.parametrize("signal", ["TERM", "KILL"])
def test_an_interrupted_apply_never_leaves_a_half_written_file(hostile, tmp_path: Path,
                                                               signal: str) -> None:
    """The script is killed after the first copy reached its temporary name, before the rename
    (a ``sync`` on PATH that signals the script): the target keeps its old bytes; TERM runs the
    cleanup trap, KILL leaves only the dot-named temporary; a rerun finishes the job."""
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    recover(root, manifest=manifest, source=snaps, to=tmp_path / "r", plan=tmp_path / "p.json")
    copy = _copy(root, tmp_path / "copy")
    first = sorted({*HOSTILE, b"plain/a.bin"})[0]  # missing in the copy: its name stays free
    assert first == b"-dir/-x" and not os.path.lexists(_p(copy, first))
    before = tree_digest(copy)
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "sync").write_text(f"#!/bin/sh\nkill -{signal} $PPID\nsleep 1\n")
    (fake / "sync").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "LC_ALL": "C"}
    killed = subprocess.run(["bash", str(tmp_path / "p.sh"), str(copy)], capture_output=True,
                            timeout=60, check=False, env=env)
    assert killed.returncode != 0
    assert not os.path.lexists(_p(copy, first))
    extra = _names_under(copy) - _names_under(root)
    if signal == "TERM":
        assert extra == set() and tree_digest(copy) == before
    else:
        [leftover] = extra
        assert leftover.startswith(b"-dir/.ckptrescue-swap.")
    done = _run(["bash", str(tmp_path / "p.sh"), str(copy)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert _run(["sha256sum", "-c", "--quiet", str(manifest)], copy).returncode == 0


@pytest.mark.parametrize("signal", ["TERM", "INT", "HUP"])
def test_a_signal_never_leaves_the_temporary_behind_in_many_runs(hostile, tmp_path: Path,
                                                                 signal: str) -> None:
    """The same interruption, 40 times over, 20 at once: bash killed by an untrapped TERM
    skipped its EXIT trap about once in a hundred runs (found in CI); the script turns each
    catchable signal into an exit, so the cleanup runs every time."""
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    recover(root, manifest=manifest, source=snaps, to=tmp_path / "r", plan=tmp_path / "p.json")
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "sync").write_text(f"#!/bin/sh\nkill -{signal} $PPID\nexec sleep 1 >&- 2>&-\n")
    (fake / "sync").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "LC_ALL": "C"}
    before = tree_digest(root)
    copies = [_copy(root, tmp_path / f"copy{n}") for n in range(40)]
    for batch in range(0, len(copies), 20):
        runs = [subprocess.Popen(["bash", str(tmp_path / "p.sh"), str(c)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for c in copies[batch:batch + 20]]
        assert all(r.wait(timeout=60) != 0 for r in runs)
    left = {c.name: sorted(_names_under(c) - _names_under(root)) for c in copies}
    assert {k: v for k, v in left.items() if v} == {}
    assert all(tree_digest(c) == before for c in copies)


def test_a_target_directory_leading_outside_the_root_is_refused(hostile,
                                                                tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    to, plan = tmp_path / "r", tmp_path / "plan.json"
    recover(root, manifest=manifest, source=snaps, to=to, plan=plan)
    copy = _copy(root, tmp_path / "copy")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(copy / "plain")
    (copy / "plain").symlink_to(outside)  # planted after the plan: plain/a.bin would escape
    proc = _run(["bash", str(tmp_path / "plan.sh"), str(copy)], tmp_path)
    assert proc.returncode != 0 and b"plain/a.bin: its directory leads outside" in proc.stderr
    assert not list(outside.iterdir())


def test_a_plan_when_nothing_could_be_recovered(hostile, tmp_path: Path) -> None:
    root, manifest = hostile["root"], hostile["manifest"]
    empty = tmp_path / "empty-snapshots"
    (empty / "s1").mkdir(parents=True)
    plan = tmp_path / "plan.json"
    result = recover(root, manifest=manifest, source=empty, to=tmp_path / "r", plan=plan)
    assert not result.recovered and len(result.unrecovered) == len(HOSTILE) + 1
    data = json.loads(plan.read_text())
    assert data["entries"] == [] and result.plan == []
    assert {from_json_path(u["path"]) for u in data["unrecoverable"]} == \
        set(HOSTILE) | {b"plain/a.bin"}
    script = (tmp_path / "plan.sh").read_bytes()
    listed = [line for line in script.split(b"\n") if line.startswith(b"#   ")]
    assert len(listed) == len(HOSTILE) + 1  # one comment line each, even for a name with \n
    assert b"#   dir/new\\x0aline.bin (corrupted): no version matches" in script
    assert b"#   bad\\xff\\xfe-not-utf8.bin" in script
    copy = _copy(root, tmp_path / "copy")
    before = tree_digest(copy)
    proc = _run(["bash", str(tmp_path / "plan.sh"), str(copy)], tmp_path)
    assert proc.returncode == 0 and b"0 installed, 0 already in place" in proc.stdout
    assert tree_digest(copy) == before
    assert [f.code for f in result.findings()].count("RC003") == 1


def test_a_plan_from_an_earlier_audit(hostile, tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    report = tmp_path / "audit.json"
    report.write_text(json.dumps(audit(root, manifest).to_json()))
    before = tree_digest(root)
    plan = tmp_path / "plan.json"
    result = recover(root, manifest=manifest, source=snaps, to=tmp_path / "r",
                     audit_report=report, plan=plan, clean_view=tmp_path / "view")
    assert result.ok and len(json.loads(plan.read_text())["entries"]) == len(HOSTILE) + 1
    copy = _copy(root, tmp_path / "copy")
    assert _run(["bash", str(tmp_path / "plan.sh"), str(copy)], tmp_path).returncode == 0
    assert _run(["sha256sum", "-c", "--quiet", str(manifest)], copy).returncode == 0
    assert result.clean_view_files == len(HOSTILE) + len(PLAIN)
    assert tree_digest(root) == before


@pytest.mark.parametrize("kind", ["quick", "sample"])
def test_the_clean_view_needs_a_full_audit(hostile, tmp_path: Path, kind: str) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    partial = audit(root, manifest, quick=True) if kind == "quick" else \
        audit(root, manifest, sample="50%", seed=3)
    report = tmp_path / "audit.json"
    report.write_text(json.dumps(partial.to_json()))
    with pytest.raises(UsageError, match="--clean-view needs a full audit"):
        recover(root, manifest=manifest, source=snaps, to=tmp_path / "r", audit_report=report,
                clean_view=tmp_path / "view")
    assert not (tmp_path / "r").exists() and not (tmp_path / "view").exists()


def test_the_clean_view_links_verified_files_only(hostile, tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    good: dict[bytes, bytes] = hostile["good"]  # type: ignore[assignment]
    os.unlink(_p(snaps / "2024-05-01", b"-rf --no-preserve-root"))  # now unrecoverable
    with manifest.open("ab") as fh:  # a hostile manifest entry leading outside
        fh.write(_sha(b"x").encode() + b"  ../escaped.bin\n")
    (tmp_path / "escaped.bin").write_bytes(b"x")
    before = tree_digest(root)
    to, view = tmp_path / "r", tmp_path / "clean" / "view"
    result = recover(root, manifest=manifest, source=snaps, to=to, clean_view=view)
    assert tree_digest(root) == before
    left = {from_json_path(x["path"]): x["reason"] for x in result.clean_view_left_out}
    assert set(left) == {b"-rf --no-preserve-root", b"../escaped.bin"}
    assert left[b"-rf --no-preserve-root"].startswith("changed, not recovered:")
    linked = _names_under(view)
    assert linked == set(good) - {b"-rf --no-preserve-root"}
    for rel in linked:
        target = os.readlink(_p(view, rel))
        assert os.path.isabs(target)
        want = _p(to, rel) if rel in set(HOSTILE) | {b"plain/a.bin"} else _p(root, rel)
        assert target == want, rel
    assert not (tmp_path / "clean" / "escaped.bin").exists()
    view_manifest = tmp_path / "clean" / "view.sha256"
    assert result.clean_view_manifest == str(view_manifest)
    assert (tmp_path / "clean" / "view.sha256.jsonl").is_file()
    check = _run(["sha256sum", "-c", "--strict", str(view_manifest)], view)
    assert check.returncode == 0, check.stdout.decode(errors="replace")
    assert check.stdout.count(b": OK\n") == len(linked)
    found = verify_view(view, allowed=[str(root), str(to)])
    assert not found.bad and set(found.ok) == linked
    # a link planted into the view afterwards, and a file changed behind a link, are caught
    os.symlink(_p(root, b"ok/untouched.bin"), _p(view, b"planted"))
    os.unlink(_p(view, b"plain/b.bin"))
    os.symlink(os.fsencode(tmp_path / "escaped.bin"), _p(view, b"plain/b.bin"))
    found = verify_view(view, allowed=[str(root), str(to)])
    assert sorted(found.bad) == [
        (b"plain/b.bin", "links outside the dataset and the recovery directory"),
        (b"planted", "in the view but not in its manifest")]
    assert _read(root, b"ok/untouched.bin") == good[b"ok/untouched.bin"]


def test_outputs_in_the_wrong_place_are_refused_before_any_work(hostile,
                                                                tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    to = tmp_path / "r"
    before = tree_digest(root)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_bytes(b"1")
    cases = [
        ({"clean_view": root / "view"}, "overlaps the dataset"),
        ({"clean_view": snaps / "view"}, "overlaps the snapshots"),
        ({"clean_view": to / "plain"}, "collides with a replacement path"),
        ({"clean_view": to}, "collides with a replacement path"),
        ({"clean_view": busy}, "exists and is not empty"),
        ({"plan": root / "plan.json"}, "overlaps the dataset"),
        ({"plan": to / "plain" / "a.bin"}, "collides with a replacement path"),
        ({"plan": tmp_path / "v" / "p.json", "clean_view": tmp_path / "v"}, "inside the clean"),
        ({"plan": busy}, "names a directory"),
    ]
    for kwargs, message in cases:
        with pytest.raises(UsageError, match=message):
            recover(root, manifest=manifest, source=snaps, to=to, **kwargs)
        assert not to.exists(), kwargs
    assert tree_digest(root) == before
    # inside the recovery directory but clear of every replacement path: allowed
    result = recover(root, manifest=manifest, source=snaps, to=to, plan=to / "swap-back.json",
                     clean_view=to / "view.d")
    assert result.ok and (to / "swap-back.sh").is_file()


def test_the_plan_and_the_view_are_recorded_in_the_case(hostile, tmp_path: Path, case) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    plan, view = tmp_path / "p.json", tmp_path / "view"
    result = recover(root, manifest=manifest, source=snaps, to=tmp_path / "r", plan=plan,
                     clean_view=view)
    record(case, from_library(result))
    [logged] = list(case.records("dataset.recover.plan"))
    plan_sha = hashlib.sha256(plan.read_bytes()).hexdigest()
    script_sha = hashlib.sha256((tmp_path / "p.sh").read_bytes()).hexdigest()
    assert logged["artifacts"] == sorted([plan_sha, script_sha])
    assert logged["details"]["plan_sha256"] == plan_sha
    assert case.read_artifact(plan_sha) == plan.read_bytes()
    [logged_view] = list(case.records("dataset.recover.clean_view"))
    view_manifest = (tmp_path / "view.sha256").read_bytes()
    view_sha = hashlib.sha256(view_manifest).hexdigest()
    assert view_sha in logged_view["artifacts"] and len(logged_view["artifacts"]) == 2
    assert case.read_artifact(view_sha) == view_manifest
    assert logged_view["details"]["files"] == len(HOSTILE) + len(PLAIN)
    [info] = [f for f in case.findings() if f.code == "RC003"]
    assert info.evidence == str(plan) and info.evidence_sha256 == plan_sha
    out = RecoverOutput.from_json(result.to_json())
    assert out.plan_file == str(plan) and out.clean_view == str(view)
    assert [e["path"] for e in out.plan] == sorted(to_json_path(r) for r in
                                                    set(HOSTILE) | {b"plain/a.bin"})


def test_the_command_line(hostile, tmp_path: Path) -> None:
    root, manifest, snaps = hostile["root"], hostile["manifest"], hostile["snaps"]
    plan, view = tmp_path / "p.json", tmp_path / "view"
    args = ["recover", str(root), "--manifest", str(manifest), "--from", str(snaps),
            "--to", str(tmp_path / "r")]
    proc = invoke(*args, "--plan", str(plan), "--clean-view", str(view))
    assert proc.returncode == 0, proc.stderr
    assert f"plan:       {plan} (11 replacement(s))" in proc.stdout
    assert f"script:     {tmp_path / 'p.sh'} (review it" in proc.stdout
    assert f"clean view: {view} (13 verified file(s); manifest {tmp_path / 'view.sha256'})" \
        in proc.stdout
    again = invoke(*args, "--plan", str(plan), "--json")
    data = json.loads(again.stdout)
    assert again.returncode == 0 and data["plan_file"] == str(plan) and len(data["plan"]) == 11
    assert data["plan"][0]["source"] == "already in the recovery directory"
    preview = Recover().plan({"dir": str(root), "manifest": str(manifest), "source": str(snaps),
                              "to": "/r", "plan": str(plan), "clean_view": str(view)})
    assert preview[1] == (f"write the swap-back plan -> {plan} and its script -> "
                          f"{tmp_path / 'p.sh'} (for the operator; not applied)")
    assert preview[2].endswith(f"-> {view}, its manifest -> {tmp_path / 'view.sha256'}")
    refused = invoke(*args, "--clean-view", str(root / "v"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("ckptrescue: error:") and "overlaps the dataset" in \
        refused.stderr
