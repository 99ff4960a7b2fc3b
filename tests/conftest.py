"""Shared test configuration.

* ``@pytest.mark.privileged``: needs root and loop devices. Skips with a reason when
  unprivileged, but fails instead when ``CKPTRESCUE_REQUIRE_PRIVILEGED=1`` (set by ``.ci/run``).
  Such tests run one at a time across the pytest-xdist workers (``KERNEL_LOCK``).
* ``@pytest.mark.needs_tool("xfs_db", ...)``: skips when a tool is missing, fails in CI.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRE = os.environ.get("CKPTRESCUE_REQUIRE_PRIVILEGED") == "1"
REPO = Path(__file__).resolve().parent.parent

# Every child process (the console script, ``python -m ckptrescue``, fixture writers) imports
# the tree under test, whatever checkout the environment's ``ckptrescue`` was installed from.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
# The tests' own torch processes (oracles, fixture writers) load on CPU with torch alone, as
# the kit's sandbox child does: no scan of every installed distribution for device backends.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# And with numpy's BLAS on one thread, as the console script runs it: OpenBLAS otherwise starts a
# thread per core in every process that imports numpy (each worker, oracle and fixture writer),
# and each spins on a CPU for a while (about 0.17 CPU-s of an ``import torch``).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# A suite started in the background of a script (`make test &`, no job control) inherits Ctrl-C
# ignored, and an ignored signal stays ignored across exec: every child the Ctrl-C tests
# interrupt would run on to its end. Handled here, it is back to its default in each child (and
# a Ctrl-C at that terminal now stops the suite too).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A worker holds torch, TensorFlow, Textual and the kit: about 700,000 objects that live as long
# as it does. A full (generation 2) collection walks them all, about 0.3 s, and with the default
# thresholds ran every ten younger collections: 13-20 times a worker on a third of the suite,
# 5-6 CPU-s each (measured with gc.callbacks). One in a hundred still frees a test file's cycles
# long before they matter (peak RSS of a worker: up to +20 %); what collection imported, frozen
# below, is never walked again.
gc.set_threshold(700, 10, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()
    _FROZEN_AT[0] = len(sys.modules)


# Tests import torch, TensorFlow, moto... on first use, after the freeze above: each such import
# adds hundreds of thousands of objects that live as long as the worker, and every full
# collection after it walked them again. After a test that imported at least that many modules,
# garbage is collected once and what the worker then holds is frozen too (a few tests a worker;
# that includes the values of module- and session-scoped fixtures alive at that point).
_FROZEN_AT = [0]
_NEW_MODULES = 100


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if len(sys.modules) - _FROZEN_AT[0] >= _NEW_MODULES:
        gc.collect()
        gc.freeze()
        _FROZEN_AT[0] = len(sys.modules)


def pytest_configure(config: pytest.Config) -> None:
    # At its end a session collects garbage five times over to surface unraisable exceptions
    # (pytest's unraisableexception plugin): 1.5-2.5 CPU-s a worker for a walk of every object
    # four times more, at the tail of the run. Once finds the garbage; it is walked once.
    from _pytest import unraisableexception

    key = getattr(unraisableexception, "gc_collect_iterations_key", None)
    if key is not None:
        config.stash[key] = 1


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: none without it
def pytest_testnodedown(node: object, error: object | None) -> None:
    """A worker that went down says how: pytest-xdist reports only "Not properly terminated"
    (its channel ended); the exit status tells a signal (which one) from an exit (which code).
    Other errors (an interrupt, a remote error) come from a worker that is still answering."""
    if error != "Not properly terminated":
        return
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return
    try:
        status = popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        how = "still running 10 s after its channel closed"
    else:
        if status >= 0:
            how = f"exited with status {status}"
        else:
            try:
                how = f"killed by {signal.Signals(-status).name}"
            except ValueError:
                how = f"killed by signal {-status}"
    name = getattr(getattr(node, "gateway", None), "id", "?")
    sys.stderr.write(f"\n[{name}] worker pid {popen.pid}: {how}\n")
    sys.stderr.flush()


def _privileged_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not Path("/dev/loop-control").exists():
        return "needs loop devices (/dev/loop-control missing)"
    if shutil.which("losetup") is None:
        return "needs losetup"
    return None


def _skip_or_fail(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"CKPTRESCUE_REQUIRE_PRIVILEGED=1 but {reason}")
    pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), three groups each run in one worker: the TUI
    tests (they share fixed-path screens), the other privileged tests (they take
    ``KERNEL_LOCK`` in turn: in one worker, no worker waits for it while the others run the
    rest) and the contracts tests (``import_graph`` parses the sources once a process). First
    of the hooks:
    xdist's worker hook reads the ``xdist_group`` marks to name the groups, and a mark added
    after it was ignored (the TUI tests went to both workers, one waiting on the other's lock of
    the screens' directory).

    A privileged test may not name a group of its own: xdist would join the names ("kernel_x"),
    and that group, on another worker, would only wait for the lock while the kernel group
    holds it (about 70 s of three workers idle in the first two minutes of a run, measured)."""
    tui = REPO / "tests" / "tui"
    contracts = REPO / "tests" / "contracts"
    for item in items:
        if tui in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.xdist_group("tui"))
        elif item.get_closest_marker("privileged"):
            if item.get_closest_marker("xdist_group") is not None:
                raise pytest.UsageError(f"{item.nodeid}: a privileged test runs in the kernel "
                                        "group; drop its xdist_group mark")
            item.add_marker(pytest.mark.xdist_group("kernel"))
        elif contracts in Path(str(item.path)).parents:
            # one worker parses the package's sources once (import_graph caches them per
            # process): spread over three workers, each parsed them again (about 2.7 CPU-s)
            item.add_marker(pytest.mark.xdist_group("contracts"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("privileged"):
        problem = _privileged_problem()
        if problem:
            _skip_or_fail(problem)
    for marker in item.iter_markers("needs_tool"):
        for tool in marker.args:
            if shutil.which(tool) is None:
                _skip_or_fail(f"needs the {tool} tool on PATH")


@pytest.fixture
def case(tmp_path: Path):  # noqa: ANN201
    """A fresh case directory."""
    from ckptrescue.record.case import Case

    return Case.create(tmp_path / "case", title="test case", examiner="pytest")


# Loop devices, mounts and block-layer flags are one machine-wide state. Two tests changing it
# at once met kernel behaviour no test asked about: a number one test had just detached was
# attached by the other, whose mount then read no superblock ("unable to read superblock", "no
# filesystem found"; twice in about a dozen full runs). A privileged test holds this lock from
# its setup to its teardown. They run in one worker (the "kernel" group above), so only a
# privileged TUI test ever waits for it, and the lock also holds between two test sessions
# running on one machine.
KERNEL_LOCK = Path(tempfile.gettempdir()) / "ckptrescue-tests-kernel-state.lock"


@contextlib.contextmanager
def _kernel_lock() -> Iterator[None]:
    with open(KERNEL_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture
def kernel_state_still() -> Iterator[None]:
    """For a test that reads machine-wide state (the block devices) without changing it: no
    privileged test changes it meanwhile (``KERNEL_LOCK``, held to the test's end)."""
    with _kernel_lock():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if item.get_closest_marker("privileged") is None:
        yield
        return
    with _kernel_lock():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """In CI (CKPTRESCUE_REQUIRE_PRIVILEGED=1) nothing may skip silently: a skip, whatever its
    cause (a missing tool, a missing optional package, importorskip), is a failure there."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CKPTRESCUE_REQUIRE_PRIVILEGED=1): {reason}"


@pytest.fixture(autouse=True)
def _acquired_images_made_mutable_again(request: pytest.FixtureRequest):  # noqa: ANN201
    """The kit makes images it acquired immutable (``chattr +i``) once hashed; a test's
    tmp_path could then never be removed. Clear the flag under tmp_path after each test that
    used one."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        from ckptrescue.storage import writeblock

        writeblock.clear_immutable_tree(tmp)


# A btrfs image whose one data block fails its checksum, mounted read-only: reads of that block
# return a real EIO (dataset hashing and checkpoint reads are tested against it).
def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout


def file_offset_in_image(image: Path, marker: bytes) -> int:
    with image.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        first = m.find(marker)
        assert first >= 0, "marker not found in image"
        assert m.find(marker, first + 1) < 0, "marker found twice in image"
        return first


@pytest.fixture
def btrfs_with_bad_block(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """Yields (source_dir, image, make_mount) helper: fill source_dir, then call ``mount()``.

    Usage: ``src, image, mount = fixture``; ``mnt = mount((victim_rel, bad_offset), ...)`` builds
    the image from ``src`` with ``mkfs.btrfs --rootdir`` (no read-write mount ever), flips one byte
    in the data block of each victim that holds its ``bad_offset`` (found by searching the image
    for that block's bytes), attaches the image read-only and mounts it ``ro``. Unmounted and
    detached in ``finally``; the image is checked unchanged.
    """
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from fixtures.storage import detach_own

    src = tmp_path / "btrfs-src"
    src.mkdir()
    image = tmp_path / "dataset.btrfs.img"
    state: dict[str, str] = {}

    def mount(*victims: tuple[str, int]) -> Path:
        with image.open("wb") as fh:
            fh.truncate(160 << 20)
        _run("mkfs.btrfs", "-q", "--rootdir", str(src), str(image))
        for victim_rel, bad_offset in victims:
            data = (src / victim_rel).read_bytes()
            block = bad_offset - bad_offset % 4096
            marker = data[block : block + 4096]  # the whole block: unique in the image
            where = file_offset_in_image(image, marker)  # data extents are 4 KiB aligned
            with image.open("r+b") as fh:
                fh.seek(where + 100)
                b = fh.read(1)
                fh.seek(where + 100)
                fh.write(bytes([b[0] ^ 0xFF]))
        state["image_sha"] = hashlib.sha256(image.read_bytes()).hexdigest()
        loop = _run("losetup", "--read-only", "--find", "--show", str(image)).strip()
        state["loop"] = loop
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        _run("mount", "-t", "btrfs", "-o", "ro", loop, str(mnt))
        state["mnt"] = str(mnt)
        return mnt

    try:
        yield src, image, mount  # type: ignore[misc]
    finally:
        if "mnt" in state:
            subprocess.run(["umount", state["mnt"]], check=False, timeout=60)
        if "loop" in state:
            detach_own(state["loop"], image)
        if "image_sha" in state:
            after = hashlib.sha256(image.read_bytes()).hexdigest()
            assert after == state["image_sha"], "the read-only mounted image changed"
