"""Tools run as themselves, with nothing loaded from the responder's files: a shell-script tool
never gets a word its script would re-split; kubectl never runs an exec plugin from a
kubeconfig; HOME and XDG point into an empty per-step folder; a device a tool only reads is a
read-only loop device at its own name in the tool's namespace. Real tools and loop devices
made by the test; the evidence hashed before and after."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ckptrescue import guard
from ckptrescue.effects.runner import SubprocessRunner, ToolCall, step_env
from ckptrescue.record.case import Case
from fixtures.storage import detach_own


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _loop(img: Path, *extra: str) -> str:
    return subprocess.run(["losetup", *extra, "--find", "--show", str(img)], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.privileged
@pytest.mark.needs_tool("xfs_metadump", "mkfs.xfs")
def test_a_wrapper_script_never_gets_a_word_it_would_resplit(tmp_path: Path) -> None:
    img = tmp_path / "evidence.img"
    with open(img, "wb") as fh:
        fh.truncate(300 << 20)
    subprocess.run(["mkfs.xfs", "-q", str(img)], check=True)
    case = Case.create(tmp_path / "case")
    case.ensure_evidence(img, how="test")
    dev = _loop(img, "-r")
    before = _sha(img)
    try:
        runner = SubprocessRunner(case)
        for word in (f" {dev}", f"{dev}\t", "/tmp/*", "~/x"):
            res = runner.run(ToolCall.of("xfs_metadump", dev, word, cwd=str(tmp_path),
                                         timeout_s=60))
            assert res.refused and "shell script" in res.refused, (word, res)
    finally:
        detach_own(dev, img)
    assert _sha(img) == before


@pytest.mark.needs_tool("kubectl", "bwrap")
def test_kubectl_never_runs_an_exec_plugin_from_a_kubeconfig(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    marker = tmp_path / "plugin-ran"
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:9"}}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: /bin/sh
      args: ["-c", "touch {marker}; echo '{{}}'"]
      interactiveMode: Never
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
""")
    case = Case.create(tmp_path / "case")
    runner = SubprocessRunner(case)
    res = runner.run(ToolCall.of("kubectl", f"--kubeconfig={config}", "get", "pods",
                                 "--request-timeout=2s", timeout_s=60))
    assert res.refused and "kubeconfig" in res.refused
    monkeypatch.setenv("KUBECONFIG", str(config))
    res = runner.run(ToolCall.of("kubectl", "get", "pods", "--request-timeout=2s",
                                 timeout_s=60))
    assert res.refused is None and res.returncode != 0  # no cluster there: it fails ...
    assert not marker.exists()  # ... without running the plugin
    # it used the responder's cluster (the kit's copy of the kubeconfig), not "no config"
    assert "localhost:8080" not in res.stderr and "configuration" not in res.stderr


def test_home_and_xdg_point_into_an_empty_folder_of_the_step(tmp_path: Path) -> None:
    env = step_env(str(tmp_path), "lsblk")
    assert env["HOME"].startswith(str(tmp_path)) and os.listdir(env["HOME"]) == []
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
                "XDG_RUNTIME_DIR", "XDG_CONFIG_DIRS", "KUBECONFIG"):
        assert env[key].startswith(env["HOME"]), key
    assert not os.path.exists(env["KUBECONFIG"])
    assert not {k for k in env if k.startswith(("AWS_", "SSH_", "KUBE", "LD_"))} - {
        "KUBECONFIG"}


@pytest.mark.privileged
@pytest.mark.needs_tool("bwrap", "mkfs.ext4", "dumpe2fs")
def test_a_device_the_tool_only_reads_is_read_only_in_its_namespace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    img = tmp_path / "scratch.img"
    with open(img, "wb") as fh:
        fh.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    dev = _loop(img)  # writable, not evidence: the kernel does not protect it
    before = _sha(img)
    case = Case.create(tmp_path / "case")
    runner = SubprocessRunner(case)
    try:
        res = runner.run(ToolCall.of("dumpe2fs", "-h", dev, timeout_s=60))
        assert res.returncode == 0 and "Filesystem volume name" in res.stdout
        views = [r["details"] for r in case.records("tool.run")
                 if r["details"]["argv"][0] == "losetup"]
        assert [v["argv"][:3] for v in views] == [["losetup", "--read-only", "--find"],
                                                 ["losetup", "-d", views[1]["argv"][2]]]
        # the guard switched off: a write to the device the tool names fails in the kernel
        real_check = guard.check

        def mistaken(argv: list[str], ctx=None, **kw):  # noqa: ANN001, ANN202
            if argv[0] == "dd":  # the guard's mistake: dd of=DEVICE allowed, no write named
                return guard.Decision.allow()
            return real_check(argv, ctx, **kw)

        monkeypatch.setattr(guard, "check", mistaken)
        res = runner.run(ToolCall.of("dd", "if=/dev/zero", f"of={dev}", "bs=4096", "count=1",
                                     "conv=notrunc", timeout_s=60))
        assert res.returncode != 0, res.stderr
        assert _sha(img) == before
    finally:
        detach_own(dev, img)
    leftover = subprocess.run(["losetup", "-j", dev], capture_output=True, text=True).stdout
    assert leftover == ""
    assert shutil.which("losetup")
