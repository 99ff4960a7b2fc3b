"""The sandbox child: results come back as data; crashes, OOM and hangs are outcomes; and it is
a boundary: no writes outside scratch, no unrelated reads, no programs, no network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckptrescue.effects.sandbox import run_child
from ckptrescue.record.case import Case
from ckptrescue.sandbox_children import confine

needs_bwrap = pytest.mark.needs_tool("bwrap")


@needs_bwrap
def test_child_result_comes_back(case: Case) -> None:
    out = run_child("echo", {"action": "echo", "x": 1}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["echo"]["x"] == 1
    assert any(r["action"] == "sandbox.run" for r in case.records())


@needs_bwrap
def test_memory_bomb_is_contained(case: Case) -> None:
    out = run_child("echo", {"action": "allocate", "mb": 2048}, case=case, memory_mb=256,
                    timeout_s=60)
    assert out.status in {"killed", "crashed"}, out


@needs_bwrap
def test_hang_is_a_timeout(case: Case) -> None:
    out = run_child("echo", {"action": "sleep", "seconds": 30}, case=case, timeout_s=1)
    assert out.status == "timeout"


@needs_bwrap
def test_abort_is_a_crash_with_signal(case: Case) -> None:
    out = run_child("echo", {"action": "abort"}, case=case, timeout_s=30)
    assert out.status == "crashed" and out.signal_name == "SIGABRT"


@needs_bwrap
def test_exception_is_a_crash_not_ours(case: Case) -> None:
    out = run_child("echo", {"action": "raise"}, case=case, timeout_s=30)
    assert out.status == "crashed" and "ValueError: boom" in out.stderr_tail


# -- the boundary: bubblewrap view, seccomp filter, audit hook ---------------------------------


def test_filter_rules() -> None:
    kill, allow = confine.SECCOMP_RET_KILL_PROCESS, confine.SECCOMP_RET_ALLOW
    eperm = confine.SECCOMP_RET_ERRNO | confine.EPERM
    for name in ("execve", "execveat", "fork", "vfork", "ptrace", "process_vm_writev"):
        assert confine.run_filter(confine.KILL_SYSCALLS[name]) == kill, name
    for name in ("mount", "umount2", "unshare", "setns", "bpf", "kexec_load", "init_module",
                 "finit_module", "keyctl", "perf_event_open", "open_by_handle_at",
                 "personality", "io_uring_setup"):
        assert confine.run_filter(confine.EPERM_SYSCALLS[name]) == eperm, name
    assert confine.run_filter(435) == confine.SECCOMP_RET_ERRNO | confine.ENOSYS  # clone3
    assert confine.run_filter(41, (1,)) == allow  # socket(AF_UNIX)
    for family in (2, 10, 16, 17):  # INET, INET6, NETLINK, PACKET
        assert confine.run_filter(41, (family,)) == kill
    assert confine.run_filter(53, (2,)) == allow  # socketpair
    assert confine.run_filter(56, (0x3D0F00,)) == allow  # clone of a thread (pthread_create)
    assert confine.run_filter(56, (0x01200011,)) == kill  # clone of a process (fork)
    assert confine.run_filter(56, (0x3D0F00 | 0x10000000,)) == eperm  # CLONE_NEWUSER
    assert confine.run_filter(0) == allow and confine.run_filter(257) == allow  # read, openat
    assert confine.run_filter(0, arch=0x40000003) == kill  # i386
    assert confine.run_filter(confine.X32_SYSCALL_BIT | 59) == kill  # x32 execve
    assert confine.run_filter(confine.X32_SYSCALL_BIT | 0) == kill


@needs_bwrap
def test_child_is_confined_on_every_thread(case: Case) -> None:
    out = run_child("echo", {"action": "status"}, case=case, timeout_s=60)
    status = out.result["status"]
    assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
    assert "CapEff:\t0000000000000000" in status


@needs_bwrap
def test_a_loader_library_starts_no_spinning_threads_in_the_child(case: Case) -> None:
    """numpy, which ``import torch`` loads, runs its BLAS on one thread in the child
    (``OMP_NUM_THREADS=1``, which OpenBLAS also reads): OpenBLAS otherwise starts one per core,
    each spinning on a CPU for a while after it starts (about 0.17 CPU-s of ``import torch``)."""
    out = run_child("echo", {"action": "status", "preload": ["numpy"]}, case=case, timeout_s=60)
    assert out.status == "ok", out
    assert "Threads:\t1\n" in out.result["status"]


@needs_bwrap
def test_a_child_collects_garbage_again_once_its_imports_are_done(case: Case) -> None:
    """Collection pauses for the child's heavy imports (boundary.start) and resumes before the
    file is touched (boundary.enter): what the imports made is frozen, never walked again, and
    the load's own objects (a hostile pickle's cycles) are collected as usual."""
    bare = run_child("echo", {"action": "status"}, case=case, timeout_s=60)
    loaded = run_child("echo", {"action": "status", "preload": ["numpy"]}, case=case,
                       timeout_s=60)
    assert bare.status == loaded.status == "ok", (bare, loaded)
    assert bare.result["collection"]["enabled"] and loaded.result["collection"]["enabled"]
    # numpy's modules and classes are among the frozen objects
    assert loaded.result["collection"]["frozen"] > bare.result["collection"]["frozen"] + 1000


@needs_bwrap
@pytest.mark.parametrize("layers", [["hook", "seccomp"], ["seccomp"], []])
def test_child_cannot_write_outside_scratch(case: Case, tmp_path: Path, layers) -> None:
    theirs = tmp_path / "owned-by-the-test"
    theirs.mkdir()
    target = theirs / "written"
    out = run_child("echo", {"action": "write", "path": str(target), "layers": layers},
                    inputs=[str(theirs)], case=case, timeout_s=60)
    assert not target.exists()
    if "hook" in layers:
        assert out.status == "blocked" and out.attempts[0]["event"] == "open"
    else:  # the kernel: a read-only bind
        assert out.result["worked"] is False and "Read-only file system" in out.result["error"]
    # not bound at all: the write lands nowhere on the host
    elsewhere = tmp_path / "elsewhere"
    run_child("echo", {"action": "write", "path": str(elsewhere), "layers": layers}, case=case,
              timeout_s=60)
    assert not elsewhere.exists()


@needs_bwrap
def test_child_cannot_read_an_unrelated_file(case: Case, tmp_path: Path) -> None:
    secret = tmp_path / "unrelated.txt"
    secret.write_text("not for the loader")
    out = run_child("echo", {"action": "read", "path": str(secret)}, case=case, timeout_s=60)
    assert out.result["worked"] is False and "No such file" in out.result["error"]
    out = run_child("echo", {"action": "listdir", "path": "/"}, case=case, timeout_s=60)
    assert "home" not in out.result["entries"] and "etc" in out.result["entries"]
    assert not os.path.exists("/etc/shadow") or "shadow" not in run_child(
        "echo", {"action": "listdir", "path": "/etc"}, case=case, timeout_s=60
    ).result["entries"]
    out = run_child("echo", {"action": "read", "path": str(secret)}, inputs=[str(secret)],
                    case=case, timeout_s=60)
    assert out.result["data"] == "not for the loader"  # an input is readable


@needs_bwrap
def test_program_and_network_attempts_are_blocked(case: Case, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    out = run_child("echo", {"action": "system", "command": f"touch {marker}"}, case=case,
                    timeout_s=60)
    assert out.status == "blocked" and out.attempts[0]["event"] == "os.system"
    out = run_child("echo", {"action": "exec", "argv": ["/usr/bin/touch", str(marker)],
                             "layers": ["seccomp"]}, case=case, timeout_s=60)
    assert out.status == "blocked" and out.signal_name == "SIGSYS"
    out = run_child("echo", {"action": "connect", "port": 9}, case=case, timeout_s=60)
    assert out.status == "blocked" and out.attempts[0]["event"].startswith("socket.")
    out = run_child("echo", {"action": "connect", "port": 9, "layers": ["seccomp"]}, case=case,
                    timeout_s=60)
    assert out.status == "blocked" and out.signal_name == "SIGSYS"
    assert not marker.exists()


@needs_bwrap
def test_scratch_is_fresh_and_removed(case: Case) -> None:
    out = run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    scratch = out.result["echo"]["scratch"]
    assert not os.path.exists(scratch)
    out = run_child("echo", {"action": "write", "path": "in-scratch"}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["worked"] is True


def test_missing_bubblewrap_is_an_outcome_not_a_fallback(case: Case, monkeypatch) -> None:
    from ckptrescue.effects import sandbox

    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-installed-here")
    out = run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    assert out.status == "sandbox-unavailable" and "not run" in out.reason
    monkeypatch.setattr(sandbox, "BWRAP", "/bin/false")  # bwrap that cannot set up
    monkeypatch.setenv("CKPTRESCUE_SANDBOX", "cold")  # (a warm load does not use bubblewrap)
    out = run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    assert out.status == "sandbox-unavailable" and "not run" in out.reason


@needs_bwrap
def test_child_cannot_write_host_sysctls(case: Case) -> None:
    """The child is root in its namespaces and /proc/sys is checked by uid alone: it is bound
    read-only, so even with the hook off (only seccomp and namespaces) no host-wide sysctl
    (core_pattern, drop_caches, ...) can be written."""
    target = "/proc/sys/fs/lease-break-time"
    before = Path(target).read_text()
    out = run_child("echo", {"action": "write", "path": target, "layers": ["seccomp"]},
                    case=case, timeout_s=60)
    assert out.result["worked"] is False and "Read-only file system" in out.result["error"]
    assert Path(target).read_text() == before


def test_parent_never_follows_what_the_child_planted_in_scratch(tmp_path: Path) -> None:
    """Files handed back from scratch are read only when they are regular files there: a
    symlink to a host file, a FIFO (which would block the parent) or a device reads as ""."""
    from ckptrescue.effects.sandbox import read_attempts, read_scratch_file

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    host = tmp_path / "host-secret.jsonl"
    host.write_text('{"event": "forged"}\n')
    (scratch / "attempts.jsonl").symlink_to(host)
    os.mkfifo(scratch / "progress")
    (scratch / "tty").symlink_to("/dev/zero")
    assert read_attempts(str(scratch)) == []
    assert read_scratch_file(str(scratch), "progress", 100) == ""
    assert read_scratch_file(str(scratch), "tty", 100) == ""
    (scratch / "attempts.jsonl").unlink()
    (scratch / "attempts.jsonl").write_text('{"event": "open"}\n')
    assert read_attempts(str(scratch)) == [{"event": "open"}]
