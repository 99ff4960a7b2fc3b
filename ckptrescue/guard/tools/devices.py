"""Device health, partition tables, RAID and LVM: reading forms only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Grammar, Parsed
from ckptrescue.guard.tools._base import Entry, Subcommands, grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext


# ---- smartctl --------------------------------------------------------------------------------
def _smartctl(p: Parsed, ctx: GuardContext) -> Decision | None:
    for log in p.values("log"):
        if log.startswith(("scttempint", "scterc,")):
            return Decision.refuse(f"smartctl -l {log} sets a device parameter")
    return None


SMARTCTL = grammar(
    "smartctl", "-h --help --usage", "-V --version --copyright --license", "-i --info",
    "--identify=?", "-g= --get=", "-a --all", "-x --xall", "--scan", "--scan-open",
    "-q= --quietmode=", "-d= --device=", "-T= --tolerance=", "-b= --badsum=", "-r= --report=",
    "-n= --nocheck=", "-s= --smart=", "-o= --offlineauto=", "-S= --saveauto=", "--set=",
    "-H --health", "-c --capabilities", "-A --attributes", "-l= --log=", "-v= --vendorattribute=",
    "-F= --firmwarebug=", "-P= --presets=", "-B= --drivedb=", "-t= --test=", "-C --captive",
    "-X --abort", "-j", "--json=?", "-f= --format=", devices=True,
    caps=("CAP_SYS_RAWIO", "CAP_SYS_ADMIN"),
    refuse={"test": "smartctl -t/-X start or abort self-tests (they load a failing disk)",
            "abort": "smartctl -t/-X start or abort self-tests (they load a failing disk)",
            "captive": "smartctl -C runs a self-test in the foreground",
            "smart": "smartctl -s/-o/-S/--set change device settings",
            "offlineauto": "smartctl -s/-o/-S/--set change device settings",
            "saveauto": "smartctl -s/-o/-S/--set change device settings",
            "set": "smartctl -s/-o/-S/--set change device settings"},
    policy=_smartctl)

# ---- nvme ------------------------------------------------------------------------------------
_NVME_COMMON = ("-o= --output-format=", "-v --verbose", "-H --human-readable", "-b --raw-binary",
                "-n= --namespace-id=", "-t= --timeout=", "-h --help")
_NVME_READ: dict[str, tuple[str, ...]] = {
    "list": (), "list-subsys": (), "smart-log": (), "error-log": ("-e= --log-entries=",),
    "id-ctrl": ("-V --vendor-specific",), "id-ns": ("-V --vendor-specific", "-f --force"),
    "fw-log": (), "show-regs": (), "list-ns": ("-a --all", "-c= --controller-id="),
    "list-ctrl": ("-c= --cntid=",), "effects-log": (), "endurance-log": ("-g= --group-id=",),
    "self-test-log": ("-d= --dst-entries=",), "version": (), "help": (),
    "id-ns-granularity": (), "id-uuid": (), "id-nvmset": ("-i= --nvmset_id=",),
    "primary-ctrl-caps": ("-c= --cntlid=",), "show-topology": ("-r= --ranking=",),
    "supported-log-pages": (),
    "get-feature": ("-f= --feature-id=", "-s= --sel=", "-l= --data-len=", "--cdw11=",
                    "-u= --uuid-index="),
    "get-log": ("-i= --log-id=", "-l= --log-len=", "--lpo=", "--csi=", "--ot", "-s= --lsp=",
                "-S= --lsi=", "--rae"),
}
_NVME_DANGER = {
    "format": "nvme format erases the namespace", "sanitize": "nvme sanitize erases the drive",
    "create-ns": "nvme create-ns changes namespaces",
    "delete-ns": "nvme delete-ns destroys a namespace",
    "attach-ns": "nvme attach-ns changes namespaces",
    "detach-ns": "nvme detach-ns changes namespaces",
    "fw-download": "nvme fw-download changes firmware",
    "fw-commit": "nvme fw-commit activates firmware",
    "fw-activate": "nvme fw-activate activates firmware",
    "set-feature": "nvme set-feature changes device settings",
    "write": "nvme write writes to the namespace", "write-zeroes": "nvme write-zeroes erases blocks",
    "write-uncor": "nvme write-uncor marks blocks unreadable",
    "dsm": "nvme dsm deallocates (trims) blocks", "reset": "nvme reset resets the controller",
    "subsystem-reset": "nvme subsystem-reset resets the subsystem",
    "device-self-test": "nvme device-self-test loads a failing drive",
    "flush": "nvme flush forces writes to media",
    "telemetry-log": "nvme telemetry-log asks the controller to create new host-initiated "
                     "telemetry data",
    "admin-passthru": "nvme admin-passthru sends any admin command",
    "io-passthru": "nvme io-passthru sends any I/O command",
    "security-send": "nvme security-send changes security state",
}
def _nvme_get_log(p: Parsed, ctx: GuardContext) -> Decision | None:
    for log in p.values("log-id"):
        try:
            number = int(log, 0)
        except ValueError:
            return Decision.refuse(f"nvme get-log --log-id {log!r}: not a number")
        if number in {0x07, 0x08}:
            return Decision.refuse("nvme get-log of a telemetry log (07h/08h) asks the controller "
                                   "to create new telemetry data")
    return None


# nvme-cli reads options with getopt_long_only: "-lsp=1" is --lsp
NVME = Subcommands(
    "nvme", globals=grammar("nvme", "--version", "-h --help", posix=True),
    subs={name: Grammar(f"nvme {name}", (*_NVME_COMMON, *extra), operands=(0, 1),
                        long_only=True, devices=name in {"list", "list-subsys", "show-topology"},
                        caps=("CAP_SYS_ADMIN",),
                        refuse=dict.fromkeys(("lsp", "lsi") if name == "get-log" else (),
                                             "nvme get-log --lsp/--lsi select log-specific "
                                             "actions"),
                        policy=_nvme_get_log if name == "get-log" else None)
          for name, extra in _NVME_READ.items()},
    refused=_NVME_DANGER, bare_ok=True)


# ---- hdparm ----------------------------------------------------------------------------------
_HDPARM_READ = {"-I", "-i", "-g", "-C", "-N", "--version", "-h"}


def _hdparm(name: str, args: list[str], ctx: GuardContext, depth: int) -> Decision:
    """hdparm reads each flag and an optional attached value by hand; only bare reading flags."""
    for arg in args:
        if arg.startswith("-") and arg not in _HDPARM_READ:
            return Decision.refuse(f"hdparm {arg} may change device settings; only -I -i -g -C -N")
        if not arg.startswith("-") and not arg.startswith("/"):
            return Decision.refuse(f"hdparm {arg}: a value sets a device setting")
    return Decision.allow(caps=("CAP_SYS_RAWIO", "CAP_SYS_ADMIN"))


# ---- partition tables ------------------------------------------------------------------------
def _needs_one_of(*keys: str, reason: str) -> object:
    def policy(p: Parsed, ctx: GuardContext) -> Decision | None:
        return None if p.has(*keys) else Decision.refuse(reason)
    return policy


FDISK = grammar(
    "fdisk", "-b= --sector-size=", "-c=? --compatibility=?", "-h --help", "-L=? --color=?",
    "-l --list", "-x --list-details", "-n --noauto-pt", "-o= --output=", "-s --getsz",
    "-t= --type=", "-u=? --units=?", "-V --version", "-w= --wipe=", "-W= --wipe-partitions=",
    "-C= --cylinders=", "-H= --heads=", "-S= --sectors=", "--lock=?", "-B --protect-boot",
    refuse={"wipe": "fdisk -w wipes signatures", "wipe-partitions": "fdisk -W wipes signatures"},
    devices=True,
    policy=_needs_one_of("list", "list-details", "getsz", "version", "help",
                         reason="fdisk without -l edits the partition table"))  # type: ignore[arg-type]

_SFDISK_READ = ("list", "dump", "json", "list-free", "show-size", "list-types", "verify",
                "show-pt-geometry", "version", "help")
_SFDISK_WRITE = ("activate", "delete", "reorder", "relocate", "partno", "append", "move-data",
                 "wipe", "wipe-partitions", "label", "label-nested", "part-label", "part-type",
                 "part-uuid", "part-attrs", "disk-id", "backup", "backup-file",
                 "move-use-fsync", "no-reread", "no-tell-kernel", "force")
SFDISK = grammar(
    "sfdisk", "-A --activate", "--delete", "-d --dump", "-J --json", "-l --list",
    "-F --list-free", "-r --reorder", "-s --show-size", "-T --list-types", "-V --verify",
    "--relocate", "-N= --partno=", "-a --append", "-b --backup", "-o= --output=",
    "--move-data=?", "--move-use-fsync", "--no-reread", "--no-tell-kernel", "-O= --backup-file=",
    "-n --no-act", "-q --quiet", "-w= --wipe=", "-W= --wipe-partitions=", "-X= --label=",
    "-Y= --label-nested=", "-G --show-pt-geometry", "--part-label", "--part-type", "--part-uuid",
    "--part-attrs", "--disk-id", "--color=?", "--lock=?", "-u= --unit=", "-v --version",
    "-h --help", "-f --force", "--bytes", devices=True,
    refuse={k: f"sfdisk --{k} changes the partition table" for k in _SFDISK_WRITE},
    policy=_needs_one_of(*_SFDISK_READ, reason="sfdisk without --list/--dump/--json writes the "
                                               "partition table"))  # type: ignore[arg-type]

SGDISK = grammar("sgdisk", "-p --print", "-i= --info=", "-v --verify", "-V --version",
                 "-O --print-mbr", abbreviate=False, operands=(0, 1),
                 unknown="sgdisk writes the partition table with any option but the printing ones")
_PARTED_WORDS = {"print", "unit", "s", "B", "b", "MiB", "GiB", "KiB", "TiB", "MB", "GB", "kB",
                 "%", "cyl", "chs", "compact", "free", "list", "all", "devices"}


def _parted(p: Parsed, ctx: GuardContext) -> Decision | None:
    if p.has("list"):
        return None
    words = p.operands[1:]
    if all(w in _PARTED_WORDS for w in words):
        return None
    return Decision.refuse("parted commands other than print/--list write the partition table")


PARTED = grammar("parted", "-l --list", "-m --machine", "-s --script", "-a= --align=",
                 "-f --fix", "-j --json", "-v --version", "-h --help", posix=True, devices=True,
                 refuse={"fix": "parted --fix answers 'Fix' to every repair question"},
                 policy=_parted)

# ---- RAID and LVM ----------------------------------------------------------------------------
MDADM = grammar(
    "mdadm", "-E --examine", "-D --detail", "-Q --query", "-V --version", "-h --help",
    "-s --scan", "-b --brief", "-v --verbose", "-Y --export", "-t --test", "-e= --metadata=",
    "-c= --config=", "-q --quiet", devices=True, caps=("CAP_SYS_ADMIN",),
    refuse={"config": "mdadm --config reads a configuration file (PROGRAM lines run programs); "
                      "the system's own is used"},
    policy=_needs_one_of("examine", "detail", "query", "version", "help",
                         reason="mdadm assemble/create/grow/manage change RAID state; only "
                                "--examine/--detail/--query are allowed"))  # type: ignore[arg-type]

_LVM_REPORT = ("-a --all", "-o= --options=", "-O= --sort=", "--noheadings", "--nosuffix",
               "--separator=", "--units=", "--reportformat=", "-S= --select=", "--readonly",
               "-v --verbose", "--devices=", "--devicesfile=", "--nolocking", "--foreign",
               "--binary", "--aligned", "--unbuffered", "--rows", "-P --partial", "-q --quiet",
               "-d --debug", "-h --help", "--version", "--segments", "-C --columns",
               "--ignorelockingfailure", "--nameprefixes", "--unquoted", "-m --maps")


def _lvm_readonly(p: Parsed, ctx: GuardContext) -> Decision | None:
    if p.has("version", "help"):
        return None
    if not p.has("readonly"):
        return Decision.refuse(f"{p.tool} without --readonly may repair LVM metadata; add "
                               "--readonly")
    return None


TOOLS: dict[str, Entry] = {
    "smartctl": SMARTCTL, "nvme": NVME, "hdparm": _hdparm, "fdisk": FDISK, "sfdisk": SFDISK,
    "sgdisk": SGDISK, "parted": PARTED, "mdadm": MDADM,
    **{name: grammar(name, *_LVM_REPORT, policy=_lvm_readonly, devices=True,
                     caps=("CAP_SYS_ADMIN",))
       for name in ("pvs", "vgs", "lvs", "pvdisplay", "vgdisplay", "lvdisplay")},
}
