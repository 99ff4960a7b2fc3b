"""Inside a torch zip, ``data.pkl`` is judged by the pickle rules as torch's weights-only
unpickler reads it: a payload followed by a parse error is ``unsafe`` (the unpickler ran the
payload before it stopped), and an opcode the weights-only unpickler does not implement makes the
file ``unreadable``, never ``intact``. Files are built with ``fixtures/malicious.py`` (torch.save
of integer-generated tensors, ``data.pkl`` edited by opcodes); nothing is unpickled here."""

from __future__ import annotations

import io
import zipfile

from ckptrescue.checkpoints.base import Verdict
from fixtures import malicious as mal

from .conftest import probe1


def _edit_pickle(path, transform) -> None:
    raw = path.read_bytes()
    src = zipfile.ZipFile(io.BytesIO(raw))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = transform(data)
            out.writestr(info.filename, data)


def test_payload_then_parse_error_is_unsafe(tmp_path) -> None:
    path = mal.torch_zip(tmp_path / "p.pt", mal.payload("os.system"))
    _edit_pickle(path, lambda data: data[:-1] + b"\xff")  # STOP replaced by a bad opcode
    report = probe1(path)
    codes = {f.code for f in report.findings}
    assert "PK002" in codes and "PK001" in codes
    assert report.verdict is Verdict.UNSAFE


def test_opcode_the_weights_only_unpickler_refuses_is_not_intact(tmp_path) -> None:
    """NONE + POP: harmless to any unpickler, but torch's weights-only unpickler does not
    implement POP and refuses the file (checked with the real loader in a child process)."""
    import subprocess
    import sys

    import torch

    path = tmp_path / "ok.pt"
    torch.save(mal.state(), path)
    _edit_pickle(path, lambda data: data[:2] + b"N0" + data[2:])
    report = probe1(path)
    # (also damaged: the edited data.pkl no longer matches .data/serialization_id)
    assert report.verdict in {Verdict.UNREADABLE, Verdict.DAMAGED}
    assert any(f.code == "PK007" and "POP" in f.title for f in report.findings)
    load = subprocess.run([sys.executable, "-c", "import sys, torch; "
                           "torch.load(sys.argv[1], weights_only=True)", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert load.returncode != 0 and "Unsupported operand" in load.stderr
