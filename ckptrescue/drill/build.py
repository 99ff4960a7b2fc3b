"""``ckptrescue drill DIR``: build a realistic incident sandbox and list the injected faults.

DIR gets ``disk.img`` (an XFS filesystem holding a training run), ``badsectors.map`` (a ddrescue
test-mode map making sectors inside one checkpoint unreadable), ``known-good.sha256`` (the run's
files before the faults, sha256sum format), ``drill.json`` (faults and endpoints) and, unless
``s3=False``, a running S3-compatible server on 127.0.0.1 holding a bucket with a good and a
corrupted version of a checkpoint (stop it with ``ckptrescue drill DIR --stop``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, formats
from ckptrescue.drill import faults, folder, tfrun, xfsimage
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.effects.runner import InternalRun

BUCKET = "drill-checkpoints"
MARKER = "PWNED-if-this-exists"
TF_PENDING = ".tf-pending"  # where TensorFlow writes while the torch run trains


@dataclass
class DrillResult:
    root: Path
    image: Path
    badsectors_map: Path
    known_good: Path
    marker: Path
    faults: list[JsonObject] = field(default_factory=list)
    s3: JsonObject | None = None
    expected: JsonObject = field(default_factory=dict)
    image_sha256: str = ""  # the evidence's hash as built: compare it after a run

    def to_json(self) -> JsonObject:
        return {
            "root": str(self.root), "image": str(self.image), "image_sha256": self.image_sha256,
            "badsectors_map": str(self.badsectors_map), "known_good_manifest": str(self.known_good),
            "marker": str(self.marker), "faults": self.faults, "s3": self.s3,
            "expected": self.expected,
        }


def _probe(path: Path) -> CheckpointReport:
    for fmt in formats():
        if fmt.detect(path):
            return fmt.probe(path, ProbeOptions(numeric=False))
    raise UsageError(f"{path}: the drill could not identify its own checkpoint")


def _tensor(report: CheckpointReport, name: str) -> tuple[int, int]:
    for t in report.tensors:
        if t.name == name and t.offset is not None and t.length:
            return t.offset, t.length
    raise UsageError(f"{report.path}: tensor {name} not found in the drill checkpoint")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def build(out: Path, *, s3: bool = True, tensorflow: bool = True) -> DrillResult:
    out = out.resolve()
    folder.claim(out, "staging", what="the drill")
    # TensorFlow writes its checkpoints beside the torch run, not in it (the known-good
    # manifest lists the torch run alone), while the torch run trains
    tf_job = tfrun.start(out / TF_PENDING) if tensorflow and tfrun.available() else None
    try:
        return _build(out, s3=s3, tf_job=tf_job)
    except BaseException:
        if tf_job is not None:
            tf_job.stop()
        raise


def _build(out: Path, *, s3: bool, tf_job: InternalRun | None) -> DrillResult:
    from ckptrescue.drill.trainrun import write_run

    staging = out / "staging"
    run = staging / "run"
    marker = out / MARKER
    write_run(run, marker=marker)

    # the known-good manifest is taken before any fault is injected
    known_good = out / "known-good.sha256"
    lines = [f"{_sha256(p)}  {p.relative_to(staging).as_posix()}"
             for p in sorted(staging.rglob("*")) if p.is_file()]
    known_good.write_text("\n".join(lines) + "\n")
    pristine = out / "pristine"
    pristine.mkdir()
    for name in ("step-200.pt", "step-300.pt", "step-100.pt"):
        shutil.copy2(run / name, pristine / name)

    found: list[JsonObject] = []
    # 1. a single high exponent-bit flip inside one tensor of step-200
    rep = _probe(run / "step-200.pt")
    off, _ = _tensor(rep, "model.3.weight")
    faults.flip_bit(run / "step-200.pt", off + 3, 6)  # bit 30 of the first float32 element
    found.append({"kind": "bit-flip", "path": "run/step-200.pt", "tensors": ["model.3.weight"],
                  "offset": off + 3, "bit": 6})
    # 2. the newest checkpoint truncated mid-write
    rep = _probe(run / "step-400.pt")
    new_len = faults.truncate(run / "step-400.pt", 0.55)
    lost = sorted(t.name for t in rep.tensors
                  if t.offset is not None and t.length is not None
                  and t.offset + t.length > new_len)
    found.append({"kind": "truncated", "path": "run/step-400.pt", "tensors": lost,
                  "length": new_len})
    # 3. NaN-poisoned values in the safetensors export
    export = run / "export" / "model.safetensors"
    rep = _probe(export)
    off, length = _tensor(rep, "3.weight")
    with open(export, "r+b") as fh:
        for i in (5, 77, 301):
            if i * 4 < length:
                fh.seek(off + i * 4)
                fh.write(struct.pack("<f", float("nan")))
    found.append({"kind": "nan-poison", "path": "run/export/model.safetensors",
                  "tensors": ["3.weight"]})
    # 4. a missing shard of the sharded export
    index = json.loads((run / "hf-export" / "model.safetensors.index.json").read_text())
    gone = "model-00002-of-00002.safetensors"
    (run / "hf-export" / gone).unlink()
    found.append({"kind": "missing-shard", "path": f"run/hf-export/{gone}",
                  "tensors": sorted(k for k, v in index["weight_map"].items() if v == gone)})
    # 5. a checkpoint whose pickle carries os.system
    found.append({"kind": "malicious-pickle", "path": "run/step-350.pt", "tensors": [],
                  "globals": ["posix.system"]})

    # 6. a TensorFlow checkpoint with one flipped byte inside one variable
    expected_tf: dict[str, str] = {}
    if tf_job is not None:
        tfrun.finish(tf_job)
        tfdir = run / "tf"
        os.replace(out / TF_PENDING, tfdir)  # its state file names checkpoints relatively
        rep = _probe(tfdir / "ckpt-2.index")
        candidates = [t for t in rep.tensors if t.length and t.file
                      and "VARIABLE_VALUE" in t.name]
        victim = max(candidates, key=lambda t: (t.length or 0, t.name))
        with open(victim.file, "r+b") as fh:  # type: ignore[arg-type]
            fh.seek(int(victim.offset or 0) + 2)
            byte = fh.read(1)[0]
            fh.seek(int(victim.offset or 0) + 2)
            fh.write(bytes([byte ^ 0x04]))
        found.append({"kind": "bit-flip", "path": "run/tf/ckpt-2",
                      "tensors": [victim.name]})
        expected_tf = {"run/tf/ckpt-2": "damaged", "run/tf/ckpt-1": "intact"}

    image = out / "disk.img"
    xfsimage.build(staging, image)
    # 7. unreadable sectors inside one tensor of step-100 (ddrescue test mode)
    rep = _probe(run / "step-100.pt")
    off, length = _tensor(rep, "model.0.weight")
    ranges = xfsimage.disk_range(image, "run/step-100.pt", off, length)
    start = (ranges[0][0] + 511) // 512 * 512
    end = min(start + 1024, ranges[0][1] // 512 * 512)
    if end <= start:
        raise UsageError("drill: tensor too small for a bad sector")
    badmap = out / "badsectors.map"
    badmap.write_text(faults.badsector_mapfile(xfsimage.IMAGE_SIZE, [(start, end)]))
    found.append({"kind": "bad-sectors", "path": "run/step-100.pt",
                  "tensors": ["model.0.weight"], "device_ranges": [[start, end]]})

    result = DrillResult(root=out, image=image, badsectors_map=badmap, known_good=known_good,
                         marker=marker, faults=found, image_sha256=_sha256(image))
    if s3:
        result.s3 = _seed_bucket(out, run, pristine, found)
    shutil.rmtree(staging)
    result.expected = {
        "resume_from": "run/step-300.pt",
        "verdicts": {"run/step-100.pt": "damaged", "run/step-200.pt": "damaged",
                     "run/step-300.pt": "intact", "run/step-350.pt": "unsafe",
                     "run/step-400.pt": "truncated", "run/export/model.safetensors": "suspect",
                     "run/hf-export": "incomplete", "run/dcp/step-300": "intact",
                     **expected_tf},
    }
    (out / "drill.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    (out / "params.json").write_text(json.dumps(full_incident_params(result), indent=2) + "\n")
    return result


def _separate_media_dir(out: Path) -> Path:
    """An image destination on other media than the drill (RAM when the drill is on disk)."""
    shm = Path("/dev/shm")
    digest = hashlib.sha256(str(out).encode()).hexdigest()[:10]
    if shm.is_dir() and not str(out).startswith("/dev/shm"):
        return shm / f"ckptrescue-drill-{digest}"
    return out.parent / f"{out.name}-images"


def full_incident_params(result: DrillResult) -> JsonObject:
    """Parameters for ``playbook run full-incident -P DIR/params.json`` on this drill."""
    dest = _separate_media_dir(result.root)
    dest.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {
        "source": str(result.image), "image_dest": str(dest), "checkpoints": "run",
        "simulate_bad_map": str(result.badsectors_map), "known_good": str(result.known_good),
        "retries": 1,
        # the "volume" the incident is about: the disk (here its image); triage names only the
        # processes with files open on it, never every writer on the host
        "volume": str(result.image),
    }
    if result.s3:
        params.update({
            "s3_url": f"s3://{result.s3['bucket']}/{result.s3['prefix']}",
            "s3_key_url": f"s3://{result.s3['bucket']}/{result.s3['prefix']}step-300.pt",
            "endpoint_url": result.s3["endpoint_url"],
        })
    return params


def _seed_bucket(out: Path, run: Path, pristine: Path, found: list[JsonObject]
                 ) -> dict[str, Any]:
    from ckptrescue.drill import s3daemon
    from ckptrescue.stores.s3.localserver import DUMMY_CREDENTIALS

    info = s3daemon.spawn(out)
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=str(info["endpoint_url"]), region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}), **DUMMY_CREDENTIALS)
    client.create_bucket(Bucket=BUCKET)
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    for name in ("step-100.pt", "step-200.pt", "step-300.pt"):
        client.put_object(Bucket=BUCKET, Key=f"run/{name}", Body=(pristine / name).read_bytes(),
                          ChecksumAlgorithm="SHA256")
    good = client.head_object(Bucket=BUCKET, Key="run/step-300.pt")["VersionId"]
    corrupted = bytearray((pristine / "step-300.pt").read_bytes())
    corrupted[len(corrupted) // 2] ^= 0x10
    bad = client.put_object(Bucket=BUCKET, Key="run/step-300.pt", Body=bytes(corrupted),
                            ChecksumAlgorithm="SHA256")["VersionId"]
    found.append({"kind": "s3-corrupted-version", "path": f"s3://{BUCKET}/run/step-300.pt",
                  "tensors": [], "good_version": good, "corrupted_version": bad})
    shutil.rmtree(pristine)
    return {"endpoint_url": info["endpoint_url"], "bucket": BUCKET, "prefix": "run/",
            "pid": info["pid"], "good_version": good, "corrupted_version": bad}


def stop(out: Path) -> bool:
    """Stop the drill's S3 server and remove its image destination in RAM, if any."""
    from ckptrescue.drill import s3daemon

    out = out.resolve()
    dest = _separate_media_dir(out)
    if str(dest).startswith("/dev/shm/ckptrescue-drill-") and dest.is_dir():
        from ckptrescue.storage import writeblock

        writeblock.clear_immutable_tree(dest)  # the acquired image is chattr +i once hashed
        shutil.rmtree(dest, ignore_errors=True)
    return s3daemon.stop(out)
