"""The end of a recovery: a verified swap-back plan for the operator, and a clean-dataset view.

``recover`` never writes into DIR; these are what the operator and the rerun take from it.

* **Swap-back plan** (``--plan PATH``): PATH, JSON of schema ``ckptrescue.swap-back-plan/1``,
  one entry per recovered file — its target in DIR, the replacement in RECOVERY_DIR, the backup
  version it came from, the replacement's SHA-256 and size *hashed again from its bytes when the
  plan is written*, and the manifest's SHA-256 — and a bash script beside it (PATH with ``.sh``
  for ``.json``) for review. The script checks each replacement's SHA-256, copies it to a
  temporary name in the target's directory, checks the copy, and renames it over the target, so
  an interrupted run never leaves a half-written file under a dataset name; it refuses a target
  whose directory resolves outside the dataset, skips targets already good (safe to run again),
  and takes another root as its first argument (apply to a copy first). Every name is quoted for
  bash: ``shlex.quote`` for printable UTF-8, ``$'...'`` with ``\\xNN`` escapes for anything else
  (newlines, control and format characters, non-UTF-8 bytes), so the script holds no raw control
  character and the bytes bash builds are the file's exact name. Unrecoverable files are listed
  as comments (names escaped).
* **Clean view** (``--clean-view VIEW``): a directory of symlinks (absolute targets) to verified
  files only — the files the audit found ok point into DIR, recovered ones into RECOVERY_DIR —
  and its manifest ``VIEW.sha256`` (+ ``VIEW.sha256.jsonl``) beside it; files neither ok nor
  recovered are left out and listed. ``sha256sum -c VIEW.sha256`` run inside VIEW checks it
  (symlinks are followed); so does :func:`verify_view`.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.hashing import hash_file
from ckptrescue.datasets.manifest_files import ManifestEntry, sidecar_path, write_outputs
from ckptrescue.datasets.walk import join, safe_relative, to_json_path
from ckptrescue.errors import UsageError

PLAN_SCHEMA = "ckptrescue.swap-back-plan/1"


# -- what recover hands over ---------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One file recover looked at: recovered (``source`` names the version) or not (``reason``)."""

    rel: bytes
    damage: str
    recovered: bool
    source: str | None
    expected_sha256: str
    reason: str = ""


# -- paths ------------------------------------------------------------------------------------------
def script_path(plan: str | os.PathLike[str]) -> Path:
    """The script beside the plan: ``swap-back.json`` -> ``swap-back.sh`` (else PLAN + ``.sh``)."""
    p = Path(plan)
    return p.with_suffix(".sh") if p.suffix == ".json" else Path(str(p) + ".sh")


def view_manifest_path(view: str | os.PathLike[str]) -> Path:
    """The view's manifest, beside it (never inside: the view holds dataset files only)."""
    return Path(str(Path(view)).rstrip("/") + ".sha256")


def _real(path: str | bytes) -> bytes:
    return os.path.realpath(os.fsencode(path))


def _overlaps(a: str | bytes, b: str | bytes) -> bool:
    ra, rb = _real(a), _real(b)
    return ra == rb or ra.startswith(rb.rstrip(b"/") + b"/") or rb.startswith(ra.rstrip(b"/") + b"/")


def _inside(a: str | bytes, b: str | bytes) -> bool:
    ra, rb = _real(a), _real(b)
    return ra == rb or ra.startswith(rb.rstrip(b"/") + b"/")


def check_outputs(*, root: str, source: str, to: str, targets: Iterable[bytes],
                  plan: str | None, clean_view: str | None,
                  evidence: Sequence[str] = ()) -> None:
    """Refuse (one-line UsageError) an output path inside DIR, the snapshots or the evidence, on
    or around a replacement path RECOVERY_DIR/<name>, or a plan inside the view."""
    outputs: list[tuple[str, str]] = []
    if plan:
        outputs += [("--plan", plan), ("--plan", str(script_path(plan)))]
    if clean_view:
        manifest = view_manifest_path(clean_view)
        outputs += [("--clean-view", clean_view), ("--clean-view", str(manifest)),
                    ("--clean-view", str(sidecar_path(manifest)))]
    if not outputs:
        return
    replacements = [join(os.fsencode(to), rel) for rel in targets if safe_relative(rel)]
    for option, path in outputs:
        if _overlaps(path, root):
            raise UsageError(f"{path}: {option} overlaps the dataset {root}",
                             hint="the kit never writes into the dataset: choose a path outside")
        if not source.startswith("s3://") and _overlaps(path, source):
            raise UsageError(f"{path}: {option} overlaps the snapshots {source}")
        for ev in evidence:
            if _overlaps(path, ev):
                raise UsageError(f"{path}: {option} overlaps the evidence {ev}")
        if _overlaps(path, to) and any(_overlaps(path, r) for r in replacements):
            raise UsageError(f"{path}: {option} collides with a replacement path in {to}",
                             hint="write it outside the recovery directory")
    for p in [plan, str(script_path(plan))] if plan else []:
        if Path(p).is_dir():
            raise UsageError(f"{p}: --plan names a directory; give the plan's file name")
    if plan and clean_view:
        for p in (plan, str(script_path(plan))):
            if _inside(p, clean_view):
                raise UsageError(f"{p}: --plan inside the clean view {clean_view}")
    if clean_view:
        view = Path(clean_view)
        if view.is_symlink() or (view.exists() and not view.is_dir()):
            raise UsageError(f"{view}: --clean-view exists and is not a directory")
        if view.is_dir() and any(view.iterdir()):
            raise UsageError(f"{view}: --clean-view exists and is not empty",
                             hint="give a new or empty directory")


# -- bash quoting -----------------------------------------------------------------------------------
def bash_word(name: bytes) -> str:
    """A bash word that expands to exactly ``name``: ``shlex.quote`` for printable UTF-8, else
    ANSI-C ``$'...'`` with ``\\xNN`` for every byte outside printable ASCII (never a raw newline
    or control character in the script)."""
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        return shlex.quote(text)
    out = []
    for byte in name:
        if byte in (0x27, 0x5C):  # ' and \
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


def comment_text(text: str) -> str:
    """``text`` safe inside a ``#`` comment: every non-printable character escaped."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


_PROLOGUE = r"""set -euo pipefail
export LC_ALL=C
umask 022

default_root=__ROOT__
root=${1-$default_root}
die() { printf 'swap-back: %s\n' "$*" >&2; exit 1; }
real_root=$(realpath -e -- "$root" && echo x) || die "dataset directory not found"
real_root=${real_root%$'\nx'}
[ -d "$real_root" ] || die "the dataset root is not a directory"
tmp=
# a signal becomes an exit, which runs the EXIT trap: bash killed by an untrapped TERM skipped
# it about once in a hundred runs, leaving the temporary behind
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM
trap '[ -z "$tmp" ] || rm -f -- "$tmp"' EXIT
installed=0
already=0

sha_of() {  # FILE -> its SHA-256 (read from stdin: any name is safe)
  local out
  out=$(sha256sum < "$1") || return 1
  printf '%s' "${out%% *}"
}

inside_root() {  # PATH: its deepest existing ancestor resolves inside the dataset root
  local p=$1 up real
  while [ ! -e "$p" ] && [ ! -L "$p" ]; do
    up=${p%/*}
    [ "$up" != "$p" ] || return 1
    p=$up
  done
  real=$(realpath -e -- "$p" && echo x) || return 1
  real=${real%$'\nx'}
  case $real/ in "$real_root"/*) return 0 ;; esac
  return 1
}

swap_back() {  # REPLACEMENT NAME SHA256: verify, copy to a temporary name, verify, rename
  local repl=$1 name=$2 want=$3 target dir
  target=$root/$name
  dir=${target%/*}
  inside_root "$dir" || die "$(printf '%q' "$name"): its directory leads outside $root"
  if [ -f "$target" ] && [ ! -L "$target" ] && [ "$(sha_of "$target")" = "$want" ]; then
    already=$((already + 1))
    return 0
  fi
  [ -f "$repl" ] && [ ! -L "$repl" ] || die "$(printf '%q' "$repl"): replacement missing"
  [ "$(sha_of "$repl")" = "$want" ] \
    || die "$(printf '%q' "$repl"): SHA-256 differs from the plan; nothing installed for it"
  mkdir -p -- "$dir"
  inside_root "$dir" || die "$(printf '%q' "$name"): its directory leads outside $root"
  tmp=$(mktemp -p "$dir" .ckptrescue-swap.XXXXXXXX && echo x) || die "cannot create a temporary file"
  tmp=${tmp%$'\nx'}
  cat -- "$repl" > "$tmp"
  sync -- "$tmp"
  [ "$(sha_of "$tmp")" = "$want" ] \
    || die "$(printf '%q' "$name"): the copy does not hash to the plan's SHA-256; not installed"
  if [ -f "$target" ] && [ ! -L "$target" ]; then
    chmod --reference="$target" -- "$tmp"
  else
    chmod 0644 -- "$tmp"
  fi
  mv -f -T -- "$tmp" "$target"
  tmp=
  installed=$((installed + 1))
}
"""


def swap_line(replacement: bytes, rel: bytes, sha256: str) -> str:
    return f"swap_back {bash_word(replacement)} {bash_word(rel)} {sha256}"


def render_script(*, root: str, plan_file: str, source: str, entries: Sequence[dict[str, Any]],
                  unrecoverable: Sequence[Outcome]) -> str:
    """The bash script of a plan (entries carry ``command``)."""
    head = [
        "#!/usr/bin/env bash",
        f"# ckptrescue swap-back plan: {len(entries)} verified replacement(s); "
        f"{len(unrecoverable)} file(s) not recoverable (listed at the end).",
        f"# Plan: {comment_text(plan_file)}",
        f"# Source: {comment_text(source)}",
        f"# Dataset: {comment_text(root)}",
        "# Usage: bash THIS-SCRIPT [DATASET-ROOT]   (default: the dataset above; try a copy first)",
        "# For each file: the replacement's SHA-256 is checked, it is copied to a temporary name in",
        "# the target's directory, the copy is checked again and renamed over the target, so an",
        "# interrupted run never leaves a half-written file under a dataset name. Targets already",
        "# good are skipped (safe to run again); a target whose directory resolves outside the",
        "# dataset root is refused. The damaged files are overwritten: preserve them first if",
        "# they are evidence. ckptrescue never runs this script.",
    ]
    body = [_PROLOGUE.replace("__ROOT__", bash_word(os.fsencode(root))).rstrip("\n"), ""]
    body += [e["command"] for e in entries]
    tail = [""]
    if unrecoverable:
        tail.append("# NOT RECOVERABLE (no verified replacement; left as they are):")
        tail += [f"#   {comment_text(o.rel.decode('utf-8', 'backslashreplace'))} "
                 f"({comment_text(o.damage)}): "
                 f"{comment_text(o.reason)}" for o in unrecoverable]
    tail.append("printf 'swap-back: %d installed, %d already in place, under %s\\n' "
                "\"$installed\" \"$already\" \"$root\"")
    return "\n".join(head + body + tail) + "\n"


# -- the plan ---------------------------------------------------------------------------------------
@dataclass
class PlanWritten:
    plan_file: str
    script: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    unrecoverable: list[dict[str, Any]] = field(default_factory=list)
    plan_bytes: bytes = b""
    script_bytes: bytes = b""


def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    from ckptrescue.record.atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode=mode)


def write_plan(plan_file: str | os.PathLike[str], *, root: str, to: str, source: str,
               manifest: str, outcomes: Sequence[Outcome]) -> PlanWritten:
    """Write the plan JSON and its script; every replacement hashed again from its bytes now
    (one that no longer matches the manifest goes to ``unrecoverable``, not into the plan)."""
    plan_path = Path(plan_file).absolute()
    script = script_path(plan_path)
    root_abs, to_abs = os.path.abspath(root), os.path.abspath(to)  # noqa: PTH100
    entries: list[dict[str, Any]] = []
    lost: list[Outcome] = []
    for o in outcomes:
        if not o.recovered:
            lost.append(o)
            continue
        replacement = join(os.fsencode(to_abs), o.rel)
        got = hash_file(replacement)
        if got.sha256 != o.expected_sha256:
            why = got.error or f"SHA-256 {str(got.sha256)[:16]}... differs from the manifest"
            lost.append(Outcome(o.rel, o.damage, False, o.source, o.expected_sha256,
                                f"the replacement changed since it was recovered: {why}"))
            continue
        entries.append({
            "path": to_json_path(o.rel), "damage": o.damage,
            "target": to_json_path(join(os.fsencode(root_abs), o.rel)),
            "replacement": to_json_path(replacement), "source": o.source,
            "sha256": got.sha256, "size": got.size, "expected_sha256": o.expected_sha256,
            "command": swap_line(replacement, o.rel, got.sha256)})
    unrecoverable = [{"path": to_json_path(o.rel), "damage": o.damage, "reason": o.reason}
                     for o in lost]
    script_text = render_script(root=root_abs, plan_file=str(plan_path), source=source,
                                entries=entries, unrecoverable=lost)
    data = {"schema": PLAN_SCHEMA, "root": root_abs, "manifest": os.path.abspath(manifest),  # noqa: PTH100
            "source": source, "recovery_dir": to_abs, "script": str(script),
            "apply": f"bash {shlex.quote(str(script))} [DATASET-ROOT]",
            "entries": entries, "unrecoverable": unrecoverable}
    plan_bytes = (json.dumps(data, indent=1) + "\n").encode("utf-8", "surrogatepass")
    script_bytes = script_text.encode("utf-8", "surrogateescape")
    _atomic_write(script, script_bytes, 0o755)
    _atomic_write(plan_path, plan_bytes)
    return PlanWritten(str(plan_path), str(script), entries, unrecoverable, plan_bytes,
                       script_bytes)


# -- the clean view ---------------------------------------------------------------------------------
@dataclass
class ViewWritten:
    view: str
    manifest: str
    sidecar: str
    files: int = 0
    from_dataset: int = 0
    from_recovery: int = 0
    left_out: list[dict[str, Any]] = field(default_factory=list)


def write_clean_view(view: str | os.PathLike[str], *, root: str, to: str,
                     expected: dict[bytes, str], ok: set[bytes], recovered: set[bytes],
                     damage: dict[bytes, str]) -> ViewWritten:
    """Symlinks in ``view`` to every verified file (``ok`` into ``root``, ``recovered`` into
    ``to``), and the view's manifest beside it. ``expected``: name -> manifest SHA-256;
    ``damage``: why a file that is neither was left out."""
    view_path = Path(view).absolute()
    view_path.mkdir(parents=True, exist_ok=True)
    view_b = os.fsencode(view_path)
    view_real = _real(view_b)
    root_b, to_b = os.fsencode(os.path.abspath(root)), os.fsencode(os.path.abspath(to))  # noqa: PTH100
    out = ViewWritten(str(view_path), str(view_manifest_path(view_path)), "")
    entries: list[ManifestEntry] = []
    for rel in sorted(expected):
        if rel in recovered:
            target, origin = join(to_b, rel), "recovery"
        elif rel in ok:
            target, origin = join(root_b, rel), "dataset"
        else:
            out.left_out.append({"path": to_json_path(rel),
                                 "reason": damage.get(rel, "not verified by the audit")})
            continue
        why = _link(view_b, view_real, rel, target)
        if why:
            out.left_out.append({"path": to_json_path(rel), "reason": why})
            continue
        st = os.stat(target)  # noqa: PTH116 - bytes path
        entries.append(ManifestEntry(rel, st.st_size, st.st_mtime_ns, expected[rel]))
        if origin == "recovery":
            out.from_recovery += 1
        else:
            out.from_dataset += 1
    manifest = Path(out.manifest)
    write_outputs(manifest, entries)
    out.sidecar = str(sidecar_path(manifest))
    out.files = len(entries)
    return out


def _link(view_b: bytes, view_real: bytes, rel: bytes, target: bytes) -> str:
    """Make VIEW/rel -> target; '' on success, else why not (never a link outside the view)."""
    if not safe_relative(rel):
        return "the manifest name leads outside the view; refused"
    try:
        st = os.stat(target)  # noqa: PTH116 - bytes path
    except OSError as exc:
        return f"the verified file is gone: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "the verified file is no longer a regular file"
    parent_rel = os.path.dirname(rel)  # noqa: PTH120 - bytes
    parent = join(view_b, parent_rel) if parent_rel else view_b
    try:
        os.makedirs(parent, exist_ok=True)  # noqa: PTH103 - bytes
    except OSError as exc:
        return f"cannot make its directory in the view: {exc.strerror}"
    want_parent = join(view_real, parent_rel) if parent_rel else view_real
    if _real(parent) != want_parent:
        return "its directory in the view is not a plain directory; refused"
    try:
        os.symlink(target, join(view_b, rel))
    except OSError as exc:
        return f"cannot link it in the view: {exc.strerror}"
    return ""


@dataclass
class ViewCheck:
    """What :func:`verify_view` found: ``ok`` names, and ``bad`` (name, why)."""

    ok: list[bytes] = field(default_factory=list)
    bad: list[tuple[bytes, str]] = field(default_factory=list)


def verify_view(view: str | os.PathLike[str], *, allowed: Sequence[str],
                manifest: str | os.PathLike[str] | None = None) -> ViewCheck:
    """Check a clean view against its manifest: each entry is a symlink inside the view that
    resolves to a regular file under one of ``allowed`` (the dataset, the recovery directory)
    with the manifest's SHA-256; any other file in the view is reported too."""
    view_b = os.fsencode(Path(view).absolute())
    view_real = _real(view_b)
    man = Path(manifest) if manifest is not None else view_manifest_path(view)
    lines = sha256sum_format.parse_manifest(man.read_bytes())
    roots = [_real(a) for a in allowed]
    check = ViewCheck()
    listed: set[bytes] = set()
    for line in lines:
        rel = line.name
        listed.add(rel)
        path = join(view_b, rel)
        parent = os.path.dirname(path)  # noqa: PTH120 - bytes
        if not safe_relative(rel) or _real(parent) != os.path.dirname(join(view_real, rel)):  # noqa: PTH120
            check.bad.append((rel, "leads outside the view"))
        elif not os.path.islink(path):  # noqa: PTH114 - bytes
            check.bad.append((rel, "not a symlink"))
        elif not any(_real(path).startswith(r.rstrip(b"/") + b"/") for r in roots):
            check.bad.append((rel, "links outside the dataset and the recovery directory"))
        elif (got := hash_file(path)).sha256 != line.sha256:
            check.bad.append((rel, got.error or "SHA-256 differs from the view's manifest"))
        else:
            check.ok.append(rel)
    for dirpath, dirs, files in os.walk(view_b):
        for name in [d for d in dirs if os.path.islink(join(dirpath, d))] + files:  # noqa: PTH114
            rel = os.path.relpath(join(dirpath, name), view_b)
            if rel not in listed:
                check.bad.append((rel, "in the view but not in its manifest"))
    return check
