"""What the guard says about one argv."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """``allowed`` or not, with the reason. ``writes`` are the paths an allowed command will write
    (the runner makes exactly these writable in the tool's mount namespace); ``host_namespace``
    marks tools whose job is to change the host's mount table (mount, umount, zfs, zpool)."""

    allowed: bool
    reason: str = ""
    writes: tuple[str, ...] = ()
    host_namespace: bool = False
    caps: tuple[str, ...] = ()  # capabilities the tool needs beyond file access
    all_devices: bool = False  # the tool scans /dev itself (else: only the devices it names)
    network: bool = False  # keeps the host's network (a read-only query of a cluster service)
    # words the tool gets in place of what was typed (index into argv[1:], word): the very
    # device node and path the guard asked the kernel about (see ``check.pinned``)
    pins: tuple[tuple[int, str], ...] = ()

    @classmethod
    def allow(cls, *, writes: tuple[str, ...] = (), host_namespace: bool = False,
              caps: tuple[str, ...] = (), all_devices: bool = False,
              network: bool = False, pins: tuple[tuple[int, str], ...] = ()) -> Decision:
        return cls(True, "", writes, host_namespace, caps, all_devices, network, pins)

    def argv(self, argv: list[str] | tuple[str, ...]) -> list[str]:
        """The argv the tool is given: ``argv`` with the pinned words in place."""
        out = list(argv)  # the words as given (a redacted secret stays one)
        for index, word in self.pins:
            out[index + 1] = word
        return out

    @classmethod
    def refuse(cls, reason: str) -> Decision:
        return cls(False, reason)
