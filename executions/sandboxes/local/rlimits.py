"""The resource limits of a local run, as (resource, soft, hard) triples."""

from __future__ import annotations

import contextlib
import os
import resource

from ..base import Limits

MB = 1024 * 1024
MAX_OPEN_FILES = 1024


PRLIMIT_OPTIONS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_DATA: "--data",
}


def _count_processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def rlimits_for(
    limits: Limits, language: str, extra_processes: int = 0
) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for a run. Hard limits too: the code cannot raise them."""
    memory = limits.memory_mb * MB
    file_size = limits.max_file_size_mb * MB
    cpu = limits.cpu_limit
    nproc = limits.max_processes + extra_processes
    result = [
        # The soft limit sends SIGXCPU, the hard one a second later SIGKILL.
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES),
        (resource.RLIMIT_NPROC, nproc, nproc),
    ]
    if language == "javascript":
        # V8 reserves gigabytes of address space up front and aborts under
        # RLIMIT_AS; RLIMIT_DATA counts what it actually allocates.
        result.append((resource.RLIMIT_DATA, memory, memory))
    else:
        result.append((resource.RLIMIT_AS, memory, memory))
    return result


def _apply_rlimits(rlimits: list[tuple[int, int, int]]) -> None:
    for res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))


def _relative_nproc(
    rlimits: list[tuple[int, int, int]], limits: Limits
) -> list[tuple[int, int, int]]:
    """Without a run uid, RLIMIT_NPROC counts all the worker user's processes."""
    allowed = _count_processes_of(os.getuid()) + limits.max_processes + 2
    return [
        (res, allowed, allowed) if res == resource.RLIMIT_NPROC else (res, soft, hard)
        for res, soft, hard in rlimits
    ]
