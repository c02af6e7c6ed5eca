"""The seccomp filter of a local run: what the code may never call (x86_64)."""

from __future__ import annotations

import functools
import os
import struct

# Syscalls the code never needs and that reach across the sandbox's edge: tracing
# and reading other processes (even bwrap's own PID 1), kernel keyrings, eBPF,
# perf, module loading, mounts and new namespaces. Numbers are x86_64's.
BLOCKED_SYSCALLS = {
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "perf_event_open": 298,
    "bpf": 321,
    "userfaultfd": 323,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "setns": 308,
    "unshare": 272,
    "open_by_handle_at": 304,
}
SYSCALL_SOCKET = 41  # refused when the run has no network namespace of its own (see below)
SYSCALL_CLONE = 56
SYSCALL_CLONE3 = 435
CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | 1
RET_ENOSYS = 0x00050000 | 38  # clone3: libc then falls back to clone, which we can inspect


@functools.cache
def seccomp_program(deny_sockets: bool = False) -> bytes | None:
    """A classic-BPF seccomp filter (the bytes bwrap --seccomp expects), x86_64 only.

    ``deny_sockets`` refuses socket(2) too: for a run in the host's network
    namespace (Landlock only), whose TCP Landlock refuses but whose UNIX
    sockets (a database's socket file, say) Landlock cannot. socketpair(2),
    which reaches nothing outside the process, still works.
    """
    if os.uname().machine != "x86_64":
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    # (code, true-label, false-label, k); labels resolve to relative jumps below.
    program: list[tuple[int, str | None, str | None, int]] = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "deny", AUDIT_ARCH_X86_64),
        (ld, None, None, 0),  # seccomp_data.nr
        (jge, "deny", None, X32_SYSCALL_BIT),
        (jeq, "enosys", None, SYSCALL_CLONE3),
        (jeq, None, "table", SYSCALL_CLONE),
        (ld, None, None, 16),  # clone's flags (low 32 bits of args[0])
        (jset, "deny", "allow", CLONE_NAMESPACE_FLAGS),
    ]
    labels = {"table": len(program)}
    blocked = list(BLOCKED_SYSCALLS.values()) + ([SYSCALL_SOCKET] if deny_sockets else [])
    program += [(jeq, "deny", None, nr) for nr in blocked]
    labels["allow"] = len(program)
    program.append((ret, None, None, RET_ALLOW))
    labels["deny"] = len(program)
    program.append((ret, None, None, RET_EPERM))
    labels["enosys"] = len(program)
    program.append((ret, None, None, RET_ENOSYS))

    def offset(index: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - index - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(program)
    )
