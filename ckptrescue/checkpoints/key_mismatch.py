"""Why ``load_state_dict`` says "Missing key(s) ... Unexpected key(s)": the checkpoint's tensor
names against the names the model expects, explained by their usual causes, with the mapping
that fixes them.

Pure over two lists of (name, shape, storage) records: the checkpoint's (from the probe, any
format the kit reads; nothing is loaded) and the expected ones (a reference checkpoint such as
a freshly saved ``model.state_dict()``, or a key list). The rules, applied in this order, each
kept only when it makes more names match:

* **container** — the state dict sits under a key of a larger dict (``state_dict.`` of a
  Lightning ``.ckpt``, ``model.`` of a training checkpoint): the subtree is taken, the rest
  (optimizer, scheduler) is named and left aside;
* **wrapper components** — ``module.`` (``DistributedDataParallel``/``DataParallel``),
  ``_orig_mod.`` (``torch.compile``'s ``OptimizedModule``), ``_fsdp_wrapped_module.`` and
  ``_checkpoint_wrapped_module.`` (FSDP / activation checkpointing) are removed wherever they
  occur (a compiled or wrapped submodule puts them mid-name), or added when the *model* is the
  wrapped one;
* **FSDP flat parameters** — ``_flat_param`` / ``flat_param_N`` names (FSDP with
  ``use_orig_params=False`` saved with a local/sharded state dict) hold many parameters in one
  vector: no renaming maps them; consolidating with a full state dict does;
* **tied weights saved once** — a name the model expects that the checkpoint lacks, whose tied
  partner is present (the reference's two names share one storage, or the usual
  ``lm_head.weight`` / embedding pairs of the same shape): the fix copies the partner;
* **a renamed layer** — the names left differ in one component consistently (``attn`` ->
  ``attention`` in every block) with equal shapes: that rename.

Shapes are compared wherever both sides know them: a name that maps but whose shape differs is
a different model configuration, which no mapping fixes (said so). The result prints as a
per-name mapping and as Python that applies it to a loaded state dict.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import Finding, JsonObject, Recorded, Severity

WRAPPERS = {
    "module": "DistributedDataParallel / DataParallel (saved from the wrapper)",
    "_orig_mod": "torch.compile (saved from the compiled OptimizedModule)",
    "_fsdp_wrapped_module": "FSDP (FullyShardedDataParallel wrapper names)",
    "_checkpoint_wrapped_module": "activation checkpointing (checkpoint_wrapper names)",
}
_FLAT = re.compile(r"(^|\.)(_flat_param|flat_param_\d+|_fsdp_flat_param)$")
# the usual tied pairs: (name the model expects that is saved once, its partner)
TIED_HINTS = (
    (re.compile(r"(^|\.)lm_head\.weight$"), re.compile(
        r"(embed_tokens|wte|word_embeddings|tok_embeddings|embed_in|shared|embeddings)"
        r"\.weight$")),
    (re.compile(r"(^|\.)decoder\.embed_tokens\.weight$"), re.compile(r"(^|\.)shared\.weight$")),
    (re.compile(r"(^|\.)encoder\.embed_tokens\.weight$"), re.compile(r"(^|\.)shared\.weight$")),
    (re.compile(r"(^|\.)(output|classifier|head)\.weight$"), re.compile(
        r"(embed|embedding|embeddings|tok_embeddings)\.weight$")),
)
MAPPING_MAX = 5000  # per-name mapping rows kept in the result


@dataclass(frozen=True)
class Key:
    name: str
    shape: tuple[int, ...] | None = None
    storage: str | None = None  # storage id + offset: names sharing it are tied


@dataclass
class Rule:
    kind: str  # container, strip, add, rename, tie, flat
    cause: str
    detail: JsonObject
    fixes: int = 0  # names it made match

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "cause": self.cause, "detail": self.detail,
                "fixes": self.fixes}


@dataclass
class KeyExplanation:
    checkpoint_keys: int
    expected_keys: int
    matched_before: int
    rules: list[Rule] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)  # checkpoint name -> model name
    tied: dict[str, str] = field(default_factory=dict)  # model name -> the name copied
    missing: list[str] = field(default_factory=list)  # expected, still unaccounted for
    unexpected: list[str] = field(default_factory=list)  # in the state dict, still unused
    outside: dict[str, int] = field(default_factory=dict)  # other top-level keys, counts
    shape_mismatches: list[dict[str, Any]] = field(default_factory=list)
    flat_params: list[str] = field(default_factory=list)

    matched: int = 0  # expected names the mapping (and the ties) account for

    @property
    def matched_after(self) -> int:
        return self.matched

    @property
    def resolved(self) -> bool:
        return not self.missing and not self.shape_mismatches and not self.flat_params

    def causes(self) -> list[str]:
        return [r.cause for r in self.rules]

    def snippet(self) -> str:
        """Python applying the mapping to a loaded state dict ``sd``."""
        lines = ["def fix_keys(sd):", "    out = {}", "    for k, v in sd.items():"]
        body: list[str] = []
        for r in self.rules:
            d = r.detail
            if r.kind == "container":
                lines.insert(0, f"# the state dict is the {d['prefix']!r} entry of the "
                             "checkpoint: sd = checkpoint" + "".join(
                                 f"[{p!r}]" for p in d["prefix"].rstrip(".").split(".")))
            elif r.kind == "strip":
                comp = d["component"]
                body.append(f"        k = re.sub(r'(^|\\.){re.escape(comp)}\\.', r'\\1', k)"
                            f"  # {r.cause}")
            elif r.kind == "add":
                body.append(f"        k = {d['prefix']!r} + k  # {r.cause}")
            elif r.kind == "rename":
                body.append(f"        k = re.sub(r'(^|\\.){re.escape(d['old'])}(\\.|$)', "
                            f"r'\\1{d['new']}\\2', k)  # {r.cause}")
        if not body:
            body.append("        pass")
        lines += [*body, "        out[k] = v"]
        for name, partner in sorted(self.tied.items()):
            lines.append(f"    out[{name!r}] = out[{partner!r}]  # tied weights saved once")
        lines.append("    return out")
        if any(r.kind in ("strip", "rename") for r in self.rules):
            lines.insert(0, "import re")
        return "\n".join(lines) + "\n"

    def answer(self) -> str:
        if self.matched_before == self.expected_keys and not self.unexpected:
            return f"keys match: {self.expected_keys} names"
        text = (f"{self.matched_before} of {self.expected_keys} expected names match as saved; "
                f"{self.matched_after} after the mapping")
        if self.causes():
            text += " (" + "; ".join(self.causes()) + ")"
        if self.flat_params:
            text += f"; {len(self.flat_params)} FSDP flat parameter(s) no renaming maps"
        if self.shape_mismatches:
            text += f"; {len(self.shape_mismatches)} name(s) map but differ in shape"
        if self.missing:
            text += f"; still missing {len(self.missing)}"
        return text

    def to_json(self) -> JsonObject:
        rows = sorted(self.mapping.items())
        return {"checkpoint_keys": self.checkpoint_keys, "expected_keys": self.expected_keys,
                "matched_before": self.matched_before, "matched_after": self.matched_after,
                "resolved": self.resolved, "causes": self.causes(),
                "rules": [r.to_json() for r in self.rules],
                "mapping": [{"from": a, "to": b} for a, b in rows[:MAPPING_MAX]],
                "mapping_total": len(rows),
                "tied": [{"name": k, "copy_of": v} for k, v in sorted(self.tied.items())],
                "missing": self.missing[:MAPPING_MAX], "missing_total": len(self.missing),
                "unexpected": self.unexpected[:MAPPING_MAX],
                "unexpected_total": len(self.unexpected), "outside": self.outside,
                "shape_mismatches": self.shape_mismatches[:200],
                "flat_params": self.flat_params[:200], "snippet": self.snippet(),
                "snippet_lines": self.snippet().splitlines(),
                "answer": self.answer()}


# -- the rules --------------------------------------------------------------------------------

def _strip_component(name: str, comp: str) -> str:
    parts = [p for p in name.split(".") if p != comp]
    return ".".join(parts)


def _rename(name: str, old: str, new: str) -> str:
    return ".".join(new if p == old else p for p in name.split("."))


def _count(names: dict[str, Key], expected: dict[str, Key]) -> int:
    return sum(1 for n in names if n in expected)


def _container(ckpt: dict[str, Key], expected: dict[str, Key]
               ) -> tuple[str, dict[str, Key], dict[str, int]]:
    """The prefix under which the state dict sits (``state_dict.``, ``model.``: the subtree
    where the model's names are, wrappers aside), the subtree with it removed, and the other
    top-level keys left aside (counts)."""
    wanted = {_strip_all(e) for e in expected}

    def score(names: dict[str, Key]) -> int:
        return sum(1 for n in names if _strip_all(n) in wanted)

    best = ("", ckpt, score(ckpt))
    prefixes: Counter[str] = Counter()
    for name in ckpt:
        parts = name.split(".")
        for i in range(1, min(len(parts), 4)):
            prefixes[".".join(parts[:i]) + "."] += 1
    for prefix, _n in prefixes.most_common(40):
        if prefix.split(".")[0] in WRAPPERS:
            continue  # module., _orig_mod.: a wrapper, stripped below, not a container
        sub = {n[len(prefix):]: k for n, k in ckpt.items() if n.startswith(prefix)}
        got = score(sub)
        if got > best[2] or (got == best[2] and got and len(sub) < len(best[1])):
            best = (prefix, sub, got)
    prefix, sub, _score = best
    outside: Counter[str] = Counter()
    if prefix:
        for n in ckpt:
            if not n.startswith(prefix):
                outside[n.split(".", 1)[0]] += 1
    return prefix, sub, dict(outside)


def _strip_all(name: str) -> str:
    for comp in WRAPPERS:
        name = _strip_component(name, comp)
    return name


def _tie_partner(name: str, expected: dict[str, Key], present: dict[str, Key],
                 used: set[str]) -> str | None:
    """The present name ``name`` is tied to, by shared storage in the reference or by the
    usual tied pairs with equal shapes."""
    want = expected[name]
    if want.storage is not None:
        for other, key in expected.items():
            if other != name and key.storage == want.storage and other in present:
                return other
    for missing_re, partner_re in TIED_HINTS:
        if not missing_re.search(name):
            continue
        for other, key in present.items():
            if other in used or not partner_re.search(other):
                continue
            if want.shape is None or key.shape is None or want.shape == key.shape:
                return other
    return None


def explain(checkpoint: list[Key], expected: list[Key]) -> KeyExplanation:
    """Why ``checkpoint``'s names do not load into a model expecting ``expected``."""
    ckpt = {k.name: k for k in checkpoint}
    exp = {k.name: k for k in expected}
    out = KeyExplanation(checkpoint_keys=len(ckpt), expected_keys=len(exp),
                         matched_before=_count(ckpt, exp))
    prefix, names, outside = _container(ckpt, exp)
    if prefix:
        out.rules.append(Rule("container", f"the state dict is under {prefix!r} of the "
                              "checkpoint (the rest left aside)", {"prefix": prefix}))
        out.outside = outside
    current = {n: n for n in names}  # model-side name -> saved name (after prefix)
    keys = {n: names[n] for n in names}

    def matched() -> int:
        return sum(1 for n in current if n in exp)

    # wrapper components on the checkpoint side (strip): the smallest set that matches most
    # (DDP around a compiled model saves module._orig_mod.: both are needed at once)
    from itertools import combinations

    present_comps = [c for c in WRAPPERS if any(c in n.split(".") for n in current)]
    best_set: tuple[str, ...] = ()
    best_score = matched()
    for size in range(1, len(present_comps) + 1):
        for subset in combinations(present_comps, size):
            trial_names = list(current)
            for comp in subset:
                trial_names = [_strip_component(n, comp) for n in trial_names]
            got = sum(1 for n in trial_names if n in exp)
            if got > best_score:
                best_set, best_score = subset, got
    if best_set:
        gain = best_score - matched()
        for comp in best_set:
            current = {_strip_component(n, comp): s for n, s in current.items()}
            out.rules.append(Rule("strip", f"{comp}. from {WRAPPERS[comp]}",
                                  {"component": comp}, gain))
    # ... or on the model side (the model is the wrapped one: add the prefix)
    for comp, cause in WRAPPERS.items():
        pre = comp + "."
        if all(e.startswith(pre) for e in exp) and not any(n.startswith(pre) for n in current):
            before = matched()
            trial = {pre + n: s for n, s in current.items()}
            if sum(1 for n in trial if n in exp) > before:
                out.rules.append(Rule("add", f"{pre} expected by the model ({cause}) but not "
                                      "in the checkpoint", {"prefix": pre},
                                      sum(1 for n in trial if n in exp) - before))
                current = trial
    # FSDP flat parameters: named, never mapped
    out.flat_params = sorted(s for s in current.values() if _FLAT.search(s))
    if out.flat_params:
        out.rules.append(Rule("flat", "FSDP flat parameters (use_orig_params=False, a local or "
                              "sharded state dict): many parameters in one vector, no renaming "
                              "maps them; save with a FULL_STATE_DICT (or load with FSDP)",
                              {"names": out.flat_params[:20]}))
    # a renamed layer: one component, consistently, with equal shapes
    for _round in range(4):
        missing = [e for e in exp if e not in current]
        extra = [n for n in current if n not in exp and not _FLAT.search(current[n])]
        if not missing or not extra:
            break
        votes: Counter[tuple[str, str]] = Counter()
        by_len: dict[int, list[str]] = {}
        for e in missing:
            by_len.setdefault(e.count("."), []).append(e)
        for n in extra:
            np_ = n.split(".")
            for e in by_len.get(n.count("."), []):
                ep = e.split(".")
                diff = [(a, b) for a, b in zip(np_, ep, strict=True) if a != b]
                if len(diff) == 1 and not diff[0][0].isdigit():
                    ks, ke = keys.get(current[n]), exp[e]
                    if ks is None or ks.shape is None or ke.shape is None or ks.shape == \
                            ke.shape:
                        votes[diff[0]] += 1
        if not votes:
            break
        (old, new), _votes = votes.most_common(1)[0]
        trial = {(_rename(n, old, new) if n not in exp else n): s for n, s in current.items()}
        gain = sum(1 for n in trial if n in exp) - matched()
        if gain <= 0:
            break
        out.rules.append(Rule("rename", f"layer renamed: {old} -> {new}",
                              {"old": old, "new": new}, gain))
        current = trial
    # tied weights saved once
    present = {n: keys[s] for n, s in current.items() if n in exp}
    used: set[str] = set()
    for e in sorted(e for e in exp if e not in current):
        partner = _tie_partner(e, exp, present, used)
        if partner is not None:
            out.tied[e] = partner
            used.add(partner)
    if out.tied:
        out.rules.append(Rule("tie", "tied weights saved once: "
                              + ", ".join(f"{a} = {b}" for a, b in sorted(out.tied.items())[:4]),
                              {"pairs": dict(sorted(out.tied.items()))}, len(out.tied)))
    # the result
    for model_name, saved in current.items():
        if model_name in exp:
            out.mapping[prefix + saved] = model_name
            ks, ke = keys[saved], exp[model_name]
            if ks.shape is not None and ke.shape is not None and ks.shape != ke.shape:
                out.shape_mismatches.append({"checkpoint": prefix + saved, "model": model_name,
                                             "saved_shape": list(ks.shape),
                                             "expected_shape": list(ke.shape)})
    out.missing = sorted(e for e in exp if e not in current and e not in out.tied)
    out.unexpected = sorted(prefix + s for n, s in current.items()
                            if n not in exp and s not in out.flat_params)
    out.matched = len(set(out.mapping.values())) + len(out.tied)
    # identity entries say nothing: keep only what is renamed
    out.mapping = {a: b for a, b in out.mapping.items() if a != b}
    return out


def parse_key_list(text: str) -> list[Key]:
    """One name per line (``print("\\n".join(model.state_dict()))``); an optional shape after
    whitespace (``[16, 8]`` or ``16x8`` or ``torch.Size([16, 8])``); ``#`` comments."""
    out: list[Key] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, rest = line.partition(" ")
        if "\t" in name:
            name, _, rest = line.partition("\t")
        dims = re.findall(r"\d+", rest)
        shape = tuple(int(d) for d in dims) if rest.strip() else None
        out.append(Key(name.strip(), shape))
    return out


# -- where the names come from (effects: the probe, the sandbox) -----------------------------

class KeySourceError(Exception):
    """The names could not be read (the message says why, in one line)."""


def checkpoint_keys(path: str) -> tuple[list[Key], str, str]:
    """(names with shapes and storages, format, verdict) of one checkpoint, from the probe
    (static: nothing is loaded). Names of tensors sharing one storage at one offset share a
    ``storage`` (tied)."""
    from pathlib import Path

    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    reports = probe_paths([Path(path)], numeric=False)
    if not reports:
        raise KeySourceError(f"{path}: no checkpoint found")
    if len(reports) > 1:
        raise KeySourceError(f"{path}: holds {len(reports)} checkpoints; name one of them")
    report = reports[0]
    keys = [Key(t.name, tuple(t.shape) if t.shape is not None else None,
                f"{t.file}:{t.storage}:{t.offset}" if t.storage is not None else None)
            for t in report.tensors]
    return keys, report.format, str(report.verdict)


def model_class_keys(spec: str, *, path: str | None, kwargs: dict[str, Any] | None,
                     case: Any = None, timeout_s: float = 300.0) -> list[Key]:
    """The names a model class expects, from instantiating it on torch's meta device inside
    the loader sandbox (``sandbox_children/model_keys.py``); ``spec`` is ``pkg.module:Class``."""
    from ckptrescue.effects.sandbox import run_child

    module, sep, cls = spec.partition(":")
    if not sep or not module or not cls:
        raise KeySourceError(f"--model-class {spec!r}: expected MODULE:CLASS (pkg.models:GPT)")
    outcome = run_child("model_keys", {"module": module, "cls": cls, "path": path or "",
                                       "kwargs": kwargs or {}},
                        case=case, timeout_s=timeout_s, inputs=[path] if path else [])
    if outcome.status != "ok" or not outcome.result.get("ok"):
        why = outcome.result.get("message") or outcome.reason or outcome.stderr_tail[-300:] \
            or outcome.status
        raise KeySourceError(f"--model-class {spec}: {outcome.status}: {why}")
    return [Key(k["name"], tuple(k["shape"]), k.get("storage"))
            for k in outcome.result.get("keys", [])]


# -- the capability: a checkpoint against what the model expects -------------------------------

KEY_LIST_MAX = 64 << 20


@dataclass
class KeyMismatchResult(Recorded):
    checkpoint: str
    expected_from: str
    format: str = ""
    verdict: str = ""
    explanation: KeyExplanation | None = None

    def findings(self) -> list[Finding]:
        e = self.explanation
        if e is None:
            return []
        src = "resume.keys"
        if e.matched_before == e.expected_keys and not e.unexpected:
            return [Finding("KM001", Severity.INFO, f"the checkpoint's names match the model's "
                            f"({e.expected_keys})", evidence=self.checkpoint, source=src)]
        out: list[Finding] = []
        if e.rules and e.resolved:
            out.append(Finding("KM002", Severity.WARNING, "the names do not load as saved: "
                               + "; ".join(e.causes()) + "; the printed mapping fixes them",
                               evidence=self.checkpoint, source=src,
                               details={"causes": e.causes(), "matched_before": e.matched_before,
                                        "matched_after": e.matched_after}))
        if not e.resolved:
            why = []
            if e.flat_params:
                why.append(f"{len(e.flat_params)} FSDP flat parameter(s)")
            if e.shape_mismatches:
                why.append(f"{len(e.shape_mismatches)} name(s) whose shape differs")
            if e.missing:
                why.append(f"{len(e.missing)} expected name(s) nowhere in the checkpoint: "
                           + ", ".join(e.missing[:5]))
            out.append(Finding("KM003", Severity.ERROR, "no renaming makes the checkpoint load "
                               "into the model: " + "; ".join(why), evidence=self.checkpoint,
                               source=src, details={"missing": e.missing[:50],
                                                    "shape_mismatches": e.shape_mismatches[:20],
                                                    "flat_params": e.flat_params[:20]}))
        return out

    def answer(self) -> str:
        return self.explanation.answer() if self.explanation else "no names compared"

    def to_json(self) -> JsonObject:
        data = {"checkpoint": self.checkpoint, "expected_from": self.expected_from,
                "format": self.format, "verdict": self.verdict}
        data.update(self.explanation.to_json() if self.explanation else {})
        data["answer"] = self.answer()
        return data


def read_key_list(path: str) -> list[Key]:
    import os
    import stat as stat_mod

    try:
        st = os.stat(path)
    except OSError as exc:
        raise KeySourceError(f"{path}: cannot read the key list: {exc.strerror or exc}") from exc
    if not stat_mod.S_ISREG(st.st_mode):
        raise KeySourceError(f"{path}: the key list is not a regular file")
    if st.st_size > KEY_LIST_MAX:
        raise KeySourceError(f"{path}: the key list is larger than {KEY_LIST_MAX} bytes")
    with open(path, "rb") as fh:
        text = fh.read(KEY_LIST_MAX).decode("utf-8", "replace")
    keys = parse_key_list(text)
    if not keys:
        raise KeySourceError(f"{path}: the key list names no key")
    return keys


def explain_checkpoint(checkpoint: str, *, reference: str | None = None,
                       keys_file: str | None = None, model_class: str | None = None,
                       model_path: str | None = None, model_kwargs: dict[str, Any] | None = None,
                       case: Any = None) -> KeyMismatchResult:
    """Explain why ``checkpoint`` does not load into the model whose names come from exactly
    one of ``reference`` (a checkpoint), ``keys_file`` (a key list) or ``model_class``
    (instantiated in the loader sandbox)."""
    from ckptrescue.errors import UsageError

    given = [x for x in (reference, keys_file, model_class) if x]
    if len(given) != 1:
        raise UsageError("give exactly one of --reference, --keys or --model-class (what the "
                         "model expects)")
    try:
        ckpt, fmt, verdict = checkpoint_keys(checkpoint)
        if reference:
            expected, source = checkpoint_keys(reference)[0], f"reference {reference}"
        elif keys_file:
            expected, source = read_key_list(keys_file), f"key list {keys_file}"
        else:
            expected = model_class_keys(str(model_class), path=model_path, kwargs=model_kwargs,
                                        case=case)
            source = f"model class {model_class}"
    except KeySourceError as exc:
        raise UsageError(str(exc)) from exc
    if not ckpt:
        raise UsageError(f"{checkpoint}: no tensor names could be read ({fmt}, {verdict})")
    result = KeyMismatchResult(checkpoint=checkpoint, expected_from=source, format=fmt,
                               verdict=verdict, explanation=explain(ckpt, expected))
    result.record("checkpoint.keys", {"checkpoint": checkpoint, "expected_from": source,
                                      "answer": result.answer()})
    result.findings_here()
    return result
