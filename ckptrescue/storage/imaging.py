"""``image``: forensic imaging of a block device or image file with GNU ddrescue.

Order of work: refuse a destination on the same physical media (``samedisk``) or without room;
record the source in the evidence inventory (so the guard protects it); run a fast pass
(``-n``) and a retry pass (``-r N``) with the device's logical sector size and direct access
(``-d``, block devices only), polling the mapfile for progress; then judge from the mapfile
(ddrescue exits 0 with unreadable sectors), hash image and mapfile, hash the source when it was
fully readable, and add the image to the evidence inventory. A block-device source is
write-blocked at the block layer first (``BLKROSET``, :mod:`writeblock`; it stays after the kit
exits); once ddrescue is done and the image hashed, image and mapfile become read-only (mode
``a-w`` and ``chattr +i`` where the filesystem has the flag). Rerunning the same command after an
interruption resumes from the mapfile; a sidecar refuses a mapfile from an unrelated rescue.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects import output_dirs
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, RefusedError, ToolFailedError, UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.record.case import sha256_file
from ckptrescue.storage import netfs, samedisk, sysfs
from ckptrescue.storage.parsers import ddrescue_mapfile

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

# called as on_progress(done=BYTES_TRIED, total=DOMAIN_BYTES, summary=MAPFILE_SUMMARY_DICT)
ProgressFn = Callable[..., None]
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
ROOM_MARGIN = 1 << 20


@dataclass
class ImageResult(Recorded):
    image: str
    mapfile: str
    image_sha256: str
    size: int
    rescued_bytes: int
    bad_ranges: list[tuple[int, int]]
    mapfile_sha256: str = ""
    source: str = ""
    source_sha256: str | None = None
    rescued_sha256: str = ""  # SHA-256 over the '+' ranges only, in order
    sector_size: int = 512
    finished: bool = False
    unreadable_ranges: list[tuple[int, int]] = field(default_factory=list)
    evidence_id: str | None = None
    findings: list[Finding] = field(default_factory=list)
    resumed: bool = False

    def to_json(self) -> JsonObject:
        """The documented JSON shape (issue 5)."""
        return {"image": self.image, "mapfile": self.mapfile, "image_sha256": self.image_sha256,
                "size": self.size, "rescued_bytes": self.rescued_bytes,
                "bad_ranges": [[s, e] for s, e in self.bad_ranges]}

    def details(self) -> JsonObject:
        """Everything else known about the run (for reports)."""
        return {**self.to_json(), "mapfile_sha256": self.mapfile_sha256, "source": self.source,
                "source_sha256": self.source_sha256, "rescued_sha256": self.rescued_sha256,
                "sector_size": self.sector_size,
                "finished": self.finished, "evidence_id": self.evidence_id,
                "unreadable_ranges": [[s, e] for s, e in self.unreadable_ranges],
                "resumed": self.resumed, "findings": [f.to_json() for f in self.findings]}


def _source_facts(source: Path) -> JsonObject:
    if not source.exists():
        raise EvidenceError(f"{source}: no such device or file")
    is_dev = sysfs.is_block_device(source)
    if not is_dev and not source.is_file():
        raise EvidenceError(f"{source}: not a block device or regular file")
    facts: JsonObject = {
        "source": str(source), "realpath": os.path.realpath(source), "block_device": is_dev,
        "size": sysfs.size_bytes(source), "sector_size": sysfs.logical_sector_size(source),
    }
    if is_dev:
        name = sysfs.dev_name(source)
        base = sysfs.sys_dir(name)
        disk = sysfs.sys_dir(sysfs.parent_disk(name))
        facts.update({
            "kernel_name": name,
            "serial": sysfs.read_attr(disk / "device" / "serial"),
            "wwid": sysfs.read_attr(disk / "wwid") or sysfs.read_attr(disk / "device" / "wwid"),
            "model": sysfs.read_attr(disk / "device" / "model"),
            "readonly": sysfs.read_attr(base / "ro") == "1",
            "loop_backing_file": sysfs.loop_backing_file(name),
        })
    return facts


def _refuse_if_mounted_rw(source: Path, facts: JsonObject) -> None:
    if not facts["block_device"]:
        return
    name = facts["kernel_name"]
    for node in [name, *sysfs.partitions(name)]:
        for entry in sysfs.mounts_of_device(node):
            if not entry.readonly:
                raise RefusedError(
                    f"{source}: /dev/{node} is mounted read-write on {entry.mountpoint}; "
                    "never image a read-write mounted device",
                    hint="freeze writers (ckptrescue triage), unmount, or use ckptrescue copy",
                )


def _check_room(dest: Path, image: Path, size: int) -> int:
    st = os.statvfs(dest)
    free = st.f_bavail * st.f_frsize
    have = image.stat().st_blocks * 512 if image.exists() else 0
    need = max(0, size - have) + ROOM_MARGIN
    if free < need:
        raise RefusedError(
            f"destination {dest} has {free} bytes free; the image needs {need} more bytes",
            hint="choose a destination with room for the whole source (--dest DIR)",
        )
    return free


def _sidecar_check(path: Path, facts: JsonObject, image: Path, mapfile: Path) -> bool:
    """True when resuming. Refuses a mapfile/sidecar that belongs to another source."""
    if os.path.lexists(path):
        old = _read_sidecar(path)
        for key in ("size", "sector_size", "serial", "wwid", "realpath", "loop_backing_file"):
            if old.get(key) != facts.get(key):
                raise RefusedError(
                    f"{mapfile} belongs to another rescue ({key}: {old.get(key)!r} != "
                    f"{facts.get(key)!r}); refusing to mix rescues",
                    hint="use another --dest or the original source",
                )
        return mapfile.exists()
    if mapfile.exists() or image.exists():
        raise RefusedError(f"{image} or {mapfile} exists without a ckptrescue sidecar; "
                           "refusing to continue an unrelated rescue")
    from ckptrescue.record.atomic import write_atomic

    # atomic (a crash never leaves a sidecar the next run cannot read), never through a link
    # planted at the name, never onto a FIFO or a device node
    write_atomic(path, (json.dumps(facts, indent=2, sort_keys=True) + "\n").encode())
    return False


def _read_own(path: Path) -> bytes:
    """A sidecar or mapfile of an earlier run in the destination, whole: never read through a
    link or from a FIFO put at its name (a read error is the destination's: exit 4, naming
    it)."""
    from ckptrescue.effects.files import read_own_file

    return read_own_file(path)


def _read_sidecar(path: Path) -> JsonObject:
    """The sidecar of an earlier run, read without following a link and without blocking on a
    FIFO put at its name; anything else than the kit's JSON object is refused in one line."""
    raw = _read_own(path)
    try:
        old = json.loads(raw)
    except ValueError:
        old = None
    if not isinstance(old, dict):
        raise RefusedError(f"{path}: not a ckptrescue imaging sidecar; refusing to continue "
                           "an unrelated rescue", hint="use another --dest")
    return old


def _run_with_progress(runner: SubprocessRunner, call: ToolCall, mapfile: Path,
                       on_progress: ProgressFn | None,
                       cancel: threading.Event | None) -> Any:
    box: dict[str, Any] = {}
    stop = threading.Event()  # ours: set on Ctrl-C or when the caller's ``cancel`` is set

    done = threading.Event()  # not Thread.join: an interrupted join can return early later

    def work() -> None:
        try:
            box["result"] = runner.run(call, cancel=stop)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        while not done.wait(timeout=1.0):
            if cancel is not None and cancel.is_set():
                stop.set()
            if on_progress is not None and mapfile.exists():
                try:
                    mp = ddrescue_mapfile.parse(mapfile.read_text())
                except (OSError, ddrescue_mapfile.MapfileError):
                    continue  # mapfile being rewritten
                total = mp.domain_end - mp.domain_start
                on_progress(done=total - mp.untried, total=total, summary=mp.summary())
    except BaseException:
        # ddrescue runs in its own session, so the terminal's SIGINT does not reach it: stop it
        # through the runner before giving up (Ctrl-C, SIGTERM, a failing progress callback)
        stop.set()
        while not done.is_set():
            try:
                done.wait(timeout=0.2)
            except KeyboardInterrupt:
                continue  # ddrescue is being stopped; a second Ctrl-C must not orphan it
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


def image(source: str | Path, *, case: Case, dest: str | Path | None = None, retries: int = 3,
          simulate_bad_map: str | Path | None = None, name: str | None = None,
          on_progress: ProgressFn | None = None, cancel: threading.Event | None = None,
          max_read_rate: int | None = None, runner: SubprocessRunner | None = None) -> ImageResult:
    """Image ``source`` into ``dest`` (default ``CASE/images``) and return what the map says."""
    src = Path(source)
    facts = _source_facts(src)
    size, ss = facts["size"], facts["sector_size"]
    if size == 0:
        raise EvidenceError(f"{src}: source is empty")
    if retries < 0:
        raise UsageError("--retries must be >= 0")
    dest_dir = Path(dest) if dest is not None else case.root / "images"
    output_dirs.claim(case, dest_dir, purpose="image destination")
    cmp = samedisk.compare(src, dest_dir)
    case.log("image.samedisk", {"source": str(src), "dest": str(dest_dir), **cmp.to_json()})
    if cmp.verdict is samedisk.Sameness.SAME:
        raise RefusedError(f"destination {dest_dir} is on the same physical disk as {src} "
                           f"({cmp.reason})", hint="image onto separate media (--dest DIR)")
    if cmp.verdict is samedisk.Sameness.UNKNOWN:
        # an image file on NFS/Lustre/FUSE, or a destination there: which storage, not which disk
        net = netfs.compare(src, dest_dir)
        networked = net.source.network or net.dest.network
        if networked:
            case.log("image.samestorage", {"source": str(src), "dest": str(dest_dir),
                                           **net.to_json()})
        if not networked or net.verdict is not samedisk.Sameness.DIFFERENT:
            raise RefusedError(f"cannot prove that {dest_dir} is on other media than {src}: "
                               f"{net.reason if networked else cmp.reason}",
                               hint="choose a destination on a local disk or on storage served "
                               "elsewhere")
    if facts["block_device"]:
        from ckptrescue.storage import writeblock

        # the block layer refuses writes to the source from now on (recorded; enforced: false
        # with the reason when it is mounted read-write, which is refused just below)
        writeblock.protect(src, case, purpose="image source")
    _refuse_if_mounted_rw(src, facts)
    base = name or _SAFE.sub("_", src.name if facts["block_device"] else src.stem) or "source"
    img, mapf = dest_dir / f"{base}.img", dest_dir / f"{base}.map"
    sidecar = dest_dir / f"{base}.sidecar.json"
    findings: list[Finding] = []
    if "ram" in cmp.dest_leaves:
        findings.append(Finding("IM004", Severity.WARNING, f"image destination {dest_dir} is "
                                "tmpfs (lost on power-off)", evidence=str(img), source="image"))

    test_map: Path | None = None
    if simulate_bad_map is not None:
        test_map = Path(simulate_bad_map)
        tm = ddrescue_mapfile.parse(test_map.read_text(), name=str(test_map))
        if tm.domain_start != 0 or tm.domain_end < size:
            raise UsageError(f"{test_map}: test map covers [{tm.domain_start}, {tm.domain_end}) "
                             f"but the source is {size} bytes; cover the whole source")
        case.store_artifact_file(test_map, name=test_map.name, kind="ddrescue-test-map")

    resumed = _sidecar_check(sidecar, facts, img, mapf)
    existing = ddrescue_mapfile.parse(_read_own(mapf).decode(errors="replace"),
                                      name=str(mapf)) if os.path.lexists(mapf) else None
    already_done = (existing is not None and existing.current_status == "+"
                    and existing.domain_end >= size and img.exists()
                    and os.path.realpath(img) in {os.path.realpath(p)
                                                  for p in case.evidence_paths()})
    if os.path.realpath(src) not in {os.path.realpath(p) for p in case.evidence_paths()}:
        case.add_evidence(kind="block-device" if facts["block_device"] else "image",
                          source=str(src), acquired_how="imaging source (read-only)", size=size,
                          details={k: v for k, v in facts.items() if k != "source"})
    if not already_done:
        _check_room(dest_dir, img, size)
        runner = runner or SubprocessRunner(case)
        common = ["-b", str(ss), "-x", str(size)]
        if facts["block_device"]:
            common.insert(0, "-d")
        if test_map is not None:
            common += ["-H", str(test_map)]
        if max_read_rate:
            common += ["-Z", str(max_read_rate)]
        passes = [("fast pass, no scraping", ["-n"]),
                  (f"trim, scrape and {retries} retry pass(es)", ["-r", str(retries)])]
        case.log("image.started", {"source": str(src), "image": str(img), "mapfile": str(mapf),
                                   "resumed": resumed, "sector_size": ss, "size": size})
        for purpose, extra in passes:
            argv = ("ddrescue", *common, *extra, str(src), str(img), str(mapf))
            result = _run_with_progress(runner, ToolCall(argv=argv, timeout_s=7 * 24 * 3600,
                                                         purpose=f"image: {purpose}"),
                                        mapf, on_progress, cancel)
            if result.refused:
                raise RefusedError(f"ddrescue refused: {result.refused}")
            if result.cancelled or result.timed_out:
                case.log("image.interrupted", {"image": str(img), "mapfile": str(mapf)})
                raise ToolFailedError(f"imaging of {src} was interrupted; the mapfile keeps the "
                                      "progress", hint="run the same command again to resume")
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise ToolFailedError(f"ddrescue exited {result.returncode}: {last}")
    return _finish(case, src, facts, img, mapf, findings, resumed, record=not already_done)


def _hash_image(img: Path, good: list[tuple[int, int]]) -> tuple[str, str]:
    """One streaming pass: SHA-256 of the whole image and of the rescued (``+``) bytes only, in
    order (comparable with the same hash over another read of the source)."""
    import hashlib

    whole, rescued = hashlib.sha256(), hashlib.sha256()
    pos, k = 0, 0
    with open(img, "rb", buffering=0) as fh:
        while block := fh.read(1 << 20):
            whole.update(block)
            end = pos + len(block)
            while k < len(good) and good[k][0] < end:
                lo, hi = max(good[k][0], pos), min(good[k][1], end)
                if lo < hi:
                    rescued.update(block[lo - pos:hi - pos])
                if good[k][1] <= end:
                    k += 1
                else:
                    break
            pos = end
    return whole.hexdigest(), rescued.hexdigest()


def _finish(case: Case, src: Path, facts: JsonObject, img: Path, mapf: Path,
            findings: list[Finding], resumed: bool, *, record: bool = True) -> ImageResult:
    size = facts["size"]
    mp = ddrescue_mapfile.parse(mapf.read_text(), name=str(mapf))
    if mp.domain_start != 0 or mp.domain_end != size:
        raise ToolFailedError(f"{mapf}: domain [{mp.domain_start}, {mp.domain_end}) does not "
                              f"match the source size {size}")
    map_sha = case.store_artifact_file(mapf, name=mapf.name, kind="ddrescue-mapfile")
    img_sha, rescued_sha = _hash_image(img, mp.ranges("+"))
    bad = mp.bad_ranges()
    unreadable = mp.unreadable_ranges()
    src_sha = sha256_file(src) if mp.finished else None
    if bad:
        findings.append(Finding(
            "IM001", Severity.ERROR,
            f"{mp.bad} unreadable bytes in {len(bad)} area(s) of {src}; "
            "the image holds zeros there",
            evidence=str(src), offset=bad[0][0], length=mp.bad, source="image",
            details={"bad_ranges": [list(r) for r in bad], "mapfile_sha256": map_sha}))
    if mp.pending or mp.untried:
        findings.append(Finding(
            "IM002", Severity.WARNING,
            f"imaging unfinished: {mp.pending} bytes untrimmed/unscraped, {mp.untried} untried",
            evidence=str(src), source="image", details=mp.summary()))
    if mp.finished:
        findings.append(Finding("IM003", Severity.INFO, f"{src} fully read; image SHA-256 equals "
                                "the source's", evidence=str(src), evidence_sha256=src_sha,
                                source="image"))
    if src_sha is not None and src_sha != img_sha:
        raise ToolFailedError(f"{img} does not hash like {src} although the map says every byte "
                              "was rescued: the source changed during imaging?")
    known = {os.path.realpath(p) for p in case.evidence_paths()}
    evidence_id = None
    if os.path.realpath(img) not in known:
        item = case.add_evidence(
            kind="image", source=str(img), acquired_how="ddrescue (read-only source, mapfile)",
            size=img.stat().st_size, sha256=img_sha,
            details={"from": str(src), "mapfile": str(mapf), "mapfile_sha256": map_sha,
                     "source_sha256": src_sha, "rescued_sha256": rescued_sha,
                     "rescued_bytes": mp.rescued,
                     "bad_ranges": [list(r) for r in bad], "sector_size": facts["sector_size"]})
        evidence_id = item.id
    else:
        evidence_id = next((e.id for e in case.evidence()
                            if os.path.realpath(e.source) == os.path.realpath(img)), None)
    if record:
        case.add_findings(findings)
    if mp.current_status == "+":  # ddrescue is done with this image: nothing may write it now
        from ckptrescue.storage import writeblock

        writeblock.make_immutable(img, case, sha256=img_sha)
        writeblock.make_immutable(mapf, case, sha256=map_sha)
    result = ImageResult(image=str(img), mapfile=str(mapf), image_sha256=img_sha, size=size,
                         rescued_bytes=mp.rescued, bad_ranges=bad, mapfile_sha256=map_sha,
                         source=str(src), source_sha256=src_sha,
                         sector_size=facts["sector_size"], finished=mp.finished,
                         unreadable_ranges=unreadable, evidence_id=evidence_id,
                         findings=findings, resumed=resumed, rescued_sha256=rescued_sha)
    result.record("image.finished", result.details())  # recorded by the engine
    return result
