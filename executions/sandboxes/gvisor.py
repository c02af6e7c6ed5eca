"""gVisor sandbox: the Docker backend with the ``runsc`` runtime.

Runs see gVisor's user-space kernel instead of the host's. dockerd must have
``runsc`` registered with ``--network=none`` (``scripts/provision gvisor``);
without it every start fails and leaves runsc processes behind, which is why
a failed start here ends the container's shim and runsc processes at once and
the reaper sweeps for strays.

Reuse of a warm container rests on the runner being out of the runs' reach.
gVisor keeps a non-dumpable PID 1's memory and ptrace closed to a same-uid
run, but lets it open /proc/1/fd/*: a run can write into the runner's output.
What it writes can only land in its own run's output, and it cannot end its
run early: the runner's end-of-run report carries a per-run nonce the run
never sees, and a report without it recycles the container.

Sessions (``open_session``, inherited) run in a runsc container of their own;
their process count is capped inside the sandbox (RLIMIT_NPROC), as for runs.

Networking (``Limits.network``) stays off under gVisor whatever the limits
say: runsc is registered with ``--network=none``.
"""

from __future__ import annotations

from typing import ClassVar

from .docker import DockerSandbox


class GVisorSandbox(DockerSandbox):
    """DockerSandbox with runtime ``runsc``."""

    name: ClassVar[str] = "gvisor"
    default_runtime: ClassVar[str | None] = "runsc"
    isolation: ClassVar[str] = "gvisor"
