"""NeMo ``.nemo`` archives: a tar (``SaveRestoreConnector._make_nemo_file_from_folder``:
``tarfile.open(path, "w:")`` since NeMo 1.7, ``"w:gz"`` before; ``tar.add(dir, arcname=".")``)
holding ``model_config.yaml`` and the weights:

* ``model_weights.ckpt`` (``torch.save(model.state_dict())``), or one per model-parallel rank:
  ``mp_rank_TT/model_weights.ckpt`` (PP = 1) or ``tp_rank_TT_pp_rank_PPP/model_weights.ckpt``
  (``nemo/utils/app_state`` / ``inject_model_parallel_rank``), TP/PP from the config's
  ``tensor_model_parallel_size`` / ``pipeline_model_parallel_size``;
* or ``model_weights/``: a megatron-core distributed checkpoint (``metadata.json``,
  ``common.pt``, ``.metadata``, ``__R_T.distcp``);
* plus artifacts (tokenizer files, ...).

The archive is never extracted: member headers are walked in place (``families/tarwalk.py``) and
each weights member is verified with the torch-zip probe over its byte window
(``formats/torch_zip.probe_zip(start, end)``), so a damaged tensor is named with its absolute
offset in the ``.nemo`` file and ``salvage`` copies its bytes from there. Findings: FM043
(``model_config.yaml`` or the weights missing), FM001 (a model-parallel rank's weights missing
for the config's TP x PP), FM044 (tar headers damaged, a member cut), FM046 (a gzip-compressed
archive: the gzip CRC-32 covers every byte, tensors have no in-place offsets), FM047 (a sharded
``model_weights/`` whose ``.distcp`` items are checked by presence and size only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict, worst_verdict
from ckptrescue.checkpoints.families import tarwalk
from ckptrescue.checkpoints.families.base import Family, finding, shorten
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.model import Finding

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
_RANK_DIR = re.compile(r"^(mp_rank_\d+|tp_rank_\d+_pp_rank_\d+)$")
_CONFIG_MAX = 1 << 20
_SHARDED_NEEDS = ("metadata.json", "common.pt", ".metadata")


def _config_ints(text: str) -> dict[str, int]:
    """``tensor_model_parallel_size`` / ``pipeline_model_parallel_size`` from the YAML text (the
    first occurrence of each key at any indentation; no YAML library needed for two ints)."""
    out: dict[str, int] = {}
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        m = re.search(rf"^\s*{key}\s*:\s*(\d+)\s*(#.*)?$", text, re.MULTILINE)
        if m:
            out[key] = int(m.group(1))
    return out


def _rank_names(tp: int, pp: int) -> list[str]:
    """NeMo's ``inject_model_parallel_rank`` directory names for TP x PP."""
    if pp > 1:
        return [f"tp_rank_{t:02d}_pp_rank_{p:03d}" for p in range(pp) for t in range(tp)]
    return [f"mp_rank_{t:02d}" for t in range(tp)]


class NemoFamily(Family):
    """``.nemo`` archives (``nemo``)."""

    name: ClassVar[str] = "nemo"
    # ``salvage`` takes the single-file route: tensors are byte ranges of the one archive
    single_file: ClassVar[bool] = True
    # ``model_weights.ckpt`` is ``torch.save(model.state_dict())``: tensors in (Ordered)dicts,
    # nothing beyond torch's weights-only list (NeMo registers no safe globals; it loads the
    # weights with ``torch.load`` in ``SaveRestoreConnector._load_state_dict_from_disk``)
    allowed_globals: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            if not path.is_file():
                return False
            with open_regular(path) as fh:
                head = fh.read(tarwalk.BLOCK)
        except OSError:
            return False
        if path.suffix == ".nemo":
            return tarwalk.is_tar_header(head) or head[:2] == b"\x1f\x8b"
        if not tarwalk.is_tar_header(head):
            return False
        try:  # an unsuffixed tar is a .nemo when it holds model_config.yaml
            names = [m.name for m in tarwalk.walk(path).members[:256]]
        except OSError:
            return False
        return CONFIG in names

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        return [root]

    # -- the probe -----------------------------------------------------------------------------
    @classmethod
    def probe(cls, root: Path, options: ProbeOptions) -> CheckpointReport:
        """The archive walked, its configuration read for TP x PP, the weights members it
        should hold named, each probed over its byte window (and the sharded weights), then
        the family's record."""
        from ckptrescue.checkpoints.formats import tensormap
        from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
        from ckptrescue.checkpoints.formats.zip_window import ZipWindows

        report = CheckpointReport(path=str(root), format=cls.name, verdict=Verdict.INTACT,
                                  files=[str(root)])
        tw = tarwalk.walk(root)
        verdicts: list[Verdict] = []
        family_findings: list[Finding] = []
        for kind, message, offset in tw.problems:
            family_findings.append(finding(
                "FM044", f"{root.name}: {message}", evidence=root, offset=offset,
                details={"kind": kind}))
            verdicts.append(Verdict.TRUNCATED if kind == "truncated" else Verdict.DAMAGED)
        files = {m.name: m for m in tarwalk.iter_files(tw)}
        sizes = _config_ints(_config_text(root, tw, files))
        tp = sizes.get("tensor_model_parallel_size", 1)
        pp = sizes.get("pipeline_model_parallel_size", 1)
        layout = _Layout.of(files, tp, pp)
        ranks = layout.missing(root, tw, family_findings)
        if tw.compressed:
            family_findings.append(finding(
                "FM046", f"{root.name}: gzip-compressed .nemo (NeMo < 1.7): the gzip CRC-32 "
                "covers every byte of the archive; tensors have no offsets in the file (extract "
                "the weights to verify them tensor by tensor)", evidence=root))
            layout.weights = {}
        zips = ZipWindows(report, numeric=options.numeric,
                          extra_allowed=cls.allowed_globals | options.extra_allowed)
        members_json: list[dict[str, Any]] = []
        with open_evidence(root) as fh:
            for label, m in sorted(layout.weights.items()):
                verdict = _weights_member(zips, fh, tw, label, m, layout.multi, verdicts)
                ranks[label] = str(verdict)
                members_json.append({"name": f"{label}/{WEIGHTS}" if label != "model"
                                     else WEIGHTS, "offset": m.data_offset, "size": m.size,
                                     "rank": label, "verdict": str(verdict)})
                if verdict not in (Verdict.INTACT, Verdict.SUSPECT):
                    family_findings.append(finding(
                        "FM007", f"{label}: {members_json[-1]['name']} (bytes "
                        f"{m.data_offset}-{m.data_offset + m.size} of the archive) is "
                        f"{verdict}", evidence=root, ranks=[label],
                        offset=m.data_offset, length=m.size, details={"verdict": str(verdict)}))
            if layout.sharded:
                ranks["model_weights"] = str(cls._sharded(root, fh, layout.sharded, options,
                                                          family_findings, report, verdicts))
        report.findings.extend(family_findings)
        from ckptrescue.checkpoints.families.base import verdict_of

        verdicts.extend(v for v in (verdict_of(f) for f in family_findings) if v is not None)
        bad = sorted({r for r, v in ranks.items() if v != str(Verdict.INTACT)}
                     | {r for f in family_findings if verdict_of(f) is not None
                        for r in f.details.get("ranks", [])})
        report.extra.update({
            **zips.extra(),
            "nemo": {"members": [{"name": m.name, "offset": m.data_offset, "size": m.size}
                                 for m in tarwalk.iter_files(tw)][:4096],
                     "weights": members_json, "compressed": tw.compressed,
                     "complete": tw.complete},
            "family": {"family": cls.name, "step": None, "world": {"tp": tp, "pp": pp},
                       "ranks": ranks, "bad_ranks": bad,
                       "members": len(layout.weights) + (1 if layout.sharded else 0),
                       "expected": max(len(layout.expected_ranks), 1), "tensors_elided": 0,
                       "steps_recorded": []},
        })
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def _sharded(cls, root: Path, fh: Any, sharded: dict[str, tarwalk.TarMember],
                 options: ProbeOptions, out: list[Finding], report: CheckpointReport,
                 verdicts: list[Verdict]) -> Verdict:
        """``model_weights/`` (a megatron-core distributed checkpoint) inside the archive: the
        files it needs, ``common.pt`` verified over its window; ``.distcp`` items by size."""
        from ckptrescue.checkpoints.families.megatron import MEGATRON_GLOBALS
        from ckptrescue.checkpoints.formats.torch_zip import probe_zip

        verdict = Verdict.INTACT
        missing = [n for n in _SHARDED_NEEDS if n not in sharded]
        if not any(n.endswith(".distcp") for n in sharded):
            missing.append("*.distcp")
        if missing:
            out.append(finding(
                "FM043", f"{root.name}: model_weights/ lacks {', '.join(missing)} (a sharded "
                "save that did not finish)", evidence=root, ranks=["model_weights"],
                details={"missing": missing}))
            verdict = Verdict.INCOMPLETE
        common = sharded.get("common.pt")
        if common is not None:
            part = probe_zip(fh, str(root), start=common.data_offset,
                             end=common.data_offset + common.size, do_numeric=options.numeric,
                             name_prefix="model_weights/common.pt/",
                             extra_allowed=MEGATRON_GLOBALS | options.extra_allowed)
            report.tensors.extend(part.tensors)
            report.findings.extend(part.findings)
            verdicts.extend(part.verdicts)
            if part.verdicts:
                verdict = worst_verdict([verdict, *part.verdicts])
        out.append(finding(
            "FM047", f"{root.name}: model_weights/ is a distributed checkpoint: its files are "
            "present and whole in the archive, the .distcp items are not CRC-checked in place "
            "(extract model_weights/ and probe it as megatron-dist to verify every item)",
            evidence=root, details={"files": sorted(sharded)[:64]}))
        return verdict

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport):  # noqa: ANN206
        """Salvage: tensors whose bytes verified inside the archive (absolute offsets)."""
        from ckptrescue.checkpoints.formats.tensormap import salvageable

        return salvageable(report)


FAMILIES = [NemoFamily]


def _config_text(root: Path, tw: Any, files: dict[str, tarwalk.TarMember]) -> str:
    """``model_config.yaml`` as text (a plain archive only; the first 1 MiB)."""
    if CONFIG not in files or tw.compressed:
        return ""
    m = files[CONFIG]
    with open_regular(root) as fh:
        fh.seek(m.data_offset)
        return fh.read(min(m.size, _CONFIG_MAX)).decode("utf-8", "replace")


@dataclass
class _Layout:
    """The weights an archive holds: one ``model_weights.ckpt`` per model-parallel rank
    directory (or one for the model), or a ``model_weights/`` sharded directory."""

    weights: dict[str, tarwalk.TarMember]  # rank label -> member
    sharded: dict[str, tarwalk.TarMember]
    has_config: bool
    expected_ranks: list[str]
    tp: int
    pp: int

    @classmethod
    def of(cls, files: dict[str, tarwalk.TarMember], tp: int, pp: int) -> _Layout:
        weights: dict[str, tarwalk.TarMember] = {}
        if WEIGHTS in files:
            weights["model"] = files[WEIGHTS]
        for name, m in files.items():
            parts = name.split("/")
            if len(parts) == 2 and parts[1] == WEIGHTS and _RANK_DIR.match(parts[0]):
                weights[parts[0]] = m
        sharded = {n.split("/", 1)[1]: m for n, m in files.items()
                   if n.startswith("model_weights/")}
        return cls(weights, sharded, CONFIG in files,
                   _rank_names(tp, pp) if tp * pp > 1 else [], tp, pp)

    @property
    def multi(self) -> bool:
        """Tensor names are prefixed with their rank directory."""
        return len(self.weights) > 1 or "model" not in self.weights

    def missing(self, root: Path, tw: Any, found: list[Finding]) -> dict[str, str]:
        """What the archive lacks (the configuration, the weights, model-parallel files), as
        findings in ``found``; the ranks known missing."""
        ranks: dict[str, str] = {}
        missing_what = [CONFIG] if not self.has_config else []
        if not self.weights and not self.sharded:
            missing_what.append(f"{WEIGHTS} (or model_weights/)")
        if missing_what:
            found.append(finding(
                "FM043", f"{root.name}: {' and '.join(missing_what)} not in the archive"
                + (" (the walk stopped early: see FM044)" if tw.problems else ""), evidence=root,
                ranks=["model"] if len(missing_what) > 1 or CONFIG not in missing_what else [],
                details={"missing": missing_what}))
        lost = [r for r in self.expected_ranks if r not in self.weights] \
            if self.weights or not self.sharded else []
        if lost and (self.weights.keys() - {"model"} or not self.weights):
            found.append(finding(
                "FM001", f"{len(lost)} model-parallel weights file(s) missing for "
                f"TP={self.tp} x PP={self.pp} (model_config.yaml): " + shorten(lost),
                evidence=root, ranks=lost,
                details={"missing": [f"{r}/{WEIGHTS}" for r in lost], "count": len(lost)}))
            ranks.update(dict.fromkeys(lost, "missing"))
        return ranks


def _weights_member(zips: Any, fh: Any, tw: Any, label: str, m: tarwalk.TarMember,
                    multi: bool, verdicts: list[Verdict]) -> Verdict:
    """One weights member probed over its byte window; its own verdict (truncated when the
    archive ends inside it)."""
    from ckptrescue.checkpoints.formats import tensormap

    end = min(m.data_offset + m.size, tw.size)
    part = zips.probe(fh, m.data_offset, end, f"{label}/" if multi else "")
    own = CheckpointReport(path=zips.report.path, format="torch-zip", verdict=Verdict.INTACT,
                           tensors=part.tensors, findings=list(part.findings))
    tensormap.finalize(own, part.verdicts)
    verdicts.extend(part.verdicts)
    if end < m.data_offset + m.size:
        return max(own.verdict, Verdict.TRUNCATED, key=lambda v: v.rank)
    return own.verdict
