"""The CLI as a user runs it: the real console script in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import (
    EXE,  # noqa: E402
    invoke,
    run_cli,
)


def run(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (exit codes and output as the console script gives them)."""
    res = invoke(*args)
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    return res


def test_case_lifecycle_and_verify_exit_codes(tmp_path: Path) -> None:
    c = tmp_path / "case"
    assert run("case", "new", str(c), "--title", "INC-1", "--examiner", "alice").returncode == 0
    shown = json.loads(run("case", "show", str(c), "--json").stdout)
    assert shown["manifest"]["title"] == "INC-1" and shown["manifest"]["examiner"] == "alice"
    assert run("case", "verify", str(c)).returncode == 0
    head = run("case", "seal", str(c)).stdout.strip()
    assert len(head) == 64
    ok = run("case", "verify", str(c), "--expect-head", head)
    assert ok.returncode == 0 and "OK" in ok.stdout
    lines = (c / "audit.jsonl").read_bytes().splitlines(keepends=True)
    (c / "audit.jsonl").write_bytes(b"".join(lines[:-1]))
    bad = run("case", "verify", str(c), "--expect-head", head)
    assert bad.returncode == 1 and "BROKEN" in bad.stdout


def test_exec_refusal_exits_3_with_one_line_reason_in_the_log(tmp_path: Path) -> None:
    c = tmp_path / "case"
    run("case", "new", str(c), check=True)
    res = run("exec", "--case", str(c), "--", "fsck", "-y", "/dev/loop0")
    assert res.returncode == 3
    assert res.stderr.count("\n") == 1 and "refused" in res.stderr and "Traceback" not in res.stderr
    log = [json.loads(x) for x in (c / "audit.jsonl").read_text().splitlines()]
    refused = [r for r in log if r["action"] == "tool.refused"]
    assert refused and refused[0]["details"]["argv"] == ["fsck", "-y", "/dev/loop0"]
    assert refused[0]["details"]["reason"] in res.stderr


@pytest.mark.needs_tool("mkfs.xfs", "xfs_db")
def test_exec_xfs_db_output_is_an_artifact_whose_hash_the_log_records(tmp_path: Path) -> None:
    image = tmp_path / "xfs.img"
    with open(image, "wb") as fh:
        fh.truncate(320 * 1024 * 1024)
    subprocess.run(["mkfs.xfs", "-q", str(image)], check=True)
    before = hashlib_file(image)
    c = tmp_path / "case"
    run("case", "new", str(c), check=True)
    res = run("exec", "--case", str(c), "--", "xfs_db", "-r", "-c", "sb 0", "-c", "print",
              str(image))
    assert res.returncode == 0, res.stderr
    assert "magicnum = 0x58465342" in res.stdout
    log = [json.loads(x) for x in (c / "audit.jsonl").read_text().splitlines()]
    run_rec = [r for r in log if r["action"] == "tool.run"][-1]
    sha = run_rec["details"]["stdout_sha256"]
    assert (c / "artifacts" / sha).read_text() == res.stdout
    assert sha in run_rec["artifacts"]
    assert run("case", "verify", str(c)).returncode == 0
    assert hashlib_file(image) == before


def hashlib_file(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_input_is_one_line_no_traceback(tmp_path: Path) -> None:
    res = run("case", "show", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "not a case directory" in res.stderr
    res = run("exec", "--case", str(tmp_path / "nope"), "--", "ls")
    assert res.returncode == 2


def test_version_and_help_are_fast_and_import_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from ckptrescue.cli import main as m\n"
        "heavy = [n for n in ('torch','tensorflow','boto3','botocore','textual','pyarrow',"
        "'dask','h5py','numpy','safetensors') if n in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "", f"heavy modules imported at CLI start: {res.stdout}"
    assert run_cli("--version", timeout=120).stdout.startswith("ckptrescue ")  # the script


def test_every_command_has_help_with_an_example() -> None:
    import typer.main

    from ckptrescue.cli.main import app

    group = typer.main.get_command(app)

    def walk(cmd, path):  # noqa: ANN001, ANN202
        sub = getattr(cmd, "commands", None)
        if sub:
            for name, child in sub.items():
                yield from walk(child, [*path, name])
        else:
            yield path, cmd

    missing = [" ".join(p) for p, cmd in walk(group, []) if "Example" not in (cmd.help or "")]
    assert not missing, f"commands without an Example in their help: {missing}"


def test_console_script_exists() -> None:
    assert shutil.which(EXE) or Path(EXE).exists()


@pytest.mark.parametrize("argv", [["probe"], ["nosuchcmd"], ["fs", "inspect", "x.img"],
                                  ["image", "x", "--case", "c", "--retries", "abc"],
                                  ["probe", "--bogus"], ["exec", "--case", "c", "--"]])
def test_usage_errors_exit_2_without_internal_error(argv: list[str]) -> None:
    res = run(*argv)
    assert res.returncode == 2, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("argv", "code"), [
    (["case", "new", "{file}"], 4),  # escaped the case record's emptiness check
    (["case", "new", "{file}/case"], 4),
    (["manifest", "build", "{data}", "-o", "{file}/m.sha256"], 2),  # checked before hashing
    (["dataset", "profile", "{data}", "-o", "{file}/p.json"], 4),  # escaped an action
])
def test_a_path_the_system_refuses_is_one_line_naming_it(tmp_path: Path, argv: list[str],
                                                           code: int) -> None:
    """An operating-system error that reaches a command's edge (a file where a folder must be)
    is one line naming the path asked for and the reason, never an internal error, an
    exception's repr (``FileExistsError: [Errno 17] ...``) or a temp file's name."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.jsonl").write_text('{"text": "a"}\n')
    given = [a.format(file=a_file, data=data) for a in argv]
    res = run(*given)
    assert res.returncode == code, res.stderr
    lines = res.stderr.strip().splitlines()
    named = next(a for a in given if a.startswith(str(a_file)))
    assert lines[-1].startswith(f"ckptrescue: error: {named}: "), res.stderr
    assert ".tmp" not in res.stderr
    assert "Not a directory" in lines[-1] or "File exists" in lines[-1], res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert "Error:" not in res.stderr and "[Errno" not in res.stderr
