"""Tools that are never run, whatever their arguments, and why."""

from __future__ import annotations


def _each(reason: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, reason)


REFUSED: dict[str, str] = {
    **_each("sync flushes dirty pages to the devices; never force-flush caches during an "
            "incident", "sync"),
    **_each("chkdsk repairs the filesystem in place", "chkdsk", "chkdsk.exe"),
    **_each("wipefs erases filesystem signatures", "wipefs"),
    **_each("blkdiscard discards (erases) device blocks", "blkdiscard"),
    **_each("xfs_admin changes filesystem parameters", "xfs_admin"),
    **_each("xfs_growfs changes the filesystem", "xfs_growfs"),
    **_each("resize2fs changes the filesystem size", "resize2fs"),
    **_each("e2label writes a new label into the filesystem", "e2label"),
    **_each("badblocks can write test patterns to the device", "badblocks"),
    **_each("shred overwrites data", "shred"),
    **_each("rm deletes data", "rm", "rmdir", "unlink"),
    **_each("mv/cp/tee/truncate/touch write files; use the kit's copy and image commands",
            "mv", "cp", "tee", "truncate", "touch", "chmod", "chown", "chattr", "ln", "install",
            "mkdir", "sed", "awk", "gawk", "mawk", "sort"),
    **_each("shells and interpreters are never run: give the tool's argv directly", "sh", "bash",
            "dash", "zsh", "ksh", "fish", "env", "sudo", "su", "doas", "xargs", "nohup", "nice",
            "ionice", "timeout", "stdbuf", "chroot", "unshare", "nsenter", "setsid", "flock",
            "python", "python3", "perl", "ruby", "node", "lua", "tclsh", "busybox", "watch",
            "script", "expect", "ssh", "scp", "sftp", "socat", "nc", "ncat", "curl", "wget",
            "vi", "vim", "nano", "less", "more", "man", "bwrap"),
    **_each("vgchange/lvchange and LVM create/remove commands activate or change volumes",
            "vgchange", "lvchange", "pvchange", "pvcreate", "vgcreate", "lvcreate", "pvremove",
            "vgremove", "lvremove", "vgextend", "vgreduce", "lvextend", "lvreduce", "lvresize",
            "vgimport", "vgexport", "vgcfgrestore", "pvmove", "lvconvert", "vgmerge", "vgsplit",
            "vgscan", "pvscan", "lvscan", "vgck", "pvck", "lvm"),
    **_each("kill/pkill/systemctl change running services: ckptrescue says whom to stop, it "
            "never stops anything itself", "kill", "pkill", "killall", "systemctl", "service",
            "reboot", "shutdown", "halt", "poweroff", "init", "telinit"),
    **_each("partprobe/kpartx re-read or create partition mappings", "partprobe", "kpartx",
            "addpart", "delpart", "resizepart"),
    **_each("debugfs-like editors and format tools change filesystems", "mkfs", "mke2fs",
            "mkswap", "swapon", "swapoff", "fstrim", "xfs_freeze", "fsfreeze", "xfs_fsr",
            "e4defrag", "btrfs", "btrfstune", "zhack", "zinject", "zstream"),
}
