"""Network and parallel filesystems: mount-source parsing, the same-storage decision over every
pair of kinds, stale-metadata tail reads, kernel log patterns, and live FUSE (sshfs to an sshd on
127.0.0.1; fixtures/faultyfs.py for EIO)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.storage import filesystem, netfs, triage
from ckptrescue.storage.netfs import StorageIdentity, check_tail, decide, parse_source
from ckptrescue.storage.samedisk import Sameness
from fixtures import storage as fx
from fixtures.det import det_bytes

Id = StorageIdentity
fs = frozenset

CASES: dict[str, Id] = {
    "disk1": Id("/mnt/a", "block", fstype="xfs", dev="8:1", leaves=fs({"diskA"})),
    "disk1b": Id("/mnt/b", "block", fstype="ext4", dev="8:2", leaves=fs({"diskA"})),
    "disk2": Id("/mnt/c", "block", fstype="ext4", dev="8:17", leaves=fs({"diskB"})),
    "ram": Id("/dev/shm/x", "ram", fstype="tmpfs", dev="0:40", leaves=fs({"ram"})),
    "overlay": Id("/", "local-unknown", fstype="overlay", dev="0:50", note="overlay on ?"),
    "nfsA": Id("/nfs/ckpt", "nfs", fstype="nfs4", dev="0:60",
               servers=fs({"nfs1", "10.0.0.1"}), name="/export/ckpt"),
    "nfsA_sub": Id("/nfs/run1", "nfs", fstype="nfs4", dev="0:61",
                   servers=fs({"10.0.0.1"}), name="/export/ckpt/run1"),
    "nfsA_other": Id("/nfs/scratch", "nfs", fstype="nfs4", dev="0:62",
                     servers=fs({"10.0.0.1"}), name="/export/scratch"),
    "nfsB": Id("/nfs2", "nfs", fstype="nfs", dev="0:63", servers=fs({"10.0.0.2"}),
               name="/export/ckpt"),
    "nfs_here": Id("/nfs3", "nfs", fstype="nfs4", dev="0:64", servers=fs({"127.0.0.1"}),
                   name="/srv/ckpt", served_here=True),
    "lus1": Id("/lustre/scratch", "lustre", fstype="lustre", dev="0:70",
               servers=fs({"10.1.0.1@o2ib"}), name="scratch"),
    "lus2": Id("/lustre/project", "lustre", fstype="lustre", dev="0:72",
               servers=fs({"10.1.0.1@o2ib"}), name="project"),
    "gpfs1": Id("/gpfs/fs1", "gpfs", fstype="gpfs", dev="0:80", name="fs1", served_here=None,
                note="GPFS NSDs may be this node's own disks"),
    "gpfs2": Id("/gpfs/fs2", "gpfs", fstype="gpfs", dev="0:81", name="fs2", served_here=None,
                note="GPFS NSDs may be this node's own disks"),
    "ceph1": Id("/cephfs", "cephfs", fstype="ceph", dev="0:90", servers=fs({"10.2.0.1:6789"}),
                name="cephfs", cluster="6a0c3d2e-0000-4000-8000-000000000001"),
    "bee1": Id("/beegfs", "beegfs", fstype="beegfs", dev="0:100", servers=fs({"mgmt1"})),
    "weka1": Id("/weka", "wekafs", fstype="wekafs", dev="0:110", servers=fs({"b1"}),
                name="default", served_here=None, note="may run converged"),
    "sshfsA": Id("/mnt/sa", "fuse", fstype="fuse.sshfs", dev="0:120", daemon="sshfs",
                 remote=True, servers=fs({"hostA", "10.3.0.1"}), name="/data",
                 source="u@hostA:/data"),
    "sshfsB": Id("/mnt/sb", "fuse", fstype="fuse.sshfs", dev="0:121", daemon="sshfs",
                 remote=True, servers=fs({"hostB", "10.3.0.2"}), name="/data",
                 source="u@hostB:/data"),
    "s3fs": Id("/mnt/s3", "fuse", fstype="fuse.s3fs", dev="0:122", daemon="s3fs", remote=True,
               source="bucket1", name="bucket1"),
    "localfuse": Id("/mnt/lf", "fuse", fstype="fuse", dev="0:123", daemon="faultyfs",
                    source="ckr-faultyfs", name="ckr-faultyfs", served_here=None,
                    daemon_pid=4242),
}

# ---------------------------------------------------------------------------------------------
# parse_source


@pytest.mark.parametrize(("fstype", "source", "opts", "kind", "servers", "name"), [
    ("nfs4", "nfs1.example:/export/ckpt", ("rw", "vers=4.2", "addr=10.0.0.1"), "nfs",
     ("nfs1.example", "10.0.0.1"), "/export/ckpt"),
    ("nfs", "[fd00::5]:/srv", ("addr=fd00::5",), "nfs", ("fd00::5",), "/srv"),
    ("nfs", "10.0.0.2:/", (), "nfs", ("10.0.0.2",), "/"),
    ("lustre", "10.1.0.1@o2ib,10.1.1.1@tcp:10.1.0.2@o2ib:/scratch", ("rw", "flock"), "lustre",
     ("10.1.0.1@o2ib", "10.1.1.1@tcp", "10.1.0.2@o2ib"), "scratch"),
    ("lustre", "mgs@tcp:/testfs/sub/dir", (), "lustre", ("mgs@tcp",), "testfs"),
    ("ceph", "10.2.0.1:6789,10.2.0.2:6789:/", ("name=admin", "mds_namespace=ml"), "cephfs",
     ("10.2.0.1:6789", "10.2.0.2:6789"), "ml"),
    ("ceph", "admin@6a0c3d2e-0000-4000-8000-000000000001.ml=/ckpt",
     ("mon_addr=10.2.0.1:3300/10.2.0.2:3300",), "cephfs", ("10.2.0.1:3300", "10.2.0.2:3300"),
     "ml"),
    ("gpfs", "fs1", ("rw",), "gpfs", (), "fs1"),
    ("beegfs", "beegfs_nodev", ("cfgFile=/etc/beegfs/beegfs-client.conf",), "beegfs", (), ""),
    ("wekafs", "backend1/default", (), "wekafs", ("backend1",), "default"),
    ("wekafs", "default", (), "wekafs", (), "default"),
    ("fuse.sshfs", "root@127.0.0.1:/srv/export", ("user_id=0",), "fuse", ("127.0.0.1",),
     "/srv/export"),
    ("fuse.s3fs", "s3fs", (), "fuse", (), "s3fs"),
    ("fuse", "ckr-faultyfs", (), "fuse", (), "ckr-faultyfs"),
    ("fuse.ceph-fuse", "ceph-fuse", (), "cephfs", (), ""),
])
def test_parse_source(fstype: str, source: str, opts: tuple[str, ...], kind: str,
                      servers: tuple[str, ...], name: str) -> None:
    got = parse_source(fstype, source, opts)
    assert (got.kind, got.servers, got.name) == (kind, servers, name)


def test_parse_source_details() -> None:
    assert parse_source("ceph", "a@6a0c3d2e-0000-4000-8000-000000000001.ml=/x").cluster == \
        "6a0c3d2e-0000-4000-8000-000000000001"
    assert parse_source("beegfs", "beegfs_nodev", ("cfgFile=/etc/b.conf",)).config == \
        "/etc/b.conf"
    ssh = parse_source("fuse.sshfs", "u@host:/d")
    assert ssh.remote and ssh.daemon == "sshfs"
    assert parse_source("fuse.s3fs", "s3fs").remote
    assert not parse_source("fuse", "ckr-faultyfs").remote
    assert parse_source("xfs", "/dev/sda1").kind == "local"
    assert netfs.beegfs_mgmtd("# c\nsysMgmtdHost = mgmt01\nconnPort=8008\n") == "mgmt01"


def test_local_addresses() -> None:
    trie = ("Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.0.0.7\n        /32 host LOCAL\n"
            "     |-- 10.0.0.255\n        /32 link BROADCAST\n")
    assert netfs.local_addresses_from_fib_trie(trie) == {"10.0.0.7"}
    v6 = "00000000000000000000000000000001 01 80 10 80       lo\n"
    assert netfs.local_addresses_from_if_inet6(v6) == {"::1"}
    assert netfs.is_loopback("127.0.0.1") and netfs.is_loopback("[::1]")
    assert netfs.is_loopback("0@lo") and netfs.is_loopback("localhost")
    assert not netfs.is_loopback("10.0.0.1") and not netfs.is_loopback("nfs1")


# ---------------------------------------------------------------------------------------------
# decide: every ordered pair of the representative identities (S same, D different, U unknown)

EXPECTED = {
    "disk1": "SSDDUDDDDUDDUUDDUDDDU",
    "disk1b": "SSDDUDDDDUDDUUDDUDDDU",
    "disk2": "DDSDUDDDDUDDUUDDUDDDU",
    "ram": "DDDSUDDDDUDDUUDDUDDDU",
    "overlay": "UUUUSDDDDUDDUUDDUDDDU",
    "nfsA": "DDDDDSSUDUUUUUUUUUUUU",
    "nfsA_sub": "DDDDDSSUDUUUUUUUUUUUU",
    "nfsA_other": "DDDDDUUSDUUUUUUUUUUUU",
    "nfsB": "DDDDDDDDSUUUUUUUUUUUU",
    "nfs_here": "UUUUUUUUUSUUUUUUUUUUU",
    "lus1": "DDDDDUUUUUSDDDDDDUUDU",
    "lus2": "DDDDDUUUUUDSDDDDDUUDU",
    "gpfs1": "UUUUUUUUUUDDSDDDUUUDU",
    "gpfs2": "UUUUUUUUUUDDDSDDUUUDU",
    "ceph1": "DDDDDUUUUUDDDDSDDUUDU",
    "bee1": "DDDDDUUUUUDDDDDSDUUDU",
    "weka1": "UUUUUUUUUUDDUUDDSUUDU",
    "sshfsA": "DDDDDUUUUUUUUUUUUSDUU",
    "sshfsB": "DDDDDUUUUUUUUUUUUDSUU",
    "s3fs": "DDDDDUUUUUDDDDDDDUUSU",
    "localfuse": "UUUUUUUUUUUUUUUUUUUUS",
}
LETTER = {"S": Sameness.SAME, "D": Sameness.DIFFERENT, "U": Sameness.UNKNOWN}


def test_the_table_covers_every_case() -> None:
    assert list(EXPECTED) == list(CASES)
    assert all(len(row) == len(CASES) for row in EXPECTED.values())
    kinds = {c.kind for c in CASES.values()}
    assert kinds >= netfs.NETWORK_KINDS | netfs.LOCAL_KINDS


@pytest.mark.parametrize("a", list(CASES))
def test_decision_table(a: str) -> None:
    for b, letter in zip(CASES, EXPECTED[a], strict=True):
        verdict, why = decide(CASES[a], CASES[b])
        assert verdict is LETTER[letter], f"{a} -> {b}: {verdict} ({why})"
        assert why  # every verdict says why


def test_decision_is_symmetric_and_never_different_on_one_filesystem() -> None:
    for a in CASES.values():
        for b in CASES.values():
            assert decide(a, b)[0] is decide(b, a)[0]
            if a.dev == b.dev:
                assert decide(a, b)[0] is Sameness.SAME


@pytest.mark.parametrize(("a", "b", "verdict", "words"), [
    (StorageIdentity("/l1", "lustre", dev="0:1", servers=frozenset({"10.1.0.1@o2ib"}),
                     name="scratch"),
     StorageIdentity("/l2", "lustre", dev="0:2", servers=frozenset({"10.1.0.9@tcp"}),
                     name="scratch"), Sameness.UNKNOWN, "different MGS NIDs"),
    (StorageIdentity("/l1", "lustre", dev="0:1", servers=frozenset({"10.1.0.1@o2ib"}),
                     name="scratch"),
     StorageIdentity("/l2", "lustre", dev="0:2", servers=frozenset({"10.1.0.1@o2ib"}),
                     name="scratch"), Sameness.SAME, "same Lustre filesystem"),
    (StorageIdentity("/c1", "cephfs", dev="0:1", cluster="a", name="x"),
     StorageIdentity("/c2", "cephfs", dev="0:2", cluster="a", name="y"), Sameness.UNKNOWN,
     "share the cluster's OSDs"),
    (StorageIdentity("/c1", "cephfs", dev="0:1", cluster="a", name="x"),
     StorageIdentity("/c2", "cephfs", dev="0:2", cluster="b", name="x"), Sameness.DIFFERENT,
     "different Ceph clusters"),
    (StorageIdentity("/c1", "cephfs", dev="0:1", servers=frozenset({"m1:6789"}), name="x"),
     StorageIdentity("/c2", "cephfs", dev="0:2", servers=frozenset({"m2:6789"}), name="x"),
     Sameness.UNKNOWN, "monitors differ"),
    (StorageIdentity("/b1", "beegfs", dev="0:1"),
     StorageIdentity("/b2", "beegfs", dev="0:2", servers=frozenset({"m"})), Sameness.UNKNOWN,
     "management host unknown"),
    (StorageIdentity("/b1", "beegfs", dev="0:1", servers=frozenset({"m"})),
     StorageIdentity("/b2", "beegfs", dev="0:2", servers=frozenset({"m"})), Sameness.SAME,
     "same BeeGFS instance"),
    (StorageIdentity("/w1", "wekafs", dev="0:1", name="a", served_here=None),
     StorageIdentity("/w2", "wekafs", dev="0:2", name="b", served_here=None), Sameness.UNKNOWN,
     "share its drives"),
    (StorageIdentity("/s1", "fuse", dev="0:1", daemon="sshfs", remote=True,
                     servers=frozenset({"h"}), name="/a"),
     StorageIdentity("/s2", "fuse", dev="0:2", daemon="sshfs", remote=True,
                     servers=frozenset({"h"}), name="/b"), Sameness.UNKNOWN, "one remote host"),
    (StorageIdentity("/s1", "fuse", dev="0:1", daemon="sshfs", remote=True,
                     servers=frozenset({"h"}), name="/a"),
     StorageIdentity("/s2", "fuse", dev="0:2", daemon="sshfs", remote=True,
                     servers=frozenset({"h"}), name="/a/b"), Sameness.SAME, "same remote tree"),
    (StorageIdentity("/n", "nfs", dev="0:1", servers=frozenset({"10.0.0.1"}), name="/e",
                     served_here=None), CASES["disk1"], Sameness.UNKNOWN, "cannot tell"),
    (StorageIdentity("/x", "unknown", note="stat failed"), CASES["nfsA"], Sameness.UNKNOWN,
     "stat failed"),
])
def test_decision_within_a_kind(a: StorageIdentity, b: StorageIdentity, verdict: Sameness,
                                words: str) -> None:
    got, why = decide(a, b)
    assert got is verdict and words in why, why
    assert decide(b, a)[0] is verdict


def test_a_filesystem_served_here_is_judged_by_its_local_backing() -> None:
    here = StorageIdentity("/mnt/s", "fuse", dev="0:9", daemon="sshfs", remote=True,
                           servers=frozenset({"127.0.0.1"}), name="/srv/e", served_here=True,
                           backing=CASES["disk1"])
    verdict, why = decide(here, CASES["disk2"])
    assert verdict is Sameness.DIFFERENT and "served by this host from /mnt/a" in why
    assert decide(here, CASES["disk1b"])[0] is Sameness.SAME  # another partition of its disk
    assert decide(CASES["disk1b"], here)[0] is Sameness.SAME
    assert decide(here, CASES["nfsA"])[0] is Sameness.DIFFERENT  # a local disk vs NFS server
    no_backing = StorageIdentity("/mnt/s", "nfs", dev="0:9", servers=frozenset({"127.0.0.1"}),
                                 name="/srv/e", served_here=True)
    verdict, why = decide(no_backing, CASES["disk2"])
    assert verdict is Sameness.UNKNOWN and "served by this host" in why


def test_identity_json_round_trip_keys() -> None:
    j = CASES["sshfsA"].to_json()
    assert j["kind"] == "fuse" and j["daemon"] == "sshfs" and j["servers"] == ["10.3.0.1",
                                                                              "hostA"]
    assert "FUSE sshfs" in j["describe"]


def test_identity_of_a_local_path(tmp_path: Path) -> None:
    ident = netfs.storage_identity(tmp_path)
    assert ident.kind in {"block", "ram", "local-unknown"}
    assert ident.dev == f"{os.major(tmp_path.stat().st_dev)}:{os.minor(tmp_path.stat().st_dev)}"
    verdict, _why = netfs.same_storage(tmp_path, tmp_path / "not-yet" / "made")
    assert verdict is Sameness.SAME


# ---------------------------------------------------------------------------------------------
# stale metadata: check_tail over a fake pread, tail_check on real files


def _reader(data: bytes, *, fail_at: int | None = None, short: int | None = None):  # noqa: ANN202
    def pread(n: int, off: int) -> bytes:
        if fail_at is not None and off + n > fail_at:
            raise OSError(errno.EIO, "Input/output error")
        end = len(data) if short is None else min(len(data), short)
        return data[off:min(off + n, end)]
    return pread


def test_check_tail_ok_short_eio_and_beyond() -> None:
    data = bytes(range(256)) * 64  # 16 KiB
    ok = check_tail("f", len(data), _reader(data))
    assert ok.ok and ok.got == 4096 and ok.offset == len(data) - 4096
    short = check_tail("f", len(data), _reader(data, short=len(data) - 1000))
    assert not short.ok and short.readable_end == len(data) - 1000 and not short.error
    eio = check_tail("f", len(data), _reader(data, fail_at=len(data) - 10))
    assert eio.error == "EIO" and not eio.ok
    beyond = check_tail("f", len(data) - 100, _reader(data))
    assert beyond.beyond == 1 and not beyond.ok
    tiny = check_tail("f", 10, _reader(b"0123456789"))
    assert tiny.ok and tiny.offset == 0 and tiny.wanted == 10
    empty = check_tail("f", 0, _reader(b""))
    assert empty.ok and empty.wanted == 0
    codes = [f.code for f in netfs.tail_findings([ok, short, eio, beyond], "E001", fs="lustre")]
    assert codes == ["NF001", "NF002", "NF003"]


def test_tail_check_on_a_real_file(tmp_path: Path) -> None:
    f = tmp_path / "ckpt.bin"
    f.write_bytes(det_bytes(10000, 1))
    before = f.stat().st_atime_ns
    res = netfs.tail_check(f)
    assert res.ok and res.size == 10000 and res.got == 4096
    assert f.stat().st_atime_ns == before or os.geteuid() != 0


# ---------------------------------------------------------------------------------------------
# the registry and triage


def test_registry_owns_the_network_types() -> None:
    for fstype, name in [("nfs", "nfs"), ("nfs4", "nfs"), ("lustre", "lustre"), ("gpfs", "gpfs"),
                         ("ceph", "cephfs"), ("fuse.ceph-fuse", "cephfs"), ("beegfs", "beegfs"),
                         ("wekafs", "wekafs"), ("fuse.sshfs", "fuse"), ("fuse", "fuse")]:
        fs = filesystem.find(fstype)
        assert fs is not None and fs.name == name, fstype
    for fstype in netfs.KINDS:
        assert filesystem.find(fstype) is not None, fstype


# lines built from the kernel's own format strings (module docstrings cite the source)
KERNEL_LINES = [
    ("nfs", "[ 185.330941] nfs: server 10.2.80.41 not responding, still trying"),
    ("nfs", "[ 900.1] nfs: server nfs1 not responding, timed out"),
    ("nfs", "NFS: server nfs1 error: fileid changed"),
    ("nfs", "python[311]: OSError: [Errno 116] Stale file handle: '/nfs/ckpt/step-300.pt'"),
    ("lustre", "LustreError: 11-0: scratch-OST0003-osc-ffff8a: operation ost_read to node "
               "10.1.0.5@o2ib failed: rc = -107"),
    ("lustre", "LustreError: 167-0: scratch-OST0003-osc-ffff8a: This client was evicted by "
               "scratch-OST0003; in progress operations using this service will fail."),
    ("lustre", "Lustre: 3389:0:(client.c:2295:ptlrpc_expire_one_request()) @@@ Request sent "
               "has timed out for slow reply: [sent 1696590759/real 1696590759]"),
    ("lustre", "Lustre: scratch-OST0003-osc-ffff8a: Connection to scratch-OST0003 (at "
               "10.1.0.5@o2ib) was lost; in progress operations using this service will wait "
               "for recovery to complete"),
    ("cephfs", "libceph: mon0 (1)10.2.0.1:6789 session lost, hunting for new mon"),
    ("cephfs", "libceph: osd3 (1)10.2.0.7:6801 socket closed (con state OPEN)"),
    ("cephfs", "ceph: mds0 hung"),
    ("cephfs", "ceph: mds0 caps stale"),
    ("gpfs", "mmfs: [E] Unmounting file system fs1 due to a SGPanic condition"),
    ("gpfs", "mmfs: [E] Node 10.4.0.3 (gpfs03) is being expelled"),
    ("fuse", "fuse: Bad value for 'fd'"),
    ("fuse", " request_wait_answer+0x13a/0x220 [fuse]"),
]
QUIET_LINES = ["nfs: server nfs1 OK", "fuse: init (API version 7.38)",
               "Lustre: Mounted scratch-client", "libceph: mon0 (1)10.2.0.1:6789 session "
               "established", "ceph: loaded (mds proto 32)", "mmfs: [I] Command: mount fs1"]


@pytest.mark.parametrize(("kind", "line"), KERNEL_LINES)
def test_triage_classifies_network_filesystem_kernel_lines(kind: str, line: str) -> None:
    got = triage.scan_kernel_log(line)
    assert got and got[0]["kind"] == kind, got


@pytest.mark.parametrize("line", QUIET_LINES)
def test_triage_ignores_informational_lines(line: str) -> None:
    assert triage.scan_kernel_log(line) == []


# ---------------------------------------------------------------------------------------------
# live FUSE: sshfs to an sshd on 127.0.0.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mounted(mnt: Path) -> bool:
    return any(ln.split()[1] == str(mnt) for ln in Path("/proc/mounts").read_text().splitlines())


@contextlib.contextmanager
def _sshd(tmp: Path) -> Iterator[tuple[int, Path]]:
    """sshd on 127.0.0.1:PORT with a throwaway host key and one authorized key, all in tmp."""
    keys = tmp / "keys"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                       check=True)
    auth = keys / "authorized_keys"
    auth.write_text((keys / "client.pub").read_text())
    auth.chmod(0o600)
    port = _free_port()
    cfg = tmp / "sshd_config"
    cfg.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
                   f"AuthorizedKeysFile {auth}\nPidFile none\nUsePAM no\nStrictModes no\n"
                   "PasswordAuthentication no\nPermitRootLogin prohibit-password\n"
                   "Subsystem sftp internal-sftp\n")
    made_run = not Path("/run/sshd").exists()
    if made_run:  # sshd's privilege-separation directory (what the package's unit creates)
        Path("/run/sshd").mkdir(mode=0o755)
    proc = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f",
                             str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        timeout=0.2):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.05)
        yield port, keys / "client"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if made_run:
            with contextlib.suppress(OSError):
                Path("/run/sshd").rmdir()


@contextlib.contextmanager
def _sshfs(port: int, key: Path, remote: Path, mnt: Path) -> Iterator[int]:
    proc = subprocess.Popen(["sshfs", "-f", "-o", "ro", "-o", f"port={port}", "-o",
                             f"IdentityFile={key}", "-o", "StrictHostKeyChecking=no", "-o",
                             "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                             f"root@127.0.0.1:{remote}", str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if _mounted(mnt):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"sshfs exited: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.05)
        else:
            raise RuntimeError("sshfs did not mount")
        yield proc.pid
    finally:
        if _mounted(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        if _mounted(mnt):
            subprocess.run(["umount", str(mnt)], check=False)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.privileged
@pytest.mark.needs_tool("sshfs", "sshd", "ssh-keygen", "fusermount3")
def test_sshfs_source_identity_and_same_storage(tmp_path: Path) -> None:
    if not Path("/dev/fuse").exists():
        pytest.skip("needs /dev/fuse")  # a failure under CKPTRESCUE_REQUIRE_PRIVILEGED=1
    mnt = tmp_path / "sshfs"
    mnt.mkdir()
    local_dest = tmp_path / "copy"
    local_dest.mkdir()
    with fx.small_tmpfs("4m") as export, _sshd(tmp_path) as (port, key):
        (export / "step-300.pt").write_bytes(det_bytes(6000, 2))
        with _sshfs(port, key, export, mnt) as pid:
            ident = netfs.storage_identity(mnt / "step-300.pt")
            assert ident.kind == "fuse" and ident.fstype == "fuse.sshfs"
            assert ident.daemon == "sshfs" and ident.remote
            assert "127.0.0.1" in ident.servers and ident.name == str(export)
            assert ident.source == f"root@127.0.0.1:{export}"
            assert ident.daemon_pid == pid
            assert ident.served_here is True
            assert ident.backing is not None and ident.backing.kind == "ram"
            # a local directory on the disk under tmp: the sshfs data is in RAM (the tmpfs)
            verdict, why = netfs.same_storage(mnt, local_dest)
            assert verdict is Sameness.DIFFERENT, why
            assert "served by this host" in why
            # inside the same sshfs mount: one filesystem
            verdict, why = netfs.same_storage(mnt, mnt / "sub")
            assert verdict is Sameness.SAME, why
            # next to the exported directory on the tmpfs the sshd serves from: same storage
            verdict, why = netfs.same_storage(mnt, export / "elsewhere")
            assert verdict is Sameness.SAME, why
            # stale-metadata tail read through the sshfs mount
            assert netfs.tail_check(mnt / "step-300.pt").ok
    assert not _mounted(mnt)


@pytest.mark.privileged
def test_fuse_eio_on_the_last_block_is_nf002(tmp_path: Path) -> None:
    pytest.importorskip("fuse")
    if not Path("/dev/fuse").exists():
        pytest.skip("needs /dev/fuse")
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.bin").write_bytes(det_bytes(9000, 3))
    (src / "bad.bin").write_bytes(det_bytes(9000, 4))
    with fx.faulty_mount(src, {"bad.bin": [(8500, 8600)]}) as mnt:
        ident = netfs.storage_identity(mnt)
        assert ident.kind == "fuse" and not ident.remote and ident.daemon_pid is not None
        verdict, why = netfs.same_storage(mnt, tmp_path / "dest")
        assert verdict is Sameness.UNKNOWN and "FUSE daemon" in why
        checks = [netfs.tail_check(mnt / "good.bin"), netfs.tail_check(mnt / "bad.bin")]
        assert checks[0].ok and checks[1].error == "EIO"
        findings = netfs.tail_findings(checks, "E001", fs="fuse")
        assert [f.code for f in findings] == ["NF002"]


# ---------------------------------------------------------------------------------------------
# the guard: no lfs / mm* / ceph form is allowlisted (no real captured outputs to test parsers on:
# docs/storage.md, "Network and parallel filesystems"); reads and writes alike are refused


@pytest.mark.parametrize("argv", [
    ["lfs", "getstripe", "/lustre/scratch/step-300.pt"],
    ["lfs", "hsm_state", "/lustre/scratch/step-300.pt"],
    ["lfs", "check", "osts"],
    ["lfs", "setstripe", "-c", "4", "/lustre/scratch/run"],
    ["lfs", "hsm_archive", "/lustre/scratch/step-300.pt"],
    ["lfs", "hsm_release", "/lustre/scratch/step-300.pt"],
    ["lfs", "migrate", "-c", "2", "/lustre/scratch/step-300.pt"],
    ["mmlsattr", "-L", "/gpfs/fs1/step-300.pt"],
    ["mmlsfs", "fs1"],
    ["mmchattr", "--set-attr", "user.x=1", "/gpfs/fs1/step-300.pt"],
    ["mmchfs", "fs1", "-Q", "no"],
    ["ceph", "fs", "status"],
    ["ceph", "fs", "set", "cephfs", "max_mds", "2"],
    ["ceph", "fs", "fail", "cephfs"],
    ["beegfs-ctl", "--getentryinfo", "/beegfs/x"],
    ["sshfs", "-o", "ro", "u@h:/d", "/mnt/x"],
])
def test_guard_refuses_every_network_filesystem_tool_form(argv: list[str]) -> None:
    from ckptrescue.guard.check import check
    from ckptrescue.guard.context import GuardContext

    decision = check(argv, GuardContext())
    assert not decision.allowed, argv
    assert "allowlist" in decision.reason or "refused" in decision.reason


def test_identity_of_a_block_device_node_is_its_disk() -> None:
    disk = next((Path("/dev") / d.name for d in Path("/sys/block").iterdir()
                 if (Path("/dev") / d.name).exists() and not d.name.startswith(("loop", "ram", "zram"))),
                None)
    if disk is None:
        pytest.skip("no disk node in /dev")
    ident = netfs.storage_identity(disk)
    assert ident.dev.startswith("block ") and ident.kind in {"block", "ram", "local-unknown"}
    net = CASES["nfsA"]
    if ident.kind == "block":  # imaging a local disk onto NFS: other storage
        assert decide(ident, net)[0] is Sameness.DIFFERENT
