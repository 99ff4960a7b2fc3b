"""Shared test configuration.

* ``@pytest.mark.privileged``: needs root and loop devices. Skips with a reason when
  unprivileged, but fails instead when ``CKPTRESCUE_REQUIRE_PRIVILEGED=1`` (set by ``.ci/run``).
  Such tests run one at a time across the pytest-xdist workers (``KERNEL_LOCK``).
* ``@pytest.mark.needs_tool("xfs_db", ...)``: skips when a tool is missing, fails in CI.
"""

from __future__ import annotations

import fcntl
import os
import shutil
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
    """Under pytest-xdist (``--dist loadgroup``): the TUI tests share fixed-path screens, so they
    run in one worker; so do the other privileged tests (they take ``KERNEL_LOCK`` in turn: in
    one worker, no worker waits for it while the others run the rest). First of the hooks:
    xdist's worker hook reads the ``xdist_group`` marks to name the groups, and a mark added
    after it was ignored (the TUI tests went to both workers, one waiting on the other's lock of
    the screens' directory)."""
    tui = REPO / "tests" / "tui"
    for item in items:
        if tui in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.xdist_group("tui"))
        elif item.get_closest_marker("privileged"):
            item.add_marker(pytest.mark.xdist_group("kernel"))


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if item.get_closest_marker("privileged") is None:
        yield
        return
    with open(KERNEL_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
