"""The guard reads each argv as the tool does (issue: safety you can prove).

* every form that once slipped through the guard (and the family it stands for) is refused;
* a property test: any spelling of an argv the tool reads the same way — long options
  abbreviated, ``=`` or separate values, short flags regrouped, options after operands — gets the
  decision of its canonical spelling;
* identity: a hard link, a symlinked directory or a file on a filesystem backed by evidence is
  evidence too. Pure except the identity tests, which use files in ``tmp_path``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_guard import ALLOWED, CTX, REFUSED

from ckptrescue.guard import GuardContext, check
from ckptrescue.guard.grammar import Grammar, Opt, ParseError, parse, resolve_long
from ckptrescue.guard.tools import GRAMMARS
from ckptrescue.guard.tools._base import Subcommands

# (argv, a word the reason must contain): the reproducers from the issue and their families
SLIPPED_THROUGH = [
    # a command string inside an option
    ("rsync -a -e \"sh -c 'dd if=/dev/zero of=/dev/sdb'\" /src/ /tmp/dst/", "shell"),
    ("rsync -a --rsh=\"sh -c x\" /src/ /tmp/dst/", "shell"),
    ("rsync -a -e'sh -c x' /src/ /tmp/dst/", "shell"),
    ("rsync -ae 'sh -c x' /src/ /tmp/dst/", "shell"),
    ("rsync -a --rsync-path='sh -c x' /src/ /tmp/dst/", "shell"),
    ("rsync -a --rsync-p='touch /x' /src/ /tmp/dst/", "write files"),
    ("rsync -a src/ host:/dst/", "remote"),
    ("find /mnt -exec sh -c 'echo x > /dev/sdb' {} ;", "shell"),
    ("find /mnt -execdir dd of=/dev/sdb ;", "block device"),
    ("find /mnt -okdir rm {} +", "deletes"),
    ("find /mnt -fprint /tmp/x", "writes"),
    ("dmsetup --exec 'rm -rf /' ls", "runs a command"),
    ("dmsetup --exe 'rm -rf /' ls", "runs a command"),
    ("zpool status -c smart tank", "scripts"),
    # abbreviated long options
    ("mount -r -t xfs -o ro,norecovery --read-w /dev/loop0 /mnt/x", "read-write"),
    ("mount -t xfs -o ro,norecovery --rw /dev/loop0 /mnt/x", "read-write"),
    ("mount -t xfs -o ro,norecovery,rw /dev/loop0 /mnt/x", "read-write"),
    ("mount -t xfs -o ro,norecovery -o rw /dev/loop0 /mnt/x", "read-write"),
    ("mount -t xfs -o ro,norecovery --options=rw /dev/loop0 /mnt/x", "read-write"),
    ("mount -t xfs -o ro,norecovery --opt=rw /dev/loop0 /mnt/x", "ambiguous"),
    ("mount --re -t xfs /dev/loop0 /mnt/x", "ambiguous"),
    ("mount -t xfs -o ro,norecovery --bi /dev/loop0 /mnt/x", "bind"),
    ("mount -t xfs -o ro,norecovery,defaults /dev/loop0 /mnt/x", "allowlist"),
    ("mount -t xfs -o ro,norecovery /dev/loop0", "fstab"),
    ("dmesg --cle", "clears"),
    ("dmesg --read-c", "clears"),
    ("smartctl --te=long /dev/sda", "self-tests"),
    ("smartctl --sa=on /dev/sda", "settings"),
    ("smartctl -l scterc,70,70 /dev/sda", "sets"),
    ("date --se=2020-01-01", "clock"),
    ("journalctl --vacuum-t=1d", "deletes"),
    ("journalctl --vac=1d", "ambiguous"),
    ("hostname --fi=/tmp/name", "host name"),
    # a value-taking letter inside a combined short-flag group
    ("xfs_io -rc 'pwrite -S 0x42 0 4096' /dev/sdb", "pwrite"),
    ("xfs_io -rcpwrite /dev/sdb", "pwrite"),
    ("xfs_io -r -c 'fiemap -v' -c 'truncate 0' /mnt/x/f", "truncate"),
    ("debugfs -cR 'dump <2> /dev/X' /dev/sdb", "dump"),
    ("debugfs -cRwrite /dev/sdb", "write"),
    ("debugfs -R 'bmap -a <12> 0' /dev/sdb", "block map"),
    ("xfs_db -rc write /dev/sdb", "modifies"),
    ("xfs_db -rxc print /dev/sdb", "-x"),
    ("xfs_db -r -c 'version attr2' /dev/sdb", "sets a value"),
    ("xfs_db -r -c 'uuid generate' /dev/sdb", "sets a value"),
    ("e2fsck -fny /dev/sdb", "-y/-p/-a"),
    ("e2fsck -nF /dev/sdb", "flush"),
    # options the guard believed take no value (or do)
    ("ddrescue --fo -X 1 /dev/sda -L /dev/sdb /tmp/map", "--force"),
    ("ddrescue -X 1 /dev/sda -L /dev/sdb /tmp/map", "block device"),
    ("ddrescue -nL /dev/sda /dev/sdb /tmp/map", "block device"),
    ("ddrescue --log-events=/evidence/disk.img /dev/sda /tmp/o /tmp/m", "evidence"),
    ("ddrescue --same /dev/sda /tmp/o /tmp/m", "same-file"),
    ("ddrescue -F- /dev/sda /tmp/o /tmp/m", "fill-mode"),
    ("losetup -fP --show /evidence/disk.img", "--read-only"),
    # options that write files
    ("blkid --cache=/tmp/cache /dev/sda", "cache"),
    ("blkid -c/tmp/cache /dev/sda", "cache"),
    ("blkid -pc /tmp/cache /dev/sda", "cache"),
    ("ddrescuelog -d /tmp/map", "deletes"),
    ("ddrescuelog --del /tmp/map", "deletes"),
    ("ddrescuelog -tc /tmp/map", "creates"),
    ("journalctl -D /var/log/journal --vacuum-size=1", "deletes"),
    ("journalctl --cursor-f=/tmp/c", "cursor"),
    ("xfs_logprint -C /evidence/disk.img /dev/sdb", "evidence"),
    ("xfs_metadump /dev/sdb /evidence/disk.img", "evidence"),
    ("dd if=/dev/sda of=/evidence/disk.img", "evidence"),
    ("dcfldd if=/dev/sda hashlog=/evidence/disk.img", "evidence"),
    ("dc3dd if=/dev/sda wipe=/dev/sdb", "allowlist"),
    ("zpool import -o readonly=on -o cachefile=/etc/zfs/zpool.cache -N tank", "cache file"),
    ("zdb -x /tmp/dump tank", "dumps"),
    ("xxd -rp dump.hex /dev/sda", "-r"),
    ("xxd -revert dump.hex /dev/sda", "-r"),
    ("file -C -m /tmp/magic", "allowlist"),
    # repeated options: the last one wins
    ("zpool import -o readonly=on -o readonly=off -N tank", "readonly=on"),
    ("zpool import -N -o readonly=on -oreadonly=off tank", "readonly=on"),
    # subcommands after global options
    ("dmsetup --sort name reload ckr-1 t.table", "changes device-mapper"),
    ("dmsetup -f remove ckr-1a2b-vg-data", "--force"),
    ("nvme format /dev/nvme0n1 --ses=1", "erases"),
    ("udevadm -d trigger", "changes device state"),
    ("zfs -V mount -o rw tank/ds", "-o ro"),
    # unmounting/detaching what the case never attached
    ("umount -R /mnt/x", "submounts"),
    ("umount /mnt/other", "not a mount this case made"),
    ("umount --lazy /", "not a mount this case made"),
    ("losetup -d /dev/loop0", "not a loop device this case attached"),
    ("losetup --detach=/dev/loop7", "not a loop device this case attached"),
    ("losetup -d /dev/loop3 /dev/loop0", "not a loop device this case attached"),
    ("dmsetup remove ckr-9-other", "not a device this case assembled"),
    ("zpool export rpool", "readonly=on"),
    # found by review: writes to a directory holding evidence, to the host's own trees
    ("rsync -a /tmp/src/ /evidence/", "holds evidence"),
    ("rsync -a /tmp/src/ /", "holds evidence"),
    ("dd if=/tmp/name of=/proc/sys/kernel/hostname", "host's own files"),
    ("dd if=/tmp/x of=/proc/sysrq-trigger", "host's own files"),
    ("dd if=/tmp/x of=/usr/local/sbin/losetup", "host's own files"),
    ("rsync -a /tmp/src/ /etc/", "host's own files"),
    ("ddrescue /dev/sda /var/lib/x.img /tmp/x.map", "host's own files"),
    ("xfs_logprint -C /boot/x /dev/sdb", "host's own files"),
    # mount points: never the host's trees, never over files, never without nosuid/nodev/noexec
    ("mount -t ext4 -o ro,noload,nosuid,nodev,noexec /dev/loop3 /usr/local/sbin", "host's own"),
    ("mount -t ext4 -o ro,noload,nosuid,nodev,noexec /dev/loop3 /srv/busy", "empty directory"),
    ("mount -t ext4 -o ro,noload,nosuid,nodev /dev/loop3 /mnt/x", "noexec"),
    ("mount -t ext4 -o ro,noload,nosuid,nodev,noexec,errors=panic /dev/loop3 /mnt/x",
     "allowlist"),
    # commands inside commands: by path, and where GNU find really ends them
    ("find /tmp -maxdepth 0 -exec /tmp/evil/cat {} ;", "not the cat installed"),
    ("find /tmp -exec dmsetup remove ckr-1a2b-vg-data + -uid ckr-other ;", "kit's own"),
    ("rsync -a -e /tmp/evil/sha256sum /src/ /tmp/dst/", "not the sha256sum installed"),
    ("xfs_io -r -C 'open /dev/X' -C 'pwrite -S 0 0 1M' /tmp/f", "open"),
    ("xxd --r -cx /tmp/hex /dev/sdb", "reading options"),
    ("xxd -cx -r -cx /tmp/hex /dev/sdb", "reading options"),
    ("xxd -c 16 /tmp/a /tmp/b", "output file"),
    ("debugfs -R 'ea_get -xf /dev/X / user.x' /tmp/img", "writes a file"),
    ("debugfs -R 'ea_get -f/dev/X / user.x' /tmp/img", "writes a file"),
    ("fsck -n /tmp/img -- -f -z /tmp/undo", "'--'"),
    ("fsck -n", "exactly one filesystem"),
    ("zpool import -Fn -a", "-a imports"),
    ("zpool import -F -n tank", "readonly=on"),
    ("zfs mount -o ro -O tank/ds", "non-empty"),
    ("blockdev --setro /dev/sda", "writeblock"),
    ("nvme get-log /dev/nvme0 -i 7 -l 512 -lsp=1", "lsp"),
    ("nvme get-log /dev/nvme0 --log-id=0x07 -l 512", "telemetry"),
    ("rsync --list-only host:/x", "remote"),
    ("xfs_metadump -m '1 -x' /dev/sdb /tmp/out", "spaces"),
    # unknown tools, options and argv that cannot be read
    ("lsblk --no-such-option", "unknown option"),
    ("xfs_db -r -z /dev/sdb", "unknown option"),
    ("xfs_db -r -c", "needs a value"),
    ("mount -t", "needs a value"),
    ("python3 -c 'import os'", "never run"),
    ("awk 'BEGIN{system(\"id\")}'", "write files"),
    ("busybox sh", "never run"),
]


def _argv(text: str) -> list[str]:
    return shlex.split(text)


@pytest.mark.parametrize(("command", "keyword"), SLIPPED_THROUGH)
def test_forms_that_slipped_through_are_refused(command: str, keyword: str) -> None:
    decision = check(_argv(command), CTX)
    assert not decision.allowed, f"{command!r} must be refused"
    assert keyword in decision.reason, f"{command!r}: reason {decision.reason!r} lacks {keyword!r}"


ALSO_ALLOWED = [
    "od -A x -t x1 -N 64 -w16 /tmp/x",
    "xxd -c 16 -l 512 -s 0x100 /dev/sda",
    "nvme get-log /dev/nvme0 --log-id=2 --log-len=512 -o json",
    "find /tmp -exec sha256sum {} +",
    "fsck -n /dev/sdb1",
    "dmsetup --sort name info",
    "dmsetup info --sort name",
    "find /mnt -type f -exec sha256sum {} +",
    "find /mnt -xdev -name '*.pt' -print0",
    "zpool import -o readonly=off -o readonly=on -N -R /mnt/alt -d /dev/loop3 tank",
    "mount -o ro -t ext4 -o noload,nosuid -o nodev,noexec /dev/loop3 /mnt/x",
    "losetup -d /dev/loop3",
    "losetup --detach /dev/loop3",
    "losetup --detach=/dev/loop3",
    "umount /mnt/x",
    "umount -l /mnt/x",
    "dmsetup remove --noudevsync ckr-1a2b-vg-data",
    "rsync -a -e 'sha256sum' /src/ /tmp/dst/",
    "ddrescue -X1 -L /dev/sda /tmp/o.img /tmp/o.map",
    "xfs_io -rc 'fiemap -v' /mnt/x/f",
    "debugfs -cR 'stat <12>' /dev/sdb",
]


@pytest.mark.parametrize("command", ALSO_ALLOWED)
def test_read_only_spellings_are_allowed(command: str) -> None:
    decision = check(_argv(command), CTX)
    assert decision.allowed, f"{command!r} refused: {decision.reason}"


def test_every_grammar_is_well_formed() -> None:
    """Every option table builds (no spec mixes value kinds, no duplicate option)."""
    for name, entry in GRAMMARS.items():
        grammars = [entry] if isinstance(entry, Grammar) else (
            [entry.globals, *entry.subs.values()] if isinstance(entry, Subcommands) else [])
        for g in grammars:
            shorts, longs = g.table()
            for key in (*g.refuse, *g.requires, *g.writes, *g.commands):
                assert key in {o.key for o in (*shorts.values(), *longs.values())}, (name, key)


def test_the_files_a_command_writes_are_named() -> None:
    d = check(_argv("ddrescue -b 512 --log-rates=/tmp/r.log /dev/sda /tmp/o.img /tmp/o.map"), CTX)
    assert d.allowed and set(d.writes) == {"/tmp/r.log", "/tmp/o.img", "/tmp/o.map"}
    assert check(_argv("dd if=/dev/sda of=/tmp/x.img"), CTX).writes == ("/tmp/x.img",)
    assert set(check(_argv("rsync -a --log-file=/tmp/l /src/ /tmp/dst/"), CTX).writes) == {
        "/tmp/dst/", "/tmp/l"}
    assert check(_argv("lsblk -J"), CTX).writes == ()
    host = check(_argv("mount -t xfs -o ro,norecovery,nosuid,nodev,noexec /dev/loop3 /mnt/x"), CTX)
    assert host.allowed and host.host_namespace
    assert not check(_argv("lsblk -J"), CTX).host_namespace


def test_abbreviation_follows_getopt_long() -> None:
    g = GRAMMARS["mount"]
    assert isinstance(g, Grammar)
    _, longs = g.table()
    assert resolve_long("read-o", longs, abbreviate=True).key == "read-only"
    assert resolve_long("read-w", longs, abbreviate=True).key == "rw"  # --read-write
    with pytest.raises(ParseError, match="ambiguous"):
        resolve_long("read", longs, abbreviate=True)
    with pytest.raises(ParseError, match="unknown"):
        resolve_long("nope", longs, abbreviate=True)
    # aliases of one option are not ambiguous: --rw and --read-write are the same option
    assert resolve_long("r", {"rw": Opt("rw", longs=("rw",)), "read-write": Opt("rw")},
                        abbreviate=True).key == "rw"


def test_short_group_value_and_double_dash() -> None:
    g = GRAMMARS["xfs_db"]
    assert isinstance(g, Grammar)
    p = parse(g, ["-rc", "sb 0", "-cprint", "--", "-x"])
    assert p.opts == [("r", None), ("c", "sb 0"), ("c", "print")]
    assert p.operands == ["-x"]  # after --, an operand (a file named -x), not expert mode


# ---- the property: spellings do not change the decision --------------------------------------
def _tokens(grammar: Grammar, args: list[str]) -> list[tuple[str, object, str | None]] | None:
    """(kind, Opt or operand, value) in argv order, or None if the argv does not parse."""
    shorts, longs = grammar.table()
    out: list[tuple[str, object, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out += [("operand", a, None) for a in args[i:]]
            out.append(("dd", "--", None))
            return out
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            opt = resolve_long(name, longs, abbreviate=grammar.abbreviate)
            if opt.arg == "required" and not eq:
                value = args[i]
                i += 1
            out.append(("opt", opt, value if (eq or opt.arg == "required") else None))
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                opt = shorts[arg[j]]
                j += 1
                if opt.arg == "none":
                    out.append(("opt", opt, None))
                    continue
                rest = arg[j:]
                if opt.arg == "optional":
                    out.append(("opt", opt, rest or None))
                elif rest:
                    out.append(("opt", opt, rest))
                else:
                    out.append(("opt", opt, args[i]))
                    i += 1
                break
        else:
            out.append(("operand", arg, None))
    return out


def _render(grammar: Grammar, tokens: list, draw: st.DrawFn) -> list[str]:
    _, longs = grammar.table()
    opts = [t for t in tokens if t[0] == "opt"]
    operands = [t[1] for t in tokens if t[0] == "operand"]
    tail = any(t[0] == "dd" for t in tokens)
    if not grammar.posix and not tail and operands and draw(st.booleans()):
        # GNU getopt permutes: options may follow the operands (their own order is kept,
        # since the last of a repeated option wins)
        cut = draw(st.integers(0, len(opts)))
        tokens = list(opts[:cut]) + [("operand", o, None) for o in operands] + list(opts[cut:])
    out: list[str] = []
    pending_group = ""
    for kind, item, value in tokens:
        if kind != "opt":
            if pending_group:
                out.append("-" + pending_group)
                pending_group = ""
            if kind == "operand":
                if tail and "--" not in out:
                    out.append("--")
                out.append(item)  # type: ignore[arg-type]
            continue
        opt: Opt = item  # type: ignore[assignment]
        use_long = bool(opt.longs) and (not opt.shorts or draw(st.booleans()))
        if use_long:
            if pending_group:
                out.append("-" + pending_group)
                pending_group = ""
            full = draw(st.sampled_from(opt.longs))
            spelled = full
            if grammar.abbreviate:
                cands = [full[:n] for n in range(1, len(full) + 1)
                         if _unique(full[:n], longs, opt)]
                spelled = draw(st.sampled_from(cands)) if cands else full
            if value is None:
                out.append(f"--{spelled}")
            elif opt.arg == "optional" or draw(st.booleans()):
                out.append(f"--{spelled}={value}")
            else:
                out += [f"--{spelled}", value]
            continue
        letter = draw(st.sampled_from(opt.shorts))
        if opt.arg == "none":
            if draw(st.booleans()):
                pending_group += letter
            else:
                if pending_group:
                    out.append("-" + pending_group)
                    pending_group = ""
                out.append("-" + letter)
            continue
        group = pending_group + letter
        pending_group = ""
        if value is None:
            out.append("-" + group)
        elif opt.arg == "optional" or (value and draw(st.booleans())):
            out.append("-" + group + value)
        else:
            out += ["-" + group, value]
    if pending_group:
        out.append("-" + pending_group)
    return out


def _unique(prefix: str, longs: dict[str, Opt], opt: Opt) -> bool:
    if prefix in longs:
        return longs[prefix].key == opt.key
    return {o.key for n, o in longs.items() if n.startswith(prefix)} == {opt.key}


def _grammar_and_args(argv: list[str]) -> tuple[Grammar, list[str], list[str]] | None:
    entry = GRAMMARS.get(argv[0])
    if isinstance(entry, Grammar):
        return entry, [argv[0]], argv[1:]
    if isinstance(entry, Subcommands):
        try:
            g = parse(entry.globals, argv[1:])
        except ParseError:
            return None
        if not g.operands or g.opts:
            return None
        sub = entry.subs.get(g.operands[0])
        return (sub, argv[:2], argv[2:]) if sub is not None else None
    return None


CORPUS = [_argv(c) for c, _ in REFUSED + SLIPPED_THROUGH] + [_argv(c) for c in ALLOWED + ALSO_ALLOWED]
CORPUS += [
    _argv("mount -t xfs -o ro,norecovery,nouuid,nosuid,nodev,noexec /dev/loop3 /mnt/x"),
    _argv("dmesg -x --time-format iso"),
    _argv("journalctl -k -o short-iso --no-pager"),
    _argv("rsync -aHAXS --numeric-ids -x --open-noatime -i --log-file=/tmp/l /mnt/evidence/ /tmp/c/"),
    _argv("zpool import -o readonly=on -o cachefile=none -N -R /mnt/ev -d /dev/loop3 -t 123 t_ckr"),
    _argv("partx --show -b -g -o NR,START,SECTORS /dev/loop3"),
    _argv("dumpe2fs -o superblock=32768 -o blocksize=4096 -h /dev/loop3"),
]
VARIABLE = [a for a in CORPUS if _grammar_and_args(a) is not None]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_spelling_gets_the_canonical_decision(data: st.DataObject) -> None:
    argv = data.draw(st.sampled_from(VARIABLE))
    grammar, head, args = _grammar_and_args(argv)  # type: ignore[misc]
    try:
        tokens = _tokens(grammar, args)
    except (ParseError, KeyError, IndexError):
        return  # not readable: refused whatever the spelling (checked by the tables)
    variant = [*head, *_render(grammar, tokens, data.draw)]  # type: ignore[arg-type]
    canonical = check(argv, CTX)
    decided = check(variant, CTX)
    assert decided.allowed == canonical.allowed, (
        f"{shlex.join(argv)} -> {canonical.allowed} ({canonical.reason}) but "
        f"{shlex.join(variant)} -> {decided.allowed} ({decided.reason})")


def test_the_property_covers_most_tools() -> None:
    tools = {a[0] for a in VARIABLE}
    assert len(VARIABLE) >= 150 and len(tools) >= 30, (len(VARIABLE), sorted(tools))


# ---- identity, not path ------------------------------------------------------------------------
def test_a_hard_link_to_evidence_is_evidence(tmp_path) -> None:
    image = tmp_path / "ev" / "disk.img"
    image.parent.mkdir()
    image.write_bytes(b"x" * 4096)
    link = tmp_path / "elsewhere" / "innocent.img"
    link.parent.mkdir()
    os.link(image, link)
    ctx = GuardContext(evidence_paths=(str(image),))
    assert ctx.writes_forbidden(str(link)), "a hard link reaches the evidence inode"
    d = check(["dd", "if=/dev/zero", f"of={link}", "conv=notrunc"], ctx)
    assert not d.allowed and "evidence" in d.reason
    assert check(["dd", "if=/dev/zero", f"of={tmp_path / 'other.img'}"], ctx).allowed


def test_a_symlinked_or_renamed_view_of_an_evidence_directory_is_evidence(tmp_path) -> None:
    evdir = tmp_path / "evidence"
    (evdir / "run").mkdir(parents=True)
    view = tmp_path / "view"
    view.symlink_to(evdir)
    ctx = GuardContext(evidence_paths=(str(evdir),))
    assert ctx.writes_forbidden(str(view / "run" / "new.pt"))
    assert not check(["rsync", "-a", "/tmp/src/", f"{view}/run/"], ctx).allowed


def test_case_records_by_identity(tmp_path) -> None:
    audit = tmp_path / "case" / "audit.jsonl"
    audit.parent.mkdir()
    audit.write_text("{}\n")
    alias = tmp_path / "alias.jsonl"
    os.link(audit, alias)
    ctx = replace(CTX, protected_paths=(str(audit),))
    assert "case's own records" in (ctx.writes_forbidden(str(alias)) or "")
