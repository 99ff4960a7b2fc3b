"""The storage behind a path with no local disk: network, parallel and FUSE filesystems.

``samedisk`` names the physical disks under a path from sysfs; for NFS, Lustre, GPFS (IBM
Storage Scale), CephFS, BeeGFS, WekaFS and FUSE there is no local disk to name, and ``copy``
refuses. This module says *which storage* such a path is on, from ``/proc/self/mountinfo`` (and
``statvfs``), and decides whether a copy destination could be that same storage.

Pure parts (unit-tested over every pair of kinds, ``tests/storage/test_netfs.py``):

* :func:`parse_source` — a mount entry's fstype, source and super options -> the storage's
  servers and name: NFS ``server:/export`` and ``addr=``; Lustre ``nid[,nid][:nid]:/fsname``;
  CephFS ``mon1:6789,mon2:/path`` (+ ``mds_namespace=``/``fs=``) and the new
  ``name@fsid.fsname=/path`` syntax; GPFS's device; BeeGFS's ``cfgFile=``; WekaFS
  ``backend/fs``; FUSE's subtype (``fuse.sshfs``) and ``user@host:/path``.
* :func:`decide` — two :class:`StorageIdentity` values -> (same | different | unknown, why).
* :func:`check_tail` — stat size vs what a read of the last block returns (stale metadata).

Effectful parts: :func:`storage_identity` (reads mountinfo, statvfs, sysfs through ``samedisk``,
the local addresses, the FUSE connection's daemon when visible) and :func:`same_storage`;
:func:`tail_check` reads a file's last block.

Nothing here writes or runs a program.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ckptrescue.model import Finding, JsonObject, Severity
from ckptrescue.storage import samedisk, sysfs
from ckptrescue.storage.samedisk import Sameness

# fstype (mountinfo field 9) -> kind
KINDS: dict[str, str] = {
    "nfs": "nfs", "nfs4": "nfs",
    "lustre": "lustre",
    "gpfs": "gpfs",
    "ceph": "cephfs", "fuse.ceph-fuse": "cephfs",
    "beegfs": "beegfs", "fhgfs": "beegfs",
    "wekafs": "wekafs",
}
NETWORK_KINDS = frozenset({"nfs", "lustre", "gpfs", "cephfs", "beegfs", "wekafs", "fuse"})
LOCAL_KINDS = frozenset({"block", "ram", "local-unknown"})
# a client can re-export any filesystem it mounts: an NFS server or an sshfs host may be serving a
# Lustre/GPFS/... filesystem, so these never prove "elsewhere" against another network filesystem
REEXPORTERS = frozenset({"nfs", "fuse"})
# FUSE daemons whose data is on other hosts by design (source names the remote)
REMOTE_FUSE = frozenset({"sshfs", "rclone", "s3fs", "gcsfuse", "goofys", "blobfuse",
                         "blobfuse2", "mountpoint-s3", "juicefs"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                            "ip6-loopback", "0@lo"})


@dataclass(frozen=True)
class StorageIdentity:
    """Which storage a path is on.

    ``kind``: ``block`` (samedisk named its disks: ``leaves``), ``ram`` (tmpfs), ``local-unknown``
    (a local filesystem samedisk cannot resolve: overlayfs, btrfs, ZFS), or a network kind
    (``nfs``, ``lustre``, ``gpfs``, ``cephfs``, ``beegfs``, ``wekafs``, ``fuse``).
    ``servers``: the hosts/addresses serving it (NFS server and ``addr=``, Lustre MGS NIDs, Ceph
    monitors, the sshfs host, BeeGFS management host) — each name as given and resolved.
    ``name``: the export path, Lustre/CephFS/WekaFS filesystem name, GPFS device, sshfs remote
    path or object-store bucket. ``served_here``: True when this host serves it (a loopback or
    local address, a Lustre target mounted here, a Ceph OSD or BeeGFS storage daemon running
    here), None when the kit cannot tell (GPFS NSDs may be this node's disks), False otherwise.
    ``backing``: for a filesystem served here whose exported path is visible locally (sshfs or
    NFS from this host), the identity of that local path.
    """

    path: str
    kind: str
    fstype: str = ""
    source: str = ""
    mountpoint: str = ""
    root: str = "/"
    dev: str = ""  # major:minor of the mounted filesystem (st_dev)
    servers: frozenset[str] = frozenset()
    name: str = ""
    cluster: str = ""  # Ceph fsid, GPFS cluster when known
    fsid: str = ""  # statvfs f_fsid (hex), recorded; not used to decide (0 on FUSE/NFS)
    daemon: str = ""  # FUSE subtype ("sshfs") or daemon name
    daemon_pid: int | None = None
    remote: bool = False  # a FUSE daemon whose data lives on other hosts by design
    served_here: bool | None = False
    backing: StorageIdentity | None = None
    leaves: frozenset[str] = frozenset()
    options: tuple[str, ...] = ()
    note: str = ""

    @property
    def network(self) -> bool:
        return self.kind in NETWORK_KINDS

    def describe(self) -> str:
        if self.kind == "block":
            return "local disk " + ", ".join(sorted(self.leaves))
        if self.kind == "ram":
            return "RAM (tmpfs)"
        if self.kind == "local-unknown":
            return f"local {self.fstype or 'filesystem'} ({self.note or 'disks not named'})"
        who = ",".join(sorted(self.servers)) or "?"
        what = {"nfs": f"NFS {who}:{self.name}", "lustre": f"Lustre {self.name} (MGS {who})",
                "gpfs": f"GPFS device {self.name}", "cephfs": f"CephFS {self.name or '?'} "
                f"(cluster {self.cluster or who})", "beegfs": f"BeeGFS (mgmtd {who})",
                "wekafs": f"WekaFS {self.name}",
                "fuse": f"FUSE {self.daemon or '?'} {self.source}"}
        return what.get(self.kind, f"{self.fstype} {self.source}")

    def to_json(self) -> JsonObject:
        return {"path": self.path, "kind": self.kind, "fstype": self.fstype,
                "source": self.source, "mountpoint": self.mountpoint, "root": self.root,
                "dev": self.dev, "servers": sorted(self.servers), "name": self.name,
                "cluster": self.cluster, "fsid": self.fsid, "daemon": self.daemon,
                "daemon_pid": self.daemon_pid, "remote": self.remote,
                "served_here": self.served_here,
                "backing": self.backing.to_json() if self.backing else None,
                "leaves": sorted(self.leaves), "note": self.note, "describe": self.describe()}


# ---------------------------------------------------------------------------------------------
# pure: mount sources


@dataclass(frozen=True)
class SourceFacts:
    kind: str
    servers: tuple[str, ...] = ()
    name: str = ""
    cluster: str = ""
    daemon: str = ""
    remote: bool = False
    config: str = ""  # BeeGFS cfgFile= (the management host is in it)


def kind_of(fstype: str) -> str | None:
    """The network kind of a mountinfo fstype, or None for a local filesystem."""
    if fstype in KINDS:
        return KINDS[fstype]
    if fstype == "fuse" or fstype == "fuseblk" or fstype.startswith("fuse."):
        return "fuse"
    return None


def _opt(options: Iterable[str], key: str) -> str | None:
    for o in options:
        k, sep, v = o.partition("=")
        if sep and k == key:
            return v
    return None


def split_host(text: str) -> tuple[str, str]:
    """``host:/path``, ``[v6]:/path``, ``user@host:path`` -> (host, path); no host -> ("", text)."""
    m = re.match(r"^(?:[^@/]*@)?\[([^\]]+)\]:(.*)$", text)
    if m:
        return m.group(1), m.group(2)
    m = re.match(r"^(?:[^@/]*@)?([^:/\[\]]+):(.*)$", text)
    if m:
        return m.group(1), m.group(2)
    return "", text


def parse_source(fstype: str, source: str, super_options: Iterable[str] = ()) -> SourceFacts:
    """What a mount entry says about the storage behind it (pure)."""
    opts = tuple(super_options)
    kind = kind_of(fstype)
    if kind is None:
        return SourceFacts("local")
    if kind == "nfs":
        host, export = split_host(source)
        servers = [h for h in (host, _opt(opts, "addr")) if h]
        return SourceFacts(kind, tuple(dict.fromkeys(servers)), export or "/")
    if kind == "lustre":
        # mgsnid[,nid...][:failover-mgsnid...]:/fsname (mount.lustre(8))
        nids, sep, fsname = source.rpartition(":/")
        if not sep:
            return SourceFacts(kind, (), source)
        servers = [n for group in nids.split(":") for n in group.split(",") if n]
        return SourceFacts(kind, tuple(servers), fsname.strip("/").split("/")[0])
    if kind == "cephfs":
        fsname = _opt(opts, "mds_namespace") or _opt(opts, "fs") or ""
        m = re.match(r"^(?:[^@=]*@)?([0-9a-fA-F-]{36})?\.?([^=]*)=(/.*)$", source)
        if m and "=" in source and ":" not in source.split("=", 1)[0]:
            # new syntax (Linux 5.17+): name@fsid.fsname=/path
            mons = _opt(opts, "mon_addr") or ""
            servers = tuple(a for a in re.split(r"[/,]", mons) if a)
            return SourceFacts(kind, servers, m.group(2) or fsname, cluster=m.group(1) or "")
        mons, sep, _path = source.rpartition(":/")
        servers = tuple(a for a in mons.split(",") if a) if sep else ()
        return SourceFacts(kind, servers, fsname, cluster=_opt(opts, "fsid") or "")
    if kind == "gpfs":
        return SourceFacts(kind, (), source.removeprefix("/dev/"))
    if kind == "beegfs":
        return SourceFacts(kind, (), "", config=_opt(opts, "cfgFile") or "")
    if kind == "wekafs":
        backend, sep, fs = source.rpartition("/")
        return SourceFacts(kind, (backend,) if sep and backend else (), fs or source)
    # FUSE: fstype fuse.<subtype>; source is what the daemon passed as fsname
    daemon = fstype.partition(".")[2] or source
    host, path = split_host(source)
    if daemon == "sshfs" or (host and daemon in REMOTE_FUSE):
        return SourceFacts(kind, (host,) if host else (), path, daemon=daemon, remote=bool(host))
    if daemon in REMOTE_FUSE:  # object-store FUSE: the bucket is the storage
        return SourceFacts(kind, (), source, daemon=daemon, remote=True)
    return SourceFacts(kind, (), source, daemon=daemon)


def beegfs_mgmtd(config_text: str) -> str:
    """``sysMgmtdHost`` of a beegfs-client.conf (pure)."""
    m = re.search(r"^\s*sysMgmtdHost\s*=\s*(\S+)", config_text, re.MULTILINE)
    return m.group(1) if m else ""


def is_loopback(host: str) -> bool:
    h = host.strip("[]").lower()
    if h in LOOPBACK_NAMES or h.endswith("@lo"):
        return True
    try:
        return ipaddress.ip_address(h.split("@")[0].split("%")[0]).is_loopback
    except ValueError:
        return False


def lustre_host(nid: str) -> str:
    """``10.0.0.1@tcp`` / ``10.0.0.1@o2ib3`` -> ``10.0.0.1``; ``0@lo`` stays."""
    return nid if nid.endswith("@lo") else nid.split("@")[0]


def local_addresses_from_fib_trie(text: str) -> set[str]:
    """The host's own IPv4 addresses: ``/32 host LOCAL`` entries of ``/proc/net/fib_trie``."""
    out: set[str] = set()
    last = ""
    for line in text.splitlines():
        m = re.search(r"\|--\s+(\d+\.\d+\.\d+\.\d+)", line)
        if m:
            last = m.group(1)
        elif "/32 host LOCAL" in line and last:
            out.add(last)
    return out


def local_addresses_from_if_inet6(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        f = line.split()
        if f and len(f[0]) == 32:
            out.add(str(ipaddress.IPv6Address(int(f[0], 16))))
    return out


# ---------------------------------------------------------------------------------------------
# pure: the decision


def _overlap(a: str, b: str) -> bool:
    """One path is the other or under it."""
    a, b = "/" + a.strip("/"), "/" + b.strip("/")
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _hosts(ident: StorageIdentity) -> frozenset[str]:
    if ident.kind == "lustre":
        return frozenset(lustre_host(s).lower() for s in ident.servers)
    return frozenset(s.strip("[]").lower().rsplit(":", 1)[0] if s.count(":") == 1 else
                     s.strip("[]").lower() for s in ident.servers)


def _trees_on_hosts(a: StorageIdentity, b: StorageIdentity, ha: frozenset[str],
                    hb: frozenset[str], *, different: str, same: str,
                    one: str) -> tuple[Sameness, str]:
    """Two remote trees by their hosts: no host in common, one tree (the same or nested
    paths) on a common host, or two trees of one host (may share its disks). The messages
    are formats of ``ha``/``hb`` (each side's hosts), ``daemon``, ``host``, ``a``/``b`` (the
    paths)."""
    common = ha & hb
    if not common:
        return Sameness.DIFFERENT, different.format(ha=", ".join(sorted(ha)),
                                                    hb=", ".join(sorted(hb)), daemon=a.daemon)
    words = {"host": min(common), "a": a.name, "b": b.name}
    if _overlap(a.name, b.name):
        return Sameness.SAME, same.format(**words)
    return Sameness.UNKNOWN, one.format(**words)


def _same_kind(a: StorageIdentity, b: StorageIdentity) -> tuple[Sameness, str]:
    ha, hb = _hosts(a), _hosts(b)
    common = ha & hb
    if a.kind == "nfs":
        if not ha or not hb:
            return Sameness.UNKNOWN, "an NFS mount without a server address"
        return _trees_on_hosts(a, b, ha, hb, different="different NFS servers ({ha} vs {hb})",
                               same="the same NFS export tree on {host} ({a}, {b})",
                               one="one NFS server ({host}), exports {a} and {b}: they may be "
                                   "one filesystem or one disk on the server")
    if a.kind == "lustre":
        if a.name and b.name and a.name != b.name:
            return Sameness.DIFFERENT, (f"different Lustre filesystems ({a.name} vs {b.name}: "
                                        "each has its own OSTs)")
        if common:
            return Sameness.SAME, f"the same Lustre filesystem {a.name} (MGS {min(common)})"
        return Sameness.UNKNOWN, (f"Lustre filesystem {a.name} on both sides through different "
                                  "MGS NIDs: may be one filesystem")
    if a.kind == "cephfs":
        if a.cluster and b.cluster:
            if a.cluster != b.cluster:
                return Sameness.DIFFERENT, f"different Ceph clusters (fsid {a.cluster} vs {b.cluster})"
            same_cluster = True
        elif common:
            same_cluster = True
        else:
            return Sameness.UNKNOWN, "CephFS mounts whose monitors differ: may be one cluster"
        if same_cluster and (a.name or "") == (b.name or ""):
            return Sameness.SAME, f"the same CephFS filesystem {a.name or '(default)'}"
        return Sameness.UNKNOWN, ("one Ceph cluster: its filesystems share the cluster's OSDs "
                                  f"({a.name or '(default)'} vs {b.name or '(default)'})")
    if a.kind == "gpfs":
        if a.name == b.name:
            return Sameness.SAME, f"the same GPFS file system {a.name}"
        return Sameness.DIFFERENT, (f"different GPFS file systems ({a.name} vs {b.name}: each "
                                    "NSD belongs to one file system)")
    if a.kind == "beegfs":
        if not ha or not hb:
            return Sameness.UNKNOWN, "BeeGFS management host unknown (cfgFile not readable)"
        if common:
            return Sameness.SAME, f"the same BeeGFS instance (mgmtd {min(common)})"
        return Sameness.DIFFERENT, (f"different BeeGFS instances (mgmtd {', '.join(sorted(ha))} "
                                    f"vs {', '.join(sorted(hb))})")
    if a.kind == "wekafs":
        if a.name == b.name and (common or not ha or not hb):
            return Sameness.SAME, f"the same WekaFS filesystem {a.name}"
        return Sameness.UNKNOWN, ("WekaFS filesystems of one cluster share its drives; the "
                                  "client cannot tell two clusters apart")
    # FUSE
    if a.remote and b.remote:
        if a.daemon != b.daemon and (a.servers or b.servers):
            if ha and hb and not common:
                return Sameness.DIFFERENT, f"different remote hosts ({a.source} vs {b.source})"
            return Sameness.UNKNOWN, f"{a.daemon} and {b.daemon} may reach the same storage"
        if ha or hb:
            return _trees_on_hosts(a, b, ha, hb,
                                   different="different {daemon} hosts ({ha} vs {hb})",
                                   same="the same remote tree on {host}",
                                   one="one remote host ({host}), paths {a} and {b}: may be one "
                                       "disk there")
        if a.source == b.source:
            return Sameness.SAME, f"the same {a.daemon} bucket/remote {a.source}"
        return Sameness.DIFFERENT, f"different {a.daemon} remotes ({a.source} vs {b.source})"
    return Sameness.UNKNOWN, (f"FUSE daemon {a.daemon or '?'} / {b.daemon or '?'}: a local FUSE "
                              "daemon reads from storage the kit cannot see")


def decide(a: StorageIdentity, b: StorageIdentity, _depth: int = 0) -> tuple[Sameness, str]:
    """Could ``a`` (the source) and ``b`` (the destination) be the same storage? (pure)

    SAME when they provably are (one mounted filesystem, one export tree, one Lustre/CephFS/GPFS
    filesystem, one remote tree); DIFFERENT when the destination is provably elsewhere (a local
    disk or tmpfs against storage served by other hosts; different servers, filesystem names,
    clusters); UNKNOWN whenever the destination *could* be the same storage — callers refuse.
    """
    if _depth > 4:
        return Sameness.UNKNOWN, "identity chain too deep"
    if a.dev and a.dev == b.dev:
        return Sameness.SAME, f"both on one mounted filesystem (dev {a.dev}, {a.describe()})"
    # a filesystem served by this host: compare its local backing when known
    for x, y, swap in ((a, b, False), (b, a, True)):
        if x.network and x.served_here and x.backing is not None:
            verdict, why = (decide(y, x.backing, _depth + 1) if swap
                            else decide(x.backing, y, _depth + 1))
            return verdict, f"{x.describe()} is served by this host from {x.backing.path}: {why}"
    if a.kind in LOCAL_KINDS and b.kind in LOCAL_KINDS:
        if "local-unknown" in (a.kind, b.kind):
            return Sameness.UNKNOWN, ("a local filesystem whose disks cannot be named: "
                                      + (a.note if a.kind == "local-unknown" else b.note))
        common = a.leaves & b.leaves
        if common:
            return Sameness.SAME, "both sit on " + ", ".join(sorted(common))
        return Sameness.DIFFERENT, "no physical device in common"
    if a.kind == "unknown" or b.kind == "unknown":
        return Sameness.UNKNOWN, a.note or b.note or "storage not identified"
    net, other = (a, b) if a.network else (b, a)
    if other.kind in LOCAL_KINDS:
        if net.kind == "fuse" and not net.remote:
            return Sameness.UNKNOWN, (f"FUSE daemon {net.daemon or '?'}"
                                      f"{f' (pid {net.daemon_pid})' if net.daemon_pid else ''} "
                                      "serves local data the kit cannot trace to a disk")
        if net.served_here:
            return Sameness.UNKNOWN, (f"{net.describe()} is served by this host; its storage may "
                                      f"be {other.describe()}")
        if net.served_here is None:
            why = net.note or "the kit cannot tell whether this host holds its storage"
            return Sameness.UNKNOWN, f"{net.describe()}: {why}"
        return Sameness.DIFFERENT, (f"{net.describe()} is served by other hosts "
                                    f"({', '.join(sorted(net.servers)) or net.kind}); the other "
                                    f"side is {other.describe()}")
    # both network
    for x, y in ((a, b), (b, a)):
        if x.served_here and x.kind in REEXPORTERS | {y.kind}:
            return Sameness.UNKNOWN, (f"{x.describe()} is served by this host, which also mounts "
                                      f"{y.describe()} (and may be serving it)")
    if a.kind == b.kind:
        return _same_kind(a, b)
    if a.served_here is not False and b.served_here is not False:
        return Sameness.UNKNOWN, (f"both may be on this host's own disks ({a.describe()}: "
                                  f"{a.note or 'served here'}; {b.describe()}: "
                                  f"{b.note or 'served here'})")
    rex = [x for x in (a, b) if x.kind in REEXPORTERS]
    if rex:
        store = [x for x in rex if x.kind == "fuse" and x.remote
                 and x.daemon not in ("sshfs", "rclone")]
        if len(rex) == 1 and store:
            return Sameness.DIFFERENT, f"{store[0].describe()} is an object store"
        x = rex[0]
        y = b if x is a else a
        if x.kind == "fuse" and not x.remote:
            return Sameness.UNKNOWN, (f"FUSE daemon {x.daemon or '?'} serves local data the kit "
                                      f"cannot trace (it may pass {y.describe()} through)")
        return Sameness.UNKNOWN, (f"{x.describe()} may re-export {y.describe()} (an NFS/sshfs "
                                  "server can serve a filesystem it mounts)")
    return Sameness.DIFFERENT, f"different storage systems ({a.describe()} vs {b.describe()})"


# ---------------------------------------------------------------------------------------------
# effectful: identifying a path


@dataclass
class HostFacts:
    """What this host is: its names and addresses, its server roles (read once per call)."""

    names: set[str] = field(default_factory=set)
    lustre_targets: set[str] = field(default_factory=set)  # fsnames of Lustre targets mounted
    processes: set[str] = field(default_factory=set)  # comm of running processes

    def is_local(self, host: str) -> bool:
        h = host.strip("[]").lower()
        return is_loopback(h) or h in self.names or lustre_host(h) in self.names


SERVER_DAEMONS = {"cephfs": ("ceph-osd",), "beegfs": ("beegfs-storage", "beegfs-meta")}


def host_facts(entries: list[sysfs.MountEntry] | None = None) -> HostFacts:
    names: set[str] = set()
    for read, parse in ((Path("/proc/net/fib_trie"), local_addresses_from_fib_trie),
                        (Path("/proc/net/if_inet6"), local_addresses_from_if_inet6)):
        try:
            names |= parse(read.read_text())
        except OSError:
            pass
    for n in (socket.gethostname(), socket.getfqdn()):
        if n:
            names.add(n.lower())
            names.add(n.split(".")[0].lower())
    targets = set()
    for e in entries if entries is not None else sysfs.mounts():
        if e.fstype == "lustre" and e.source.startswith("/dev/"):
            sv = _opt(e.super_options, "svname") or ""
            targets.add(sv.rsplit("-", 1)[0] if "-" in sv else sv)
    procs: set[str] = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            procs.add(comm.read_text().strip())
        except OSError:
            pass
    return HostFacts(names, targets, procs)


def _resolve(host: str) -> set[str]:
    """The host's addresses (getaddrinfo; nothing when it does not resolve)."""
    h = host.strip("[]")
    if not h or h.endswith("@lo") or "@" in h:
        return set()
    try:
        return {str(ai[4][0]) for ai in socket.getaddrinfo(h, None)}
    except (OSError, UnicodeError):
        return set()


def fuse_daemon_pid(entry: sysfs.MountEntry) -> int | None:
    """The pid of the FUSE daemon serving ``entry``, when visible.

    The kernel does not expose a FUSE connection's daemon pid in ``/sys/fs/fuse/connections/N``
    (it holds ``waiting``, ``abort``, ``max_background``, ``congestion_threshold``); the
    connection number is the mount's minor device number. The daemon is the process holding an
    open ``/dev/fuse`` whose ``fdinfo`` names that connection... which the kernel does not print
    either. What is visible: a process whose command line names the mount point (sshfs, fusepy
    daemons), among those holding ``/dev/fuse`` open.
    """
    mp = entry.mountpoint
    found: list[int] = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if mp.encode() not in cmd:
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            fds = []
        for fd in fds:
            try:
                if os.readlink(fd) == "/dev/fuse":
                    found.append(int(proc.name))
                    break
            except OSError:
                continue
    return found[0] if len(found) == 1 else None


def _local_identity(path: Path, entry: sysfs.MountEntry | None, dev: str) -> StorageIdentity:
    fstype = entry.fstype if entry else ""
    base = StorageIdentity(str(path), "local-unknown", fstype=fstype,
                           source=entry.source if entry else "",
                           mountpoint=entry.mountpoint if entry else "",
                           root=entry.root if entry else "/", dev=dev)
    try:
        leaves = samedisk.physical_leaves(path)
    except (samedisk.UnknownMediaError, OSError) as exc:
        return replace(base, note=str(exc))
    kind = "ram" if leaves == frozenset({"ram"}) else "block"
    return replace(base, kind=kind, leaves=leaves)


def _existing(path: Path) -> Path:
    p = path
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def storage_identity(path: str | Path, *, host: HostFacts | None = None,
                     _depth: int = 0) -> StorageIdentity:
    """The storage behind ``path`` (or its nearest existing parent): reads mountinfo, statvfs,
    sysfs, /proc; writes nothing."""
    p = _existing(Path(os.path.realpath(path)))
    st = p.stat()
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if stat.S_ISBLK(st.st_mode):  # a device node: the disk it names, not the devtmpfs it is on
        return _local_identity(p, None, f"block {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    entries = sysfs.mounts()
    entry = sysfs.mount_of(p)
    if entry is None or kind_of(entry.fstype) is None:
        return _local_identity(p, entry, dev)
    host = host or host_facts(entries)
    facts = parse_source(entry.fstype, entry.source, entry.super_options)
    servers = set(facts.servers)
    note = ""
    if facts.kind == "beegfs" and facts.config:
        try:
            mgmtd = beegfs_mgmtd(Path(facts.config).read_text())
        except OSError as exc:
            mgmtd, note = "", f"cfgFile {facts.config}: {exc.strerror}"
        if mgmtd:
            servers.add(mgmtd)
    resolved = set(servers)
    for s in servers:
        resolved |= _resolve(lustre_host(s) if facts.kind == "lustre" else s)
    try:
        fsid = f"{os.statvfs(p).f_fsid:x}"
    except (OSError, AttributeError):
        fsid = ""
    served: bool | None = any(host.is_local(s) for s in resolved)
    if facts.kind == "lustre" and facts.name in host.lustre_targets:
        served = True
    if any(d in host.processes for d in SERVER_DAEMONS.get(facts.kind, ())):
        served = True
    if facts.kind == "gpfs" and not served:
        served, note = None, ("GPFS NSDs may be this node's own disks (shared-nothing/FPO "
                              "clusters); `mmlsnsd -m` would tell but is not an allowlisted "
                              "read form")
    if facts.kind == "wekafs" and not served:
        served, note = None, ("a WekaFS client may run converged on drives of this host; the "
                              "client mount does not say")
    if facts.kind == "fuse" and not facts.remote:
        served = None if not facts.servers else served
    backing = None
    if served and facts.kind in ("nfs", "fuse") and facts.name and _depth < 2:
        local = Path(facts.name)
        if local.is_absolute() and local.exists():
            backing = storage_identity(local, host=host, _depth=_depth + 1)
    pid = fuse_daemon_pid(entry) if facts.kind == "fuse" else None
    return StorageIdentity(
        str(p), facts.kind, fstype=entry.fstype, source=entry.source,
        mountpoint=entry.mountpoint, root=entry.root, dev=dev,
        servers=frozenset(resolved), name=facts.name, cluster=facts.cluster, fsid=fsid,
        daemon=facts.daemon, daemon_pid=pid, remote=facts.remote, served_here=served,
        backing=backing, options=entry.super_options, note=note)


@dataclass(frozen=True)
class StorageComparison:
    verdict: Sameness
    reason: str
    source: StorageIdentity
    dest: StorageIdentity

    def to_json(self) -> JsonObject:
        return {"verdict": str(self.verdict), "reason": self.reason,
                "source": self.source.to_json(), "dest": self.dest.to_json()}


def same_storage(a: str | Path, b: str | Path) -> tuple[Sameness, str]:
    """(same | different | unknown, why) for a copy from ``a`` to ``b``; callers refuse unless
    DIFFERENT."""
    cmp = compare(a, b)
    return cmp.verdict, cmp.reason


def compare(a: str | Path, b: str | Path) -> StorageComparison:
    """:func:`same_storage` with both identities (for the audit record)."""
    try:
        host = host_facts()
        ia = storage_identity(a, host=host)
        ib = storage_identity(b, host=host)
    except OSError as exc:
        unknown = StorageIdentity(str(a), "unknown", note=str(exc))
        return StorageComparison(Sameness.UNKNOWN, f"cannot identify the storage: {exc}",
                                 unknown, replace(unknown, path=str(b)))
    verdict, why = decide(ia, ib)
    return StorageComparison(verdict, why, ia, ib)


# ---------------------------------------------------------------------------------------------
# stale metadata: the size the metadata server reports vs the bytes a read returns

TAIL_BLOCK = 4096


@dataclass(frozen=True)
class TailCheck:
    """What reading the last block of a file returned, against its stat size."""

    path: str
    size: int
    offset: int  # where the read started
    wanted: int
    got: int  # bytes the read returned before EOF/error
    error: str = ""  # errno name when the read failed (EIO: the data server is unreachable)
    beyond: int = 0  # bytes returned past the stat size (size is stale the other way)

    @property
    def readable_end(self) -> int:
        return self.offset + self.got

    @property
    def ok(self) -> bool:
        return not self.error and self.got == self.wanted and not self.beyond

    def to_json(self) -> JsonObject:
        return {"path": self.path, "size": self.size, "offset": self.offset,
                "wanted": self.wanted, "got": self.got, "error": self.error,
                "beyond": self.beyond, "readable_end": self.readable_end, "ok": self.ok}


def check_tail(path: str, size: int, pread: Callable[[int, int], bytes],
               block: int = TAIL_BLOCK) -> TailCheck:
    """Read the last ``block`` bytes below ``size`` (and one probe byte at ``size``) through
    ``pread(length, offset)``; pure over ``pread``. A short read before ``size``, an OSError, or
    data past ``size`` is stale or unreachable data."""
    offset = max(0, size - block)
    wanted = size - offset
    got = 0
    try:
        while got < wanted:
            chunk = pread(wanted - got, offset + got)
            if not chunk:
                break
            got += len(chunk)
    except OSError as exc:
        return TailCheck(path, size, offset, wanted, got,
                         error=errno.errorcode.get(exc.errno or 0, str(exc)))
    beyond = 0
    if got == wanted:
        try:
            beyond = len(pread(1, size))
        except OSError:
            beyond = 0
    return TailCheck(path, size, offset, wanted, got, beyond=beyond)


def tail_check(path: str | Path, block: int = TAIL_BLOCK) -> TailCheck:
    """:func:`check_tail` on a real file (opened read-only, ``O_NOATIME`` where allowed)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | getattr(os, "O_NOATIME", 0))
    except PermissionError:
        fd = os.open(path, flags)
    try:
        size = os.fstat(fd).st_size
        return check_tail(str(path), size, lambda n, off: os.pread(fd, n, off), block)
    finally:
        os.close(fd)


def tail_findings(checks: Iterable[TailCheck], ev: str, *, fs: str = "") -> list[Finding]:
    """NF001 (read ends early), NF002 (read fails: data unreachable), NF003 (data past the size)."""
    out: list[Finding] = []
    where = f" on {fs}" if fs else ""
    for c in checks:
        if c.error:
            out.append(Finding("NF002", Severity.ERROR, f"{c.path}: reading its last block "
                               f"fails with {c.error}{where}: its data is unreachable (a data "
                               "server/OST down or evicted)", evidence=ev, source="netfs",
                               details=c.to_json()))
        elif c.got < c.wanted:
            out.append(Finding("NF001", Severity.ERROR, f"{c.path}: size {c.size} from the "
                               f"metadata server, but reads end at {c.readable_end}{where}",
                               evidence=ev, source="netfs", details=c.to_json()))
        elif c.beyond:
            out.append(Finding("NF003", Severity.WARNING, f"{c.path}: data readable past the "
                               f"size {c.size} the metadata server reports{where}",
                               evidence=ev, source="netfs", details=c.to_json()))
    return out
