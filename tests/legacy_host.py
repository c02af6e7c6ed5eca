"""Run a command as on a host whose kernel refuses user namespaces and has no Landlock.

    python tests/legacy_host.py COMMAND [ARG...]

A seccomp filter (x86_64), inherited by everything the command starts, makes
``unshare``/``clone`` with CLONE_NEWUSER fail with EPERM (what a kernel with
unprivileged user namespaces turned off answers) and the Landlock calls and
``clone3`` fail with ENOSYS (a kernel without them; glibc then falls back to
``clone``, whose flags the filter can read). Airlock's probes see exactly what
they would see on such a host: no bubblewrap, no namespaces, no Landlock.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
CLONE_NEWUSER = 0x10000000
SYSCALLS = {"clone": 56, "unshare": 272, "clone3": 435}
LANDLOCK = (444, 445, 446)
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def filter_program() -> bytes:
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    program = [
        (ld, 0, 0, 4),  # arch
        (jeq, 1, 0, AUDIT_ARCH_X86_64),
        (ret, 0, 0, ALLOW),
        (ld, 0, 0, 0),  # syscall number
        (jeq, 6, 0, SYSCALLS["clone3"]),  # -> ENOSYS
        (jeq, 5, 0, LANDLOCK[0]),
        (jeq, 4, 0, LANDLOCK[1]),
        (jeq, 3, 0, LANDLOCK[2]),
        (jeq, 3, 0, SYSCALLS["unshare"]),  # -> flags check
        (jeq, 2, 0, SYSCALLS["clone"]),  # -> flags check
        (ret, 0, 0, ALLOW),
        (ret, 0, 0, ENOSYS),
        (ld, 0, 0, 16),  # first argument (flags)
        (jset, 0, 1, CLONE_NEWUSER),
        (ret, 0, 0, EPERM),
        (ret, 0, 0, ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def main(argv: list[str]) -> None:
    if os.uname().machine != "x86_64":
        sys.exit("legacy_host.py knows x86_64 system calls only")
    if not argv:
        sys.exit(__doc__)
    libc = ctypes.CDLL(None, use_errno=True)
    program = ctypes.create_string_buffer(filter_program())

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(program.raw) // 8, ctypes.addressof(program))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        sys.exit(f"cannot install the filter: {os.strerror(ctypes.get_errno())}")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
