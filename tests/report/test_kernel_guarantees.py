"""The report says which guarantees the kernel enforced for the case: every `safety.kernel`
record, whatever its guarantee, with target, enforced or not, how, and why not."""

from __future__ import annotations

from ckptrescue.report import model as report_model
from ckptrescue.report import render


def test_kernel_guarantees_section_lists_every_record_generically(case) -> None:  # noqa: ANN001
    case.log("safety.kernel", {"guarantee": "block-device-readonly", "target": "/dev/loop7",
                               "enforced": True, "how": "BLKROSET", "previous": "rw",
                               "by_kit": True})
    case.log("safety.kernel", {"guarantee": "block-device-readonly", "target": "/dev/loop7",
                               "enforced": True, "how": "BLKROSET", "previous": "rw",
                               "by_kit": True})  # the same state again: shown once
    case.log("safety.kernel", {"guarantee": "image-immutable", "target": "/c/images/d.img",
                               "enforced": False, "by_kit": True,
                               "how": "mode 0444 only (filesystem has no immutable flag)",
                               "reason": "the filesystem has no immutable flag"})
    case.log("safety.kernel", {"guarantee": "tool-namespace", "target": "runner <ns>|x",
                               "enforced": False, "how": "none",
                               "reason": "unprivileged user namespaces are disabled"})
    model = report_model.build(case)
    rows = model["kernel_guarantees"]
    assert [(r["guarantee"], r["enforced"]) for r in rows] == [
        ("block-device-readonly", True), ("image-immutable", False), ("tool-namespace", False)]
    assert any("not enforced by the kernel" in r for r in model["recommendations"])
    assert any("writeblock release" in r for r in model["recommendations"])
    html = render.render(case, "html")
    assert 'data-testid="kernel-guarantees"' in html
    assert "runner &lt;ns&gt;|x" in html and "unprivileged user namespaces" in html
    md = render.render(case, "md")
    section = md[md.index("## Kernel-enforced guarantees"):md.index("## Timeline")]
    assert "| `/dev/loop7` | yes (before: rw) | BLKROSET |" in section
    assert "**no**" in section and "runner &lt;ns&gt;\\|x" in section
    assert "mode 0444 only" in section


def test_no_record_says_only_the_guard_protected(case) -> None:  # noqa: ANN001
    md = render.render(case, "md")
    assert "only the safety guard protected the evidence" in md
