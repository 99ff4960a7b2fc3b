"""A property test of the attach/detach rules on real loop devices and mounts made by the test:
hypothesis generates sequences of attaches and mounts (by the kit, through the runner, and by
another party, outside it), detaches and re-binds behind the kit's back, and asks the kit to
detach or unmount through aliases (a node of the same device number, a symlink, /proc/self/fd,
a bind mount of the mount point). The rule checked after every step: the runner detaches or
unmounts only what this case attached whose identity the kernel still shows; everything
another party attached survives; the evidence image hashes the same at the end."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case
from fixtures.storage import detach_own

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("losetup", "mkfs.ext4")]
OPTS = "ro,noload,nosuid,nodev,noexec"

OPS = st.lists(st.tuples(
    st.sampled_from(["kit_attach", "other_attach", "kit_mount", "other_mount", "detach",
                     "umount", "rebind", "other_detach"]),
    st.integers(0, 3),  # which attachment
    st.sampled_from(["name", "node", "symlink", "procfd", "bind"])),  # which alias
    min_size=1, max_size=7)


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attach-property")
    out = {}
    for name in ("evidence", "other"):
        img = root / f"{name}.img"
        with open(img, "wb") as fh:
            fh.truncate(8 << 20)
        _sh("mkfs.ext4", "-q", "-F", str(img))
        out[name] = img
    return out


class World:
    """The test's model: which loops and mounts exist, and whose they are."""

    def __init__(self, root: Path, images: dict[str, Path]) -> None:
        self.root, self.images = root, images
        self.case = Case.create(root / "case")
        self.case.ensure_evidence(images["evidence"], how="test evidence")
        self.runner = SubprocessRunner(self.case)
        self.loops: list[dict] = []  # {"dev", "owner": kit|other, "file", "live"}
        self.mounts: list[dict] = []  # {"dir", "owner", "dev", "live"}
        self.n = 0

    def fresh(self, what: str) -> Path:
        self.n += 1
        return self.root / f"{what}-{self.n}"

    def run(self, *argv: str):  # noqa: ANN201
        return self.runner.run(ToolCall(argv=tuple(argv), timeout_s=60, purpose="property"))

    def alias(self, path: str, how: str, *, device: bool) -> tuple[str, object]:
        """Another name of ``path`` (and something to undo afterwards)."""
        if how == "node" and device:
            node = self.fresh("node")
            os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(path).st_rdev)
            return str(node), None
        if how == "symlink":
            link = self.fresh("link")
            link.symlink_to(path)
            return str(link), None
        if how == "procfd":
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if device else os.O_DIRECTORY))
            return f"/proc/self/fd/{fd}", fd
        if how == "bind" and not device:  # (a device has no bind alias: its own name)
            view = self.fresh("bind")
            view.mkdir()
            _sh("mount", "--bind", path, str(view))
            return str(view), ("umount", str(view))
        return path, None

    def undo(self, token: object) -> None:
        if isinstance(token, int):
            os.close(token)
        elif isinstance(token, tuple):
            _sh(*token, check=False)

    def step(self, op: str, which: int, how: str) -> None:  # noqa: C901 - one rule per op
        live_loops = [lo for lo in self.loops if lo["live"]]
        live_mounts = [m for m in self.mounts if m["live"]]
        if op == "kit_attach":
            res = self.run("losetup", "--read-only", "--find", "--show",
                           str(self.images["evidence"]))
            assert res.returncode == 0, res.stderr
            self.loops.append({"dev": res.stdout.strip(), "owner": "kit", "live": True,
                               "file": self.images["evidence"]})
        elif op == "other_attach":
            img = self.images["evidence" if which % 2 else "other"]
            dev = _sh("losetup", "--read-only", "--find", "--show", str(img)).stdout.strip()
            self.loops.append({"dev": dev, "owner": "other", "live": True, "file": img})
        elif op in ("kit_mount", "other_mount") and live_loops:
            lo = live_loops[which % len(live_loops)]
            if any(m["dev"] == lo["dev"] for m in live_mounts):
                return
            where = self.fresh("mnt")
            where.mkdir()
            if op == "kit_mount":
                res = self.run("mount", "-t", "ext4", "-o", OPTS, lo["dev"], str(where))
                assert res.returncode == 0, (res.refused, res.stderr)
            else:
                _sh("mount", "-t", "ext4", "-o", OPTS, lo["dev"], str(where))
            self.mounts.append({"dir": str(where), "owner": op.split("_")[0], "live": True,
                                "dev": lo["dev"]})
        elif op == "detach" and live_loops:
            lo = live_loops[which % len(live_loops)]
            name, token = self.alias(lo["dev"], how, device=True)
            try:
                res = self.run("losetup", "-d", name)
            finally:
                self.undo(token)
            busy = any(m["dev"] == lo["dev"] for m in live_mounts)
            mine = lo["owner"] == "kit" and how in ("name", "node", "symlink", "bind")
            if not mine:
                assert res.refused, (lo, how, "another party's loop, or an alias the tool "
                                     "would read differently, must be refused")
            else:
                assert res.refused is None, (lo, how, res.refused)
                if res.returncode == 0 and not busy:
                    lo["live"] = False
                elif busy:  # the kernel detaches a busy loop when it is released
                    lo["autoclear"] = True
        elif op == "umount" and live_mounts:
            m = live_mounts[which % len(live_mounts)]
            name, token = self.alias(m["dir"], how, device=False)
            try:
                res = self.run("umount", name)
            finally:
                self.undo(token)
            if m["owner"] != "kit" or how in ("procfd", "bind"):
                assert res.refused, (m, how)
            else:
                assert res.refused is None and res.returncode == 0, (m, how, res.refused,
                                                                       res.stderr)
                m["live"] = False
                self._autoclear(m["dev"])
        elif op == "rebind":  # behind the kit's back: its loop now serves another file
            kit = [lo for lo in live_loops if lo["owner"] == "kit"
                   and not any(m["dev"] == lo["dev"] for m in live_mounts)]
            if kit:
                lo = kit[which % len(kit)]
                _sh("losetup", "-d", lo["dev"])
                _sh("losetup", "--read-only", lo["dev"], str(self.images["other"]))
                lo.update(owner="other", file=self.images["other"])
        elif op == "other_detach":
            theirs = [m for m in live_mounts if m["owner"] == "other"]
            if theirs:
                m = theirs[which % len(theirs)]
                _sh("umount", m["dir"])
                m["live"] = False

    def _autoclear(self, dev: str) -> None:
        for lo in self.loops:
            if lo["dev"] == dev and lo.get("autoclear"):
                lo["live"] = _sh("losetup", "-j", str(lo["file"])).stdout.count(dev) != 0

    def check_others_survive(self) -> None:
        table = Path("/proc/self/mountinfo").read_text()
        for m in self.mounts:
            if m["live"] and m["owner"] == "other":
                assert f" {m['dir']} " in table, m
        for lo in self.loops:
            if lo["live"] and lo["owner"] == "other":
                back = Path(f"/sys/block/{Path(lo['dev']).name}/loop/backing_file")
                assert back.exists() and back.read_text().strip() == str(lo["file"]), lo

    def cleanup(self) -> None:
        for m in reversed(self.mounts):
            _sh("umount", m["dir"], check=False)
        for lo in self.loops:
            detach_own(lo["dev"], *self.images.values())


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(ops=OPS)
def test_the_kit_detaches_only_its_own_by_kernel_identity(images: dict[str, Path],
                                                          tmp_path_factory: pytest.TempPathFactory,
                                                          ops: list[tuple[str, int, str]]
                                                          ) -> None:
    before = _sha(images["evidence"])
    world = World(tmp_path_factory.mktemp("world"), images)
    try:
        for op, which, how in ops:
            world.step(op, which, how)
            world.check_others_survive()
    finally:
        world.cleanup()
    assert _sha(images["evidence"]) == before
