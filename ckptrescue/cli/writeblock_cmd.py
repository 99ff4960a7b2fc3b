"""``ckptrescue writeblock status|release``: the kernel write blocks a case set.

Evidence block devices get ``BLKROSET`` and acquired images ``chattr +i`` when the kit touches
them (``ckptrescue.storage.writeblock``); the block stays after the kit exits. These commands
show it and give it back, audited, only for what the case itself set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptrescue.cli.options import CaseDirOpt, JsonOpt, OptionalCaseOpt
from ckptrescue.cli.output import emit_json, say

writeblock_app = typer.Typer(
    help="Kernel write blocks on evidence: BLKROSET on block devices, chattr +i on acquired "
         "images. They stay after the kit exits; release them here.",
    no_args_is_help=True)


@writeblock_app.command("status")
def status(case_dir: OptionalCaseOpt = None, as_json: JsonOpt = False) -> None:
    """List what the case write-blocked and whether the block holds now.

    Without --case: every block device that reads as read-only now.

    Examples:

    \b
        ckptrescue writeblock status --case /cases/INC-042
        ckptrescue writeblock status --json
    """
    from ckptrescue.record.case import Case
    from ckptrescue.storage import writeblock

    rows = writeblock.status(Case.open(case_dir) if case_dir is not None else None)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        say("nothing write-blocked" + (" by this case" if case_dir is not None else ""))
    for row in rows:
        if case_dir is None:
            say(f"{row['target']:<20} read-only"
                + (f"  (loop over {row['loop_backing_file']})" if row.get("loop_backing_file")
                   else ""))
            continue
        now = row.get("readonly_now", row.get("immutable_now"))
        held = {True: "holds", False: "NOT held", None: "gone"}[now]
        what = "released" if row["released"] else "blocked"
        say(f"{row['target']:<40} {row['guarantee']:<22} {what:<9} now: {held}  "
            f"(previous state {row['previous']})")


@writeblock_app.command("release")
def release(
    target: Annotated[Path, typer.Argument(help="Block device or image file the case "
                                           "write-blocked.")],
    case_dir: CaseDirOpt,
    as_json: JsonOpt = False,
) -> None:
    """Restore the recorded previous state of a device (and its partitions) or an image.

    Only for what this case write-blocked itself (refused otherwise, exit 3); audited as
    safety.kernel with released: true. A mounted device is refused: umount it first.

    Examples:

    \b
        ckptrescue writeblock release /dev/sdb --case /cases/INC-042
        ckptrescue writeblock release /cases/INC-042/images/sdb.img --case /cases/INC-042
    """
    from ckptrescue.record.case import Case
    from ckptrescue.storage import writeblock

    records = writeblock.release(target, Case.open(case_dir))
    if as_json:
        emit_json(records)
        return
    for rec in records:
        say(f"released {rec['target']} ({rec['guarantee']}): {rec['how']}")


def register(app: typer.Typer) -> None:
    app.add_typer(writeblock_app, name="writeblock")
