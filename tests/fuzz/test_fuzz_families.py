"""The multi-rank family and compressed-shard seeds of the corpus against their real readers.

Every family mutation (``fixtures/fuzz/family_ops.py``: two ranks' files swapped by name, a rank
file beyond the world size, a file deleted) and container mutation (``shard_ops.py``: a tar
member size that swallows the next header, a zero block mid-archive, a wrong gzip CRC, zeros
after a gzip TFRecord, a zstd frame failing its checksum) of the real engines' steps and the
libraries' shards goes through the kit; every mutant the kit calls ``intact`` / ``ok`` is then
read by the real reader in a child process — DeepSpeed's ``zero_to_fp32`` (weights equal to the
model states'), ``Accelerator.load_state``, Lightning's ``_load_distributed_checkpoint``,
``torch.load`` with megatron-core's safe globals, WebDataset's streaming tar reader, zstandard +
``json``, ``tf.data`` — and must read all of it. The mutations the fuzz pass found the kit
accepting must now be refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.fuzz import mutate, seeds
from fuzz.harness import run_cases

REPO = Path(__file__).resolve().parents[2]
NEW = sorted(mutate.FAMILY_SEEDS | mutate.SHARD_SEEDS)
# what the fuzz pass against the real readers found accepted: never intact / ok again
MUST_REFUSE = {
    ("ds_zero2", "family_swap"), ("ds_zero2", "family_delete"),
    ("megatron_legacy", "family_swap"), ("megatron_legacy", "family_delete"),
    ("tar_gz_shard", "shard_tar"), ("tar_gz_shard", "shard_gzip_crc"),
    ("tfrecord_gz", "shard_trailing_zeros"), ("tfrecord_gz", "shard_gzip_crc"),
    ("jsonl_zst", "shard_zstd_checksum"),
}

READER = r"""
import contextlib, gc, glob, gzip, io, json, os, sys, warnings
gc.disable()  # a short-lived oracle: the libraries it imports are most of what it makes
warnings.simplefilter("ignore")
sys.path.insert(0, os.environ["REPO"])
out = {}
for line in sys.stdin:
    job = json.loads(line)
    seed, d = job["seed"], job["dir"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if seed == "ds_zero2":
                import torch
                from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
                sd = get_fp32_state_dict_from_zero_checkpoint(d, tag="global_step1")
                module = torch.load(glob.glob(d + "/global_step1/mp_rank_00_model_states.pt")[0],
                                    map_location="cpu", weights_only=False)["module"]
                assert all(torch.equal(sd[k].float(), module[k].float()) for k in module), \
                    "consolidated weights differ from the model states"
            elif seed == "megatron_legacy":
                import torch, megatron.core  # registers megatron's safe globals
                for f in sorted(glob.glob(d + "/iter_*/mp_rank_*/model_optim_rng.pt")):
                    torch.load(f, map_location="cpu", weights_only=True)
            elif seed == "accelerate_step":
                from accelerate import Accelerator
                from fixtures.families.accelerate import Counter, make_objects
                acc = Accelerator(cpu=True)
                m, o, s, dl = make_objects()
                acc.register_for_checkpointing(Counter())
                m, o, dl, s = acc.prepare(m, o, dl, s)
                for step in sorted(glob.glob(d + "/checkpoint_*")):
                    acc.load_state(step)
            elif seed == "lightning_fsdp":
                from pathlib import Path
                from lightning.fabric.utilities.load import _load_distributed_checkpoint
                _load_distributed_checkpoint(Path(d) / "step=4.ckpt")
            elif seed == "tar_gz_shard":
                from webdataset.tariterators import tar_file_iterator
                with open(d + "/shard-000000.tar.gz", "rb") as fh:
                    data = gzip.GzipFile(fileobj=fh).read()  # the whole stream: its CRC too
                n = sum(1 for _ in tar_file_iterator(io.BytesIO(data)))
                assert n == 8, f"{n} of 8 members"
            elif seed == "jsonl_zst":
                import zstandard
                with open(d + "/train.jsonl.zst", "rb") as fh:
                    text = zstandard.ZstdDecompressor().stream_reader(
                        fh, read_across_frames=True).read()
                lines = text.splitlines()
                assert len(lines) == 6, f"{len(lines)} of 6 lines"
                [json.loads(x) for x in lines]
            elif seed == "tfrecord_gz":
                os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
                import tensorflow as tf
                n = sum(1 for _ in tf.data.TFRecordDataset(d + "/train.tfrecord.gz",
                                                           compression_type="GZIP"))
                assert n == 8, f"{n} of 8 records"
        out[job["id"]] = "read"
    except BaseException as exc:
        out[job["id"]] = f"refused: {type(exc).__name__}: {str(exc)[:160]}"
print("READER" + json.dumps(out))
"""


def _family_cases() -> list[str]:
    out = []
    for name in NEW:
        ops = mutate.plan(name, seeds.load_seed(name))
        out += [f"{name}:{i}" for i, op in enumerate(ops)
                if op.kind.startswith(("family_", "shard_"))]
    return out


def test_family_and_shard_mutants_against_the_real_readers(tmp_path: Path) -> None:
    for mod in ("deepspeed", "accelerate", "lightning", "webdataset", "zstandard"):
        pytest.importorskip(mod)
    cases = _family_cases()
    results = run_cases(cases, workers=2)
    assert all(r.ok for r in results), [(r.case_id, r.error) for r in results if not r.ok]
    refused_kinds: dict[tuple[str, str], list[str]] = {}
    jobs = []
    for r in results:
        seed, index = mutate.parse_case_id(r.case_id)
        files, what = mutate.mutate(seed, index, seeds.load_seed(seed))
        kind = what.split(" ", 1)[0]
        accepted = bool(r.verdicts) and all(v in ("intact", "ok") for v in r.verdicts)
        if not accepted:
            refused_kinds.setdefault((seed, kind), []).append(r.case_id)
            continue
        d = tmp_path / r.case_id.replace(":", "_")
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        jobs.append({"id": r.case_id, "seed": seed, "dir": str(d), "what": what})
    for key in MUST_REFUSE:
        seed, kind = key
        mutants = [r.case_id for r in results if r.case_id.startswith(seed + ":")
                   and mutate.mutate(seed, mutate.parse_case_id(r.case_id)[1],
                                     seeds.load_seed(seed))[1].startswith(kind)]
        assert mutants and set(mutants) <= set(refused_kinds.get(key, [])), (key, mutants)
    env = dict(os.environ, REPO=str(REPO), PYTHONPATH=str(REPO), DS_ACCELERATOR="cpu",
               TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", READER], input="\n".join(map(json.dumps, jobs)),
                          capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path)
    line = next((x for x in done.stdout.splitlines() if x.startswith("READER")), None)
    assert line is not None, done.stderr[-3000:]
    read = json.loads(line[len("READER"):])
    wrong = [f"{j['id']} ({j['what']}): kit says intact/ok, the reader: {read[j['id']]}"
             for j in jobs if read[j["id"]] != "read"]
    assert not wrong, "\n".join(wrong)
