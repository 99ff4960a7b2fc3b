"""The Hugging Face hub cache (``~/.cache/huggingface/hub``), verified offline.

Layout (huggingface_hub's "Understand caching" guide, and ``file_download.py``)::

    <cache>/models--<org>--<name>/      (also datasets--, spaces--)
        blobs/<etag>                    the file's bytes, named by its etag:
                                        SHA-256 (64 hex) for LFS files, the git blob hash
                                        sha1(b"blob <len>\\0" + data) (40 hex) otherwise
        blobs/<etag>[.<8 hex>].incomplete   a download in progress or interrupted
        refs/<ref>                      a branch or tag name -> the commit hash (text)
        snapshots/<commit>/<path>       a relative symlink to ../../blobs/<etag>
        .no_exist/<commit>/<path>       a cached "no such file" (not a file of the revision)

Every blob is hashed and compared with its name (nothing is trusted from the cache's own
bookkeeping, no network); every snapshot entry is resolved without following it outside the
repository; and each problem is tied to the revisions it breaks: a blob whose bytes do not
match its name breaks every revision linking to it; a dangling link breaks its revision (and
says when the blob it wants is an ``.incomplete`` download); an interrupted download is listed
with its repository and the refs that may be waiting for it (the cache makes the link only
after a download completes, so it cannot say which file). Nothing is written, nothing followed
outside the cache: a link that leaves ``blobs/``, a loop, a FIFO are findings.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.datasets.hashing import locate_read_error
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_INCOMPLETE = re.compile(r"^(?P<etag>[0-9a-f]{40}|[0-9a-f]{64})(?:\.[0-9a-f]{8})?\.incomplete$")
CHUNK = 1 << 20
MAX_LINKS = 1_000_000  # snapshot entries per repository
MAX_DEPTH = 64


@dataclass
class Blob:
    name: str
    size: int = 0
    kind: str = ""  # sha256, git-sha1, incomplete, unknown
    status: str = ""  # ok, mismatch, unreadable, not-regular, incomplete, unrecognized
    actual: str | None = None
    error: str | None = None
    error_offset: int | None = None
    linked_from: list[str] = field(default_factory=list)  # "rev:path"

    def to_json(self) -> JsonObject:
        return {"name": self.name, "size": self.size, "kind": self.kind, "status": self.status,
                "actual": self.actual, "error": self.error, "error_offset": self.error_offset,
                "linked_from": self.linked_from[:20], "links": len(self.linked_from)}


@dataclass
class Link:
    revision: str
    path: str
    status: str  # ok, dangling, incomplete, mismatch, outside, loop, not-a-link, unreadable
    blob: str | None = None
    detail: str = ""

    def to_json(self) -> JsonObject:
        return {"revision": self.revision, "path": self.path, "status": self.status,
                "blob": self.blob, "detail": self.detail}


@dataclass
class Repo:
    folder: str
    repo_type: str
    repo_id: str
    refs: dict[str, str] = field(default_factory=dict)
    revisions: list[str] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)  # problems only, plus counts below
    links_ok: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.repo_type} {self.repo_id}"

    def broken_revisions(self) -> dict[str, list[str]]:
        """revision -> what breaks it."""
        out: dict[str, list[str]] = {}
        for link in self.links:
            out.setdefault(link.revision, []).append(f"{link.path}: {link.status}"
                                                     + (f" ({link.detail})" if link.detail
                                                        else ""))
        return out

    def names_of(self, commit: str) -> list[str]:
        return sorted(r for r, c in self.refs.items() if c == commit)

    def to_json(self) -> JsonObject:
        return {"folder": self.folder, "repo_type": self.repo_type, "repo_id": self.repo_id,
                "refs": dict(sorted(self.refs.items())), "revisions": self.revisions,
                "blobs": [b.to_json() for b in self.blobs if b.status != "ok"],
                "blobs_total": len(self.blobs),
                "blobs_ok": sum(1 for b in self.blobs if b.status == "ok"),
                "bytes": sum(b.size for b in self.blobs),
                "links": [x.to_json() for x in self.links], "links_ok": self.links_ok,
                "broken_revisions": self.broken_revisions(), "problems": self.problems}


@dataclass
class HubCacheResult(Recorded):
    root: str
    repos: list[Repo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # entries of the cache root itself
    bytes_hashed: int = 0

    def counts(self) -> dict[str, int]:
        blobs = [b for r in self.repos for b in r.blobs]
        links = [x for r in self.repos for x in r.links]
        return {"repos": len(self.repos), "revisions": sum(len(r.revisions) for r in self.repos),
                "blobs": len(blobs), "blobs_ok": sum(1 for b in blobs if b.status == "ok"),
                "blobs_bad": sum(1 for b in blobs if b.status in ("mismatch", "unreadable",
                                                                  "not-regular")),
                "incomplete": sum(1 for b in blobs if b.status == "incomplete"),
                "links_ok": sum(r.links_ok for r in self.repos), "links_bad": len(links),
                "broken_revisions": sum(len(r.broken_revisions()) for r in self.repos)}

    @property
    def ok(self) -> bool:
        c = self.counts()
        return not (c["blobs_bad"] or c["links_bad"] or c["incomplete"] or self.problems
                    or any(r.problems for r in self.repos))

    def answer(self) -> str:
        c = self.counts()
        text = (f"hub cache: {c['repos']} repos, {c['revisions']} revisions, {c['blobs_ok']} of "
                f"{c['blobs']} blobs match their names")
        if c["broken_revisions"]:
            broken = [f"{r.repo_id}@{rev[:10]}" for r in self.repos
                      for rev in r.broken_revisions()]
            text += (f"; {c['broken_revisions']} revision(s) broken: " + ", ".join(broken[:4])
                     + (", ..." if len(broken) > 4 else ""))
        if c["blobs_bad"]:
            text += f"; {c['blobs_bad']} blob(s) damaged"
        if c["incomplete"]:
            text += f"; {c['incomplete']} incomplete download(s)"
        return text

    def findings(self) -> list[Finding]:  # noqa: C901 - one finding kind per problem
        out: list[Finding] = []
        src = "hub_cache.verify"
        for p in self.problems:
            out.append(Finding("HB007", Severity.WARNING, p, evidence=self.root, source=src))
        for repo in self.repos:
            where = str(Path(self.root) / repo.folder)
            for b in repo.blobs:
                breaks = sorted({ref.split(":", 1)[0] for ref in b.linked_from})
                revs = ", ".join(f"{rev[:12]}" + (f" ({', '.join(repo.names_of(rev))})"
                                                  if repo.names_of(rev) else "")
                                 for rev in breaks) or "no revision links to it"
                ev = f"{where}/blobs/{b.name}"
                if b.status == "mismatch":
                    out.append(Finding("HB001", Severity.ERROR, f"{repo.label}: blob {b.name} "
                                       f"does not match its name ({b.kind} is {b.actual}); "
                                       f"breaks {revs}", evidence=ev, source=src,
                                       details={"repo": repo.repo_id, "revisions": breaks,
                                                "files": b.linked_from[:20]}))
                elif b.status == "unreadable":
                    out.append(Finding("HB005", Severity.ERROR, f"{repo.label}: blob {b.name} "
                                       f"unreadable ({b.error}); breaks {revs}", evidence=ev,
                                       offset=b.error_offset, source=src,
                                       details={"repo": repo.repo_id, "revisions": breaks}))
                elif b.status in ("not-regular", "unrecognized"):
                    out.append(Finding("HB007", Severity.WARNING, f"{repo.label}: blobs/{b.name}: "
                                       f"{b.error}", evidence=ev, source=src))
                elif b.status == "incomplete":
                    refs = ", ".join(f"{k} -> {v[:12]}" for k, v in sorted(repo.refs.items()))
                    out.append(Finding(
                        "HB003", Severity.WARNING, f"{repo.label}: interrupted download "
                        f"{b.name} ({b.size} bytes); "
                        + (f"breaks {revs}" if b.linked_from else
                           "the revision being fetched lacks that file (the cache links a file "
                           "only once its download completes); refs: " + (refs or "none")),
                        evidence=ev, source=src,
                        details={"repo": repo.repo_id, "revisions": breaks,
                                 "refs": repo.refs}))
            for link in repo.links:
                code = {"dangling": "HB002", "incomplete": "HB002", "mismatch": "HB001",
                        "outside": "HB004", "loop": "HB004", "not-a-link": "HB007",
                        "unreadable": "HB005"}.get(link.status, "HB007")
                if link.status == "mismatch":
                    continue  # the blob's own HB001 names this revision
                sev = Severity.WARNING if code == "HB007" else Severity.ERROR
                names = repo.names_of(link.revision)
                out.append(Finding(code, sev, f"{repo.label}@{link.revision[:12]}"
                                   + (f" ({', '.join(names)})" if names else "")
                                   + f": {link.path}: {link.status}"
                                   + (f": {link.detail}" if link.detail else ""),
                                   evidence=f"{where}/snapshots/{link.revision}/{link.path}",
                                   source=src, details={"repo": repo.repo_id,
                                                        "revision": link.revision,
                                                        "refs": names, "blob": link.blob}))
            for p in repo.problems:
                code = "HB006" if p.startswith("ref ") else "HB007"
                out.append(Finding(code, Severity.WARNING, f"{repo.label}: {p}", evidence=where,
                                   source=src))
        return out

    def to_json(self) -> JsonObject:
        return {"root": self.root, "counts": self.counts(), "bytes_hashed": self.bytes_hashed,
                "repos": [r.to_json() for r in self.repos], "problems": self.problems,
                "answer": self.answer()}


# -- hashing ----------------------------------------------------------------------------------

def _hash_blob(path: str, blob: Blob, on_bytes: Callable[[int], None] | None) -> None:
    """Hash ``path`` as its name says (SHA-256, or git's blob SHA-1); never follows a symlink,
    never opens anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        blob.status = "not-regular" if exc.errno == errno.ELOOP else "unreadable"
        blob.error = "a symlink, not a blob" if exc.errno == errno.ELOOP else \
            (exc.strerror or str(exc))
        blob.error_offset = 0
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            blob.status, blob.error = "not-regular", "not a regular file (never opened for read)"
            return
        blob.size = st.st_size
        digest = hashlib.sha256() if blob.kind == "sha256" else hashlib.sha1()  # noqa: S324
        if blob.kind == "git-sha1":
            digest.update(b"blob %d\0" % st.st_size)
        done = 0
        while True:
            try:
                data = os.read(fd, CHUNK)
            except OSError as exc:
                blob.status, blob.error = "unreadable", exc.strerror or str(exc)
                blob.error_offset = locate_read_error(fd, done, CHUNK) \
                    if exc.errno == errno.EIO else done
                return
            if not data:
                break
            digest.update(data)
            done += len(data)
            if on_bytes is not None:
                on_bytes(len(data))
        if done != st.st_size:  # changed while read: the header hashed the wrong length
            blob.status, blob.error = "unreadable", f"size changed while read ({done} bytes)"
            return
        blob.actual = digest.hexdigest()
        blob.status = "ok" if blob.actual == blob.name else "mismatch"
    finally:
        os.close(fd)


# -- the layout -------------------------------------------------------------------------------

def _repo_of(folder: str) -> tuple[str, str] | None:
    kind, sep, rest = folder.partition("--")
    if not sep or kind not in REPO_TYPES or not rest:
        return None
    return REPO_TYPES[kind], rest.replace("--", "/")


def _read_refs(repo_dir: Path, repo: Repo) -> None:
    refs = repo_dir / "refs"
    if not refs.is_dir() or refs.is_symlink():
        return
    for dirpath, dirnames, filenames in os.walk(refs, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(refs).as_posix()
            try:
                if not stat.S_ISREG(p.lstat().st_mode):
                    repo.problems.append(f"refs/{rel}: not a regular file")
                    continue
                with open(p, "rb") as fh:
                    text = fh.read(200).decode("ascii", "replace").strip()
            except OSError as exc:
                repo.problems.append(f"refs/{rel}: unreadable ({exc.strerror or exc})")
                continue
            if _SHA1.match(text):
                repo.refs[rel] = text
            else:
                repo.problems.append(f"refs/{rel}: not a commit hash ({text[:50]!r})")


def _blobs(repo_dir: Path, repo: Repo, progress: Callable[[int], None] | None,
           cancel: Any) -> dict[str, Blob]:
    out: dict[str, Blob] = {}
    blobs = repo_dir / "blobs"
    try:
        names = sorted(os.listdir(blobs)) if blobs.is_dir() and not blobs.is_symlink() else []
    except OSError as exc:
        repo.problems.append(f"blobs/: unreadable ({exc.strerror or exc})")
        return out
    for name in names:
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        path = str(blobs / name)
        m = _INCOMPLETE.match(name)
        if m:
            blob = Blob(name=name, kind="incomplete", status="incomplete")
            try:
                blob.size = os.lstat(path).st_size
            except OSError:
                pass
            out[name] = blob
            continue
        kind = "sha256" if _SHA256.match(name) else "git-sha1" if _SHA1.match(name) else ""
        blob = Blob(name=name, kind=kind or "unknown")
        if not kind:
            blob.status = "unrecognized"
            blob.error = "not named by a SHA-256 or a git blob hash: cannot be verified"
        else:
            _hash_blob(path, blob, progress)
        out[name] = blob
    repo.blobs = list(out.values())
    return out


def _link_target(repo_dir: Path, entry: Path) -> tuple[str, str | None, str]:
    """(status, blob name, detail) of one snapshot entry, resolved without leaving the repo."""
    try:
        st = entry.lstat()
    except OSError as exc:
        return "unreadable", None, exc.strerror or str(exc)
    if not stat.S_ISLNK(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            return "not-a-link", None, ("a copied file (a cache without symlinks): not tied to "
                                        "a blob name, not verified")
        return "not-a-link", None, "not a file or a link"
    try:
        target = os.readlink(entry)
    except OSError as exc:
        return "unreadable", None, exc.strerror or str(exc)
    resolved = Path(os.path.normpath(os.path.join(entry.parent, target)))
    blobs = Path(os.path.normpath(repo_dir / "blobs"))
    if resolved.parent != blobs:
        return "outside", None, f"points at {target} (not into this repository's blobs/)"
    name = resolved.name
    try:
        st2 = resolved.lstat()
    except FileNotFoundError:
        return "dangling", name, f"blob {name} is missing"
    except OSError as exc:
        return "unreadable", name, exc.strerror or str(exc)
    if stat.S_ISLNK(st2.st_mode):
        return "loop", name, "the blob is itself a link"
    return "ok", name, ""


def _snapshots(repo_dir: Path, repo: Repo, blobs: dict[str, Blob]) -> None:
    snaps = repo_dir / "snapshots"
    try:
        revisions = sorted(os.listdir(snaps)) if snaps.is_dir() and not snaps.is_symlink() \
            else []
    except OSError as exc:
        repo.problems.append(f"snapshots/: unreadable ({exc.strerror or exc})")
        return
    incomplete = {m.group("etag"): b for b in blobs.values()
                  if (m := _INCOMPLETE.match(b.name))}
    seen = 0
    for rev in revisions:
        rev_dir = snaps / rev
        if not _SHA1.match(rev) or rev_dir.is_symlink() or not rev_dir.is_dir():
            repo.problems.append(f"snapshots/{rev}: not a revision directory")
            continue
        repo.revisions.append(rev)
        for dirpath, dirnames, filenames in os.walk(rev_dir, followlinks=False):
            depth = Path(dirpath).relative_to(rev_dir).parts
            if len(depth) > MAX_DEPTH:
                dirnames[:] = []
                continue
            dirnames.sort()
            entries = sorted(filenames) + sorted(d for d in dirnames
                                                 if (Path(dirpath) / d).is_symlink())
            for name in entries:
                seen += 1
                if seen > MAX_LINKS:
                    repo.problems.append(f"more than {MAX_LINKS} snapshot entries: the rest "
                                         "not checked")
                    return
                entry = Path(dirpath) / name
                rel = entry.relative_to(rev_dir).as_posix()
                status, blob, detail = _link_target(repo_dir, entry)
                if blob is not None and blob in blobs:
                    blobs[blob].linked_from.append(f"{rev}:{rel}")
                    if status == "ok" and blobs[blob].status != "ok":
                        status = "mismatch" if blobs[blob].status == "mismatch" else \
                            blobs[blob].status
                        detail = f"blob {blob}: {blobs[blob].status}"
                if status == "dangling" and blob in incomplete:
                    status, detail = "incomplete", f"blob {blob} is still downloading or " \
                        "interrupted (.incomplete)"
                    incomplete[blob].linked_from.append(f"{rev}:{rel}")
                if status == "ok":
                    repo.links_ok += 1
                else:
                    repo.links.append(Link(rev, rel, status, blob, detail))
    for name, commit in sorted(repo.refs.items()):
        if commit not in repo.revisions:
            repo.problems.append(f"ref {name} -> {commit}: that revision has no snapshot in "
                                 "the cache (loading it offline fails)")


def default_root() -> str:
    """Where huggingface_hub puts its cache: $HF_HUB_CACHE, $HF_HOME/hub, else
    ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(home, "hub")


def verify_cache(root: str | os.PathLike[str] | None = None, *,
                 progress: Callable[..., None] | None = None, cancel: Any = None
                 ) -> HubCacheResult:
    """Verify every blob of the hub cache at ``root`` against its name and every snapshot link
    against its blob (read only, no network)."""
    base = Path(root or default_root())
    try:
        st = base.stat()
    except OSError as exc:
        raise UsageError(f"{base}: cannot read the cache: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{base}: not a directory (a hub cache is a directory)")
    result = HubCacheResult(root=str(base))
    total = 0
    folders = sorted(os.listdir(base))
    for folder in folders:
        if folder.startswith(".") or folder in ("CACHEDIR.TAG", "version.txt"):
            continue  # .locks, huggingface_hub's own markers
        parsed = _repo_of(folder)
        p = base / folder
        if parsed is None or p.is_symlink() or not p.is_dir():
            result.problems.append(f"{folder}: not a repository folder (models--, datasets--, "
                                   "spaces--)")
            continue
        for blobs in (p / "blobs",):
            try:
                for name in os.listdir(blobs) if blobs.is_dir() else ():
                    try:
                        total += os.lstat(blobs / name).st_size
                    except OSError:
                        continue
            except OSError:
                continue
    done = 0

    def on_bytes(n: int) -> None:
        nonlocal done
        done += n
        result.bytes_hashed = done
        if progress is not None:
            progress(done, total)

    for folder in folders:
        parsed = _repo_of(folder)
        p = base / folder
        if parsed is None or folder.startswith(".") or p.is_symlink() or not p.is_dir():
            continue
        repo = Repo(folder=folder, repo_type=parsed[0], repo_id=parsed[1])
        _read_refs(p, repo)
        blobs = _blobs(p, repo, on_bytes, cancel)
        _snapshots(p, repo, blobs)
        result.repos.append(repo)
    result.record("hub_cache.verify", {"root": result.root, "counts": result.counts(),
                                       "answer": result.answer()})
    result.findings_here()
    return result
