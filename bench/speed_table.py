"""The speed table: every row a ratio against its anchor, measured in the same run, with peak RSS.

    python bench/speed_table.py [--mib 1024] [--repeat 3] [--only probe,many,tf,hash,tui,load]

Each figure is a whole process (``ckptrescue ...`` or ``python -c ...`` from exec to exit),
timed by the parent, its peak RSS and CPU time from GNU time. Every contender runs once to warm
up (page cache, and Python's bytecode cache: ``PYTHONDONTWRITEBYTECODE`` is removed from the
children's environment, since an installed package has its ``.pyc`` files and recompiling ~70
modules per run would add ~0.1 s to every command), then ``--repeat`` times, interleaved with
its anchor; the table shows the best and the median of each ratio, the CPU time, and the load
average before and after (the machine may be shared: a ratio is only as good as the quietest
run).

Rows (goals from the issue):

* ``probe`` (numeric scan on) of a SIZE MiB ``torch.save`` of trained-like weights (normal,
  sigma 0.02) vs ``torch.load(weights_only=True)``: <= 0.25x, < 150 MiB;
* the same for integer-valued float tensors: <= 0.25x;
* ``probe --no-numeric``, trained-like file: <= 0.20x;
* content dependence: the slowest / the fastest ``probe`` of 5 value distributions of the same
  size (trained-like, integer-valued, all zeros, NaN/Inf-heavy, subnormal-heavy): <= 1.3;
* per-tensor cost (no goal in the issue; context): ``probe`` of a ``torch.save`` of 20,000
  tensors of 16 KiB, an optimizer's state, vs ``torch.load``;
* TensorBundle ``probe`` vs TensorFlow's reader (``load_checkpoint`` + every ``get_tensor``)
  including ``import tensorflow``: <= 0.10x;
* ``manifest build --jobs 1`` / ``--jobs 2`` vs ``sha256sum``, as sha256sum's time / ours
  (higher is better): >= 3.4x / 6.5x; with what bounds them: the read + SHA-256 work of the
  files, and the same command on an empty folder (the kit's start-up, which a whole process
  pays before it hashes);
* the TUI's first screen (``make_app`` to its first painted frame, whole process): <= 0.5 s;
* real loads (no goal in the issue; context): ``probe --load`` of a directory of 8 checkpoints
  (warm: one zygote imports torch, each load a forked child) vs one ``python`` that imports
  torch and loads the 8 files with ``torch.load``, unconfined, and vs the same probe with
  ``CKPTRESCUE_SANDBOX=cold`` (a fresh bubblewrap'd interpreter per load).

Fixture values come from numpy's seeded integer generator (exact float32 values; no float
random sampling): "normal" is the sum of four uniform integers (Irwin-Hall) x 2^-16.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).with_name("ckptrescue")
MiB = 1 << 20
KINDS = ("normal", "integer", "zero", "nonfinite", "subnormal")

BUILD = r"""
import sys
import numpy as np
import torch
kind, mib, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
per = 4 << 20  # 16 MiB float32 tensors
n = max(1, mib * (1 << 20) // (per * 4))
if kind == "many":  # an optimizer's state: tensors of 16 KiB, trained-like values; the
    per, n = 4096, mib  # second argument is then their number, not a size
def block(i):
    rng = np.random.default_rng(1000 + i)
    if kind in ("normal", "many"):  # Irwin-Hall of 4 uniform integers: sigma ~0.018, exact in float32
        k = rng.integers(-1024, 1024, size=(4, per), dtype=np.int32).sum(axis=0)
        return k.astype(np.float32) * np.float32(2.0 ** -16)
    if kind == "integer":  # counters, step tables, arange-like embeddings
        return rng.integers(-4096, 4096, size=per, dtype=np.int32).astype(np.float32)
    if kind == "zero":
        return np.zeros(per, np.float32)
    if kind == "nonfinite":  # 3/4 NaN, +Inf, -Inf
        k = rng.integers(0, 4, size=per, dtype=np.int32)
        v = rng.integers(-1024, 1024, size=per, dtype=np.int32).astype(np.float32)
        v *= np.float32(2.0 ** -16)
        v[k == 0] = np.nan
        v[k == 1] = np.inf
        v[k == 2] = -np.inf
        return v
    if kind == "subnormal":  # |x| < 2^-126
        k = rng.integers(-(1 << 20), 1 << 20, size=per, dtype=np.int32)
        return (k.astype(np.float64) * 2.0 ** -146).astype(np.float32)
    raise SystemExit(f"unknown kind {kind}")
state = {f"layers.{i}.weight": torch.from_numpy(block(i)) for i in range(n)}
state["tail.bias"] = torch.zeros(1000)
torch.save({"model": state, "step": 1}, out)
"""

LOAD = r"""
import sys, torch
for path in sys.argv[1:]:
    torch.load(path, weights_only=True, map_location="cpu")
"""

LOADS = 8
BUILD_LOADS = r"""
import sys, torch
for i in range(int(sys.argv[1])):  # integer generators only: the same bytes on any machine
    w = torch.arange(65536 * (i + 1), dtype=torch.int32).reshape(-1, 256)
    torch.save({"w": w, "b": (w[0] % 7).to(torch.int16), "step": torch.tensor(i)},
               f"{sys.argv[2]}/ckpt-{i}.pt")
"""

TF_READ = r"""
import sys
import tensorflow as tf
reader = tf.train.load_checkpoint(sys.argv[1])
for name in reader.get_variable_to_shape_map():
    reader.get_tensor(name)
"""

TUI_FIRST = r"""
import sys
from pathlib import Path
case = None
if sys.argv[2] != "-":  # as `ckptrescue tui --case DIR` opens it before the app
    from ckptrescue.record.case import Case
    case = Case.open(Path(sys.argv[2]))
from ckptrescue.tui.app import make_app
app = make_app(case, cases_root=Path(sys.argv[1]))
async def first(pilot):
    await pilot.pause()
    pilot.app.exit()
app.run(headless=True, auto_pilot=first, size=(100, 30))
"""

TEXTUAL_MINIMAL = r"""
from textual.app import App
from textual.widgets import Static
class Minimal(App):
    def compose(self):
        yield Static("hello")
async def first(pilot):
    await pilot.pause()
    pilot.app.exit()
Minimal().run(headless=True, auto_pilot=first, size=(100, 30))
"""


@dataclass
class Run:
    seconds: float
    rss_mib: float
    cpu: float
    code: int


@dataclass
class Samples:
    runs: list[Run] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def median(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def rss(self) -> float:
        return max(r.rss_mib for r in self.runs)

    @property
    def cpu(self) -> float:
        return min(r.cpu for r in self.runs)


GNU_TIME = shutil.which("time") if Path("/usr/bin/time").exists() else None


def run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        ok: tuple[int, ...] = (0,)) -> Run:
    """One whole process: wall time from the parent; peak RSS and CPU time (user + system)
    of the child itself, from GNU time when installed (a child forked from this process would
    otherwise report this process's RSS as its own peak), else from ``wait4``."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        wrapped = ["/usr/bin/time", "-q", "-f", "%M %U %S", "-o", stats.name, *argv] \
            if GNU_TIME else argv
        start = time.perf_counter()
        child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        proc = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**child_env, **(env or {})}, cwd=cwd)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in ok:
            raise SystemExit(f"{' '.join(argv[:4])} exited {code}:\n"
                             f"{err.decode(errors='replace')[-2000:]}")
        fields = stats.read().split() if GNU_TIME else []
    if len(fields) >= 3:
        return Run(seconds, int(fields[-3]) / 1024, float(fields[-2]) + float(fields[-1]), code)
    return Run(seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, code)


def interleaved(contenders: dict[str, Callable[[], Run]], repeat: int) -> dict[str, Samples]:
    out = {name: Samples() for name in contenders}
    for fn in contenders.values():  # warm-up: bytecode cache, page cache, imports on disk
        fn()
    for _ in range(repeat):
        for name, fn in contenders.items():
            out[name].runs.append(fn())
    return out


def warm(paths: list[Path]) -> None:
    for p in paths:
        with p.open("rb") as fh:
            while fh.read(16 * MiB):
                pass


def ratio_row(label: str, ours: Samples, anchor: Samples, goal: str,
              *, higher_is_better: bool = False) -> str:
    if higher_is_better:
        best = anchor.best / ours.best
        med = anchor.median / ours.median
    else:
        best = ours.best / anchor.best
        med = ours.median / anchor.median
    return (f"{label:<42} {ours.best:6.2f} s vs {anchor.best:6.2f} s  "
            f"{best:5.2f}x (median {med:5.2f}x) goal {goal:<7} "
            f"RSS {ours.rss:5.0f} MiB (anchor {anchor.rss:5.0f})  "
            f"CPU {ours.cpu:5.2f} s (anchor {anchor.cpu:5.2f})")


def probe_rows(work: Path, mib: int, repeat: int) -> list[str]:
    files = {}
    for kind in KINDS:
        path = work / f"{kind}.pt"
        run([sys.executable, "-c", BUILD, kind, str(mib), str(path)])
        files[kind] = path
    warm(list(files.values()))
    env = {"OMP_NUM_THREADS": "1"}
    probe = {k: (lambda p=p: run([str(BIN), "probe", "--json", str(p)], ok=(0, 1)))
             for k, p in files.items()}
    contenders: dict[str, Callable[[], Run]] = {
        "load normal": lambda: run([sys.executable, "-c", LOAD, str(files["normal"])], env=env),
        "load integer": lambda: run([sys.executable, "-c", LOAD, str(files["integer"])],
                                    env=env),
        "no-numeric": lambda: run([str(BIN), "probe", "--json", "--no-numeric",
                                   str(files["normal"])]),
        **{f"probe {k}": fn for k, fn in probe.items()},
    }
    s = interleaved(contenders, repeat)
    rows = [
        ratio_row(f"probe, {mib} MiB torch.save, trained-like", s["probe normal"],
                  s["load normal"], "<= 0.25"),
        ratio_row("probe, integer-valued floats", s["probe integer"], s["load integer"],
                  "<= 0.25"),
        ratio_row("probe --no-numeric, trained-like", s["no-numeric"], s["load normal"],
                  "<= 0.20"),
    ]
    times = {k: s[f"probe {k}"] for k in KINDS}
    slow = max(times, key=lambda k: times[k].best)
    fast = min(times, key=lambda k: times[k].best)
    med_ratio = max(t.median for t in times.values()) / min(t.median for t in times.values())
    cpu_ratio = max(t.cpu for t in times.values()) / min(t.cpu for t in times.values())
    rows.append(f"{'content dependence (5 distributions)':<42} slowest {slow} "
                f"{times[slow].best:.2f} s / fastest {fast} {times[fast].best:.2f} s = "
                f"{times[slow].best / times[fast].best:4.2f} (median {med_ratio:4.2f}; in CPU "
                f"time {cpu_ratio:4.2f}, steadier on a shared machine)  goal <= 1.3   "
                f"RSS max {max(t.rss for t in times.values()):.0f} MiB")
    rows.append("    per distribution (best wall / CPU / RSS): " + ", ".join(
        f"{k} {times[k].best:.2f} s / {times[k].cpu:.2f} s / {times[k].rss:.0f} MiB"
        for k in KINDS))
    return rows


MANY = 20_000


def many_rows(work: Path, repeat: int) -> list[str]:
    """Per-tensor cost: a torch.save of MANY tensors of 16 KiB (about 320 MiB)."""
    path = work / "many.pt"
    run([sys.executable, "-c", BUILD, "many", str(MANY), str(path)])
    warm([path])
    s = interleaved({
        "load": lambda: run([sys.executable, "-c", LOAD, str(path)],
                            env={"OMP_NUM_THREADS": "1"}),
        "probe": lambda: run([str(BIN), "probe", "--json", str(path)], ok=(0, 1)),
    }, repeat)
    path.unlink()
    return [ratio_row(f"probe, {MANY:,} tensors of 16 KiB", s["probe"], s["load"], "-")]


def tf_rows(work: Path, mib: int, repeat: int) -> list[str]:
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return ["TensorBundle probe: skipped (tensorflow not installed)"]
    out = work / "tf"
    res = subprocess.run([sys.executable, str(REPO / "fixtures" / "tensorflow.py"), "--bench",
                          str(out), str(mib)], capture_output=True, text=True, check=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
                              "PYTHONPATH": str(REPO)})
    import json

    prefix = Path(json.loads(res.stdout.strip().splitlines()[-1])["prefix"])
    warm([p for p in prefix.parent.iterdir() if p.is_file()])
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    s = interleaved({
        "tf": lambda: run([sys.executable, "-c", TF_READ, str(prefix)], env=env),
        "probe": lambda: run([str(BIN), "probe", "--json", str(prefix)]),
        "no-numeric": lambda: run([str(BIN), "probe", "--json", "--no-numeric", str(prefix)]),
    }, repeat)
    return [ratio_row(f"TensorBundle probe, {mib} MiB", s["probe"], s["tf"], "<= 0.10"),
            ratio_row("TensorBundle probe --no-numeric", s["no-numeric"], s["tf"], "(context)")]


def hash_rows(work: Path, mib: int, repeat: int) -> list[str]:
    if shutil.which("sha256sum") is None:
        return ["manifest build: skipped (no sha256sum)"]
    import numpy as np

    root = work / "data"
    root.mkdir()
    file_mib = 64
    rng = np.random.default_rng(29)
    for i in range(max(2, mib // file_mib)):
        block = rng.integers(0, 256, size=MiB, dtype=np.uint8).tobytes()
        with (root / f"shard-{i:05d}.bin").open("wb") as fh:
            for j in range(file_mib):
                fh.write(block[j:] + block[:j])
    names = sorted(p.name for p in root.iterdir())
    warm([root / n for n in names])
    empty = work / "empty"
    empty.mkdir()
    s = interleaved({
        "sha256sum": lambda: run(["sha256sum", *names], cwd=root),
        "jobs 1": lambda: run([str(BIN), "manifest", "build", str(root), "-o",
                               str(work / "m1.sha256"), "--jobs", "1", "--no-progress"]),
        "jobs 2": lambda: run([str(BIN), "manifest", "build", str(root), "-o",
                               str(work / "m2.sha256"), "--jobs", "2", "--no-progress"]),
        # the same command with nothing to hash: the process's start, its temporary case, the
        # walk and the outputs, which every build pays once
        "empty": lambda: run([str(BIN), "manifest", "build", str(empty), "-o",
                              str(work / "m0.sha256"), "--jobs", "2", "--no-progress",
                              "--allow-empty"]),
    }, repeat)
    total = len(names) * file_mib
    sys.path.insert(0, str(REPO))
    from ckptrescue.datasets.manifest import build_manifest

    lib: dict[str, Samples] = {"jobs 1": Samples(), "jobs 2": Samples()}
    for _ in range(repeat):  # the library call in this process (bench/datasets.py's way)
        for jobs in (1, 2):
            start = time.perf_counter()
            build_manifest(root, work / f"lib{jobs}.sha256", jobs=jobs)
            lib[f"jobs {jobs}"].runs.append(Run(time.perf_counter() - start, 0, 0, 0))
    one, two = _sha_streams()
    cpu = _read_hash_cpu([root / n for n in names])
    start = min(run([sys.executable, "-S", "-c", "pass"]).seconds for _ in range(3))
    floor2 = cpu / 2 + start
    fixed = s["empty"].best
    return [
        ratio_row(f"manifest build --jobs 1, {total} MiB", s["jobs 1"], s["sha256sum"],
                  ">= 3.4", higher_is_better=True),
        ratio_row("manifest build --jobs 2", s["jobs 2"], s["sha256sum"], ">= 6.5",
                  higher_is_better=True),
        f"{'  in-process build_manifest, jobs 1 / 2':<42} "
        f"{s['sha256sum'].best / lib['jobs 1'].best:5.2f}x / "
        f"{s['sha256sum'].best / lib['jobs 2'].best:5.2f}x sha256sum (best; medians "
        f"{s['sha256sum'].median / lib['jobs 1'].median:.2f}x / "
        f"{s['sha256sum'].median / lib['jobs 2'].median:.2f}x)",
        f"{'  this machine: hashlib SHA-256':<42} one stream {one:6.0f} MiB/s, two threads "
        f"{two:6.0f} MiB/s together ({two / one:.2f}x: the ceiling of --jobs 2 / --jobs 1)",
        f"{'  floor of any 2-core process':<42} read + SHA-256 of these files {cpu:.2f} CPU s, "
        f"/ 2 cores + bare interpreter start (python -S) {start:.2f} s = {floor2:.2f} s: at most "
        f"{s['sha256sum'].best / floor2:.2f}x sha256sum for --jobs 2 with no start-up of its own",
        f"{'  the same with the kit start-up':<42} manifest build of an empty folder {fixed:.2f} s "
        f"(best) + {cpu / 2:.2f} s = {fixed + cpu / 2:.2f} s: at most "
        f"{s['sha256sum'].best / (fixed + cpu / 2):.2f}x sha256sum for --jobs 2",
    ]


def _read_hash_cpu(paths: list[Path]) -> float:
    """CPU seconds (user + system) this process spends reading ``paths`` from the page cache
    into a reused 1 MiB buffer and hashing them with hashlib on one thread: the work no
    build can skip. Half of it plus an interpreter's start is the best wall time on 2 cores."""
    import hashlib

    buf = bytearray(MiB)
    view = memoryview(buf)
    before = os.times()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            digest = hashlib.sha256()
            while n := os.readv(fd, [buf]):
                digest.update(view[:n])
        finally:
            os.close(fd)
    after = os.times()
    return (after.user - before.user) + (after.system - before.system)


def _sha_streams() -> tuple[float, float]:
    """MiB/s of SHA-256 over a cache-resident buffer: one thread, then two at once (hashlib
    releases the GIL: two cores that do not share their SHA units give ~2x)."""
    import hashlib
    import threading

    buf = bytes(range(256)) * 4096  # 1 MiB
    rounds = 400

    def work() -> None:
        for _ in range(rounds):
            hashlib.sha256(buf)

    work()
    start = time.perf_counter()
    work()
    one = rounds / (time.perf_counter() - start)
    threads = [threading.Thread(target=work) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return one, 2 * rounds / (time.perf_counter() - start)


def tui_rows(work: Path, repeat: int) -> list[str]:
    env = {"XDG_STATE_HOME": str(work / "state"), "PYTHONPATH": str(REPO)}
    cases = work / "cases"
    cases.mkdir(exist_ok=True)
    sys.path.insert(0, str(REPO))
    from ckptrescue.record.case import Case

    Case.create(cases / "INC-1", title="bench", examiner="bench")
    s = interleaved({
        "start": lambda: run([sys.executable, "-c", TUI_FIRST, str(cases), "-"], env=env),
        "guided": lambda: run([sys.executable, "-c", TUI_FIRST, str(cases),
                               str(cases / "INC-1")], env=env),
        "textual": lambda: run([sys.executable, "-c", TEXTUAL_MINIMAL], env=env),
    }, repeat)
    rows = []
    for key, label in (("start", "TUI first screen: start (no case)"),
                       ("guided", "TUI first screen: guided (--case)")):
        t = s[key]
        rows.append(f"{label:<42} {t.best:6.2f} s (median {t.median:.2f} s; a one-widget "
                    f"Textual app {s['textual'].best:.2f} s)  goal <= 0.5 s   RSS {t.rss:5.0f} "
                    f"MiB  CPU {t.cpu:5.2f} s (Textual app {s['textual'].cpu:.2f})")
    return rows


def load_rows(work: Path, repeat: int) -> list[str]:
    """``probe --load`` of LOADS checkpoints, warm and cold, against plain ``torch.load``."""
    ckpts = work / "loads"
    ckpts.mkdir()
    run([sys.executable, "-c", BUILD_LOADS, str(LOADS), str(ckpts)])
    files = sorted(ckpts.iterdir())
    warm(files)
    s = interleaved({
        "load": lambda: run([sys.executable, "-c", LOAD, *map(str, files)],
                            env={"OMP_NUM_THREADS": "1"}),
        "warm": lambda: run([str(BIN), "probe", "--json", "--load", str(ckpts)]),
        "cold": lambda: run([str(BIN), "probe", "--json", "--load", str(ckpts)],
                            env={"CKPTRESCUE_SANDBOX": "cold"}),
    }, repeat)
    return [ratio_row(f"probe --load, {LOADS} checkpoints", s["warm"], s["load"], "-"),
            ratio_row("  the same, each load cold", s["cold"], s["load"], "-")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=int(os.environ.get("CKPT_BENCH_MIB", "1024")))
    ap.add_argument("--repeat", type=int, default=int(os.environ.get("SPEED_BENCH_REPEAT", "3")))
    ap.add_argument("--only", default="probe,many,tf,hash,tui,load")
    ap.add_argument("--tmp", default=None, help="work directory (default: system temp)")
    args, _ = ap.parse_known_args()
    only = set(args.only.split(","))
    load0 = os.getloadavg()
    rows: list[str] = []
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-speed-", dir=args.tmp) as tmp:
        work = Path(tmp)
        if "probe" in only:
            rows += probe_rows(work, args.mib, args.repeat)
            for p in work.glob("*.pt"):
                p.unlink()
        if "many" in only:
            rows += many_rows(work, args.repeat)
        if "tf" in only:
            rows += tf_rows(work, args.mib, args.repeat)
        if "hash" in only:
            rows += hash_rows(work, max(args.mib, 1024), args.repeat)
        if "tui" in only:
            rows += tui_rows(work, max(args.repeat, 5))
        if "load" in only:
            rows += load_rows(work, args.repeat)
    load1 = os.getloadavg()
    print(f"speed table ({os.cpu_count()} CPUs; best of {args.repeat}, whole processes; "
          f"load average {load0[0]:.1f} before, {load1[0]:.1f} after)")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
