"""The kernel half of the loader sandbox: a seccomp filter the child installs on itself.

Installed after the heavy imports (torch, tensorflow) and before the file is touched, on every
thread of the process (``seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC)``: torch and
TensorFlow have started thread pools by then, and ``prctl(PR_SET_SECCOMP)`` would filter only the
calling thread), after ``prctl(PR_SET_NO_NEW_PRIVS)``. A hand-assembled classic BPF program:

* any architecture other than x86-64, and x32 system calls (bit 30 of the number): kill;
* **kill the process** (``SECCOMP_RET_KILL_PROCESS``, the parent sees SIGSYS): ``execve``,
  ``execveat``, ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD`` (a new process, not a
  thread), ``socket`` for any family but ``AF_UNIX`` (``socketpair`` stays allowed), ``ptrace``,
  ``process_vm_readv``/``process_vm_writev``: what a payload needs to run a program, reach the
  network or another process;
* ``EPERM``: ``clone`` with namespace flags, ``unshare``, ``setns``, ``mount``, ``umount2``, the
  new mount API, ``pivot_root``, ``chroot``, ``bpf``, ``kexec_*``, ``init_module``,
  ``finit_module``, ``delete_module``, ``keyctl``/``add_key``/``request_key``,
  ``perf_event_open``, ``open_by_handle_at``, ``name_to_handle_at``, ``personality``,
  ``userfaultfd``, ``io_uring_*`` (its ops would bypass the socket rule), ``swapon``/``swapoff``,
  ``reboot``, ``iopl``/``ioperm``: no loader needs them, and a library probing a feature must
  fail, not turn a good checkpoint into a kill;
* ``ENOSYS``: ``clone3`` (its flags live in memory a filter cannot read; glibc then falls back
  to ``clone``, whose flags the filter checks);
* everything else: allowed.

Pure data until :func:`install` (``filter_bytes`` is tested without installing anything).
"""

from __future__ import annotations

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
NR_SECCOMP = 317

AF_UNIX = 1
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                    | 0x20000000 | 0x40000000)  # NEWNS CGROUP UTS IPC USER PID NET

# struct seccomp_data offsets (little-endian x86-64)
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

KILL_SYSCALLS = {
    "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311,
}
EPERM_SYSCALLS = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
    "setns": 308, "bpf": 321, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "keyctl": 250, "add_key": 248,
    "request_key": 249, "perf_event_open": 298, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "personality": 135, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "swapon": 167, "swapoff": 168,
    "reboot": 169, "iopl": 172, "ioperm": 173, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "kcmp": 312, "pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438,
    "process_madvise": 440,
}
ENOSYS_SYSCALLS = {"clone3": 435}
NR_SOCKET, NR_CLONE = 41, 56

Insn = tuple[int, object, object, int]  # code, jt, jf, k; jt/jf: int offset or label


def _program() -> list[Insn]:
    """The filter as instructions whose jump targets are labels ("kill", "allow", ...)."""
    prog: list[Insn] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, "kill", AUDIT_ARCH_X86_64),
        (_LD_W_ABS, 0, 0, _OFF_NR),
        (_JGE_K, "kill", 0, X32_SYSCALL_BIT),
        (_JEQ_K, "socket", 0, NR_SOCKET),
        (_JEQ_K, "clone", 0, NR_CLONE),
    ]
    for nr in sorted(KILL_SYSCALLS.values()):
        prog.append((_JEQ_K, "kill", 0, nr))
    for nr in sorted(EPERM_SYSCALLS.values()):
        prog.append((_JEQ_K, "eperm", 0, nr))
    for nr in sorted(ENOSYS_SYSCALLS.values()):
        prog.append((_JEQ_K, "enosys", 0, nr))
    prog.append((_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return prog


def _tail() -> dict[str, list[Insn]]:
    return {
        "socket": [(_LD_W_ABS, 0, 0, _OFF_ARG0_LO), (_JEQ_K, "allow", "kill", AF_UNIX)],
        "clone": [(_LD_W_ABS, 0, 0, _OFF_ARG0_LO), (_JSET_K, "eperm", 0, CLONE_NAMESPACES),
                  (_JSET_K, "allow", "kill", CLONE_THREAD)],
        "kill": [(_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)],
        "eperm": [(_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)],
        "enosys": [(_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)],
        "allow": [(_RET_K, 0, 0, SECCOMP_RET_ALLOW)],
    }


def assemble() -> list[tuple[int, int, int, int]]:
    """Resolve labels into relative jump offsets: the final ``sock_filter`` array."""
    insns = _program()
    labels: dict[str, int] = {}
    for name, block in _tail().items():
        labels[name] = len(insns)
        insns.extend(block)
    out: list[tuple[int, int, int, int]] = []
    for i, (code, jt, jf, k) in enumerate(insns):
        def rel(target: object, i: int = i) -> int:
            if isinstance(target, str):
                off = labels[target] - i - 1
                if not 0 <= off <= 255:
                    raise ValueError(f"jump to {target} out of range")
                return off
            return int(target)  # type: ignore[call-overload]

        out.append((code, rel(jt), rel(jf), k))
    return out


def filter_bytes() -> bytes:
    """The program as the kernel reads it (``struct sock_filter[]``)."""
    return b"".join(struct.pack("<HBBI", *insn) for insn in assemble())


def run_filter(nr: int, args: tuple[int, ...] = (), arch: int = AUDIT_ARCH_X86_64) -> int:
    """Interpret the assembled program on one system call (the tests check the rules here)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    prog, pc, acc = assemble(), 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == _LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == _RET_K:
            return k
        else:
            hit = (acc == k if code == _JEQ_K else acc >= k if code == _JGE_K
                   else bool(acc & k))
            pc += 1 + (jt if hit else jf)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


class ConfineError(RuntimeError):
    """The filter could not be installed: the load must not run."""


def install() -> None:
    """Install the filter on every thread of this process (irreversible)."""
    if platform.machine() != "x86_64":
        raise ConfineError(f"seccomp filter is written for x86_64, not {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}")
    code = filter_bytes()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_char_p))
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(NR_SECCOMP), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                      ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        err = ctypes.get_errno()
        if rc > 0:
            raise ConfineError(f"thread {rc} could not be synchronised to the filter")
        raise ConfineError(f"seccomp(SET_MODE_FILTER, TSYNC) failed: errno {err}")


def installed() -> bool:
    """True when this process runs under a seccomp filter (``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as fh:
            return any(line.split() == ["Seccomp:", "2"] for line in fh)
    except OSError:
        return False
