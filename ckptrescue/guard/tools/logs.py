"""Kernel and system logs, and host state that must never be changed: ``dmesg``,
``journalctl``, ``date``, ``hostname``, ``fuser``, ``udevadm``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, Subcommands, grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext

DMESG = grammar(
    "dmesg", "-C --clear", "-c --read-clear", "-D --console-off", "-E --console-on",
    "-F= --file=", "-f= --facility=", "-H --human", "-J --json", "-k --kernel",
    "-L --color=?", "-l= --level=", "-n= --console-level=", "-P --nopager",
    "-p --force-prefix", "-r --raw", "--noescape", "-S --syslog", "-s= --buffer-size=",
    "-u --userspace", "-w --follow", "-W --follow-new", "-x --decode", "-d --show-delta",
    "-e --reltime", "-T --ctime", "-t --notime", "--time-format=", "--since=", "--until=",
    "-h --help", "-V --version", operands=(0, 0), devices=True, caps=("CAP_SYSLOG",),
    refuse={"clear": "dmesg -c/-C clears the kernel ring buffer (evidence)",
            "read-clear": "dmesg -c/-C clears the kernel ring buffer (evidence)",
            "console-off": "dmesg -n/-D/-E changes console logging",
            "console-on": "dmesg -n/-D/-E changes console logging",
            "console-level": "dmesg -n/-D/-E changes console logging"})

_JOURNAL_WRITE = {
    "vacuum-size": "journalctl --vacuum-* deletes journal files",
    "vacuum-time": "journalctl --vacuum-* deletes journal files",
    "vacuum-files": "journalctl --vacuum-* deletes journal files",
    "rotate": "journalctl --rotate changes the journal", "flush": "journalctl --flush changes "
    "the journal", "sync": "journalctl --sync changes the journal", "relinquish-var":
    "journalctl --relinquish-var changes the journal", "smart-relinquish-var": "journalctl "
    "--smart-relinquish-var changes the journal", "setup-keys": "journalctl --setup-keys "
    "writes keys", "update-catalog": "journalctl --update-catalog writes the catalog",
    "cursor-file": "journalctl --cursor-file writes a cursor file",
    "follow": "journalctl --follow never ends",
    "image": "journalctl --image attaches a disk image (loop devices) itself",
}
JOURNALCTL = grammar(
    "journalctl", "--after-cursor=", "-a --all", "-b=? --boot=?", "--case-sensitive=?",
    "-x --catalog", "--cursor-file=", "-c= --cursor=", "-D= --directory=", "--disk-usage",
    "--dmesg", "--dump-catalog", "--facility=", "-F= --field=", "-N --fields", "--file=",
    "--flush", "-f --follow", "--force", "-g= --grep=", "--header", "-h --help",
    "-t= --identifier=", "-T= --exclude-identifier=", "--image=", "--interval=", "-n=? --lines=?",
    "--list-boots", "--list-catalog", "-M= --machine=", "-m --merge", "--namespace=",
    "--no-full", "--no-hostname", "--no-pager", "--no-tail", "--output-fields=", "-o= --output=",
    "-e --pager-end", "-p= --priority=", "-q --quiet", "--relinquish-var", "-r --reverse",
    "--root=", "--rotate", "--setup-keys", "--show-cursor", "-S= --since=", "--smart-relinquish-var",
    "--sync", "--system", "-u= --unit=", "-U= --until=", "--update-catalog", "--user",
    "--user-unit=", "--utc", "--vacuum-files=", "--vacuum-size=", "--vacuum-time=", "--verify",
    "--verify-key=", "--version", "-k", "-l --full",
    refuse=_JOURNAL_WRITE)


def _date(p: Parsed, ctx: GuardContext) -> Decision | None:
    if any(not o.startswith("+") for o in p.operands):
        return Decision.refuse("date with a time argument sets the system clock")
    return None


DATE = grammar(
    "date", "-d= --date=", "--debug", "-f= --file=", "-I=? --iso-8601=?", "--resolution",
    "-R --rfc-email", "--rfc-3339=", "-r= --reference=", "-s= --set=", "-u --utc --universal",
    "--help", "--version",
    refuse={"set": "date -s sets the system clock"}, policy=_date)

HOSTNAME = grammar(
    "hostname", "-a --alias", "-A --all-fqdns", "-b --boot", "-d --domain", "-f --fqdn --long",
    "-F= --file=", "-i --ip-address", "-I --all-ip-addresses", "-s --short", "-y --yp --nis",
    "-h --help", "-V --version",
    refuse={"file": "hostname -F sets the host name from a file",
            "boot": "hostname -b sets the host name"},
    policy=lambda p, ctx: Decision.refuse("hostname with an argument sets the host name")
    if p.operands else None)

FUSER = grammar(
    "fuser", "-a --all", "-i --interactive", "-I --inode", "-k --kill", "-l --list-signals",
    "-m --mount", "-M --ismountpoint", "-n= --namespace=", "-s --silent", "-u --user",
    "-v --verbose", "-w --writeonly", "-V --version", "-4 --ipv4", "-6 --ipv6",
    caps=("CAP_SYS_PTRACE",), devices=True,
    refuse={"kill": "fuser -k kills processes; ckptrescue says whom to stop",
            "interactive": "fuser -i asks before killing"})

UDEVADM = Subcommands(
    "udevadm", globals=grammar("udevadm", "-d --debug", "-h --help", "-V --version", posix=True),
    subs={"info": grammar(
        "udevadm info", "-q= --query=", "-p= --path=", "-n= --name=", "-r --root",
        "-a --attribute-walk", "-t --tree", "-x --export", "-P= --export-prefix=",
        "-d --device-id-of-file", "-e --export-db", "-c --cleanup-db", "-w=? --wait-for-initialization=?",
        "--property=", "--value", "--json=", "--subsystem-match=", "--subsystem-nomatch=",
        "--attr-match=", "--attr-nomatch=", "--property-match=", "--tag-match=",
        "--sysname-match=", "--name-match=", "--parent-match=", "--initialized-match",
        "--initialized-nomatch", "-h --help", "--version",
        refuse={"cleanup-db": "udevadm info --cleanup-db deletes the udev database"})},
    refused={s: f"udevadm {s} changes device state; only udevadm info is allowed"
             for s in ("trigger", "settle", "control", "monitor", "test", "test-builtin",
                       "hwdb", "lock", "wait", "verify", "cat")},
    bare_ok=True)

TOOLS: dict[str, Entry] = {"dmesg": DMESG, "journalctl": JOURNALCTL, "date": DATE,
                           "hostname": HOSTNAME, "fuser": FUSER, "udevadm": UDEVADM}
