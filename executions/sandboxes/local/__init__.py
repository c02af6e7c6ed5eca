"""The local backend: a subprocess under rlimits, confined as strongly as the host allows.

Layers, from always-on to best-effort:

- Always: rlimits (CPU, memory, processes, file size, no core), its own
  session, stdin on /dev/null, a scrubbed environment (minimal PATH, HOME,
  LANG, TMPDIR and nothing of the worker's), a private work dir.
- When the worker is root: every run gets a uid of its own (random, from a
  range no account uses). The code cannot read root's files (/etc/shadow),
  another run's files, or signal or trace another run; ``kill(-1)`` as that
  uid ends everything it started.
- A seccomp filter (x86_64) refuses ptrace, process_vm_*, bpf, perf, keyrings,
  mounts and new namespaces; no_new_privs disarms setuid binaries.

Then the first confinement method that works here (``METHODS``, strongest first):

- ``bwrap`` — bubblewrap: new user, PID, network, IPC, UTS and cgroup
  namespaces; only the system directories (read-only), a snapshot of /etc, a
  minimal /dev, a private /proc, and size-limited tmpfs for the work dir, /tmp
  and /dev/shm. bubblewrap's PID 1 dies with it and the kernel then kills the
  whole namespace, so a setsid + double fork cannot outlive the run.
- ``unshare`` — the same namespaces and the same root, made by the supervisor
  itself (``supervisor.py``) with the kernel calls bubblewrap uses, plus
  Landlock where the kernel has it: what every Linux with unprivileged user
  namespaces gets with nothing installed.
- ``landlock`` — where user namespaces are refused (some AppArmor policies):
  Landlock (ABI 6, Linux 6.12+) confines files, TCP, abstract sockets and
  signals to the run, and seccomp refuses new sockets.
- ``rlimits`` — none of those: the weak fallback. The console shows it in
  red and policy never approves a script into it on its own.

Without bubblewrap a small supervisor (a child subreaper) runs the code;
orphans re-parent to it, and it kills and reaps every descendant when the
code ends or the run is stopped.

Python runs as ``python3 -I -S``: the standard library only, like the sandbox
image (no host site-packages, no .pth hooks), and faster to start. To take
sandbox and interpreter start-up off a run's latency, each (language,
limits) gets Pythons started ahead of time that wait for their code on stdin;
each is used for one run only and replaced in the background.

The package: ``backend`` (``LocalSandbox``: starting runs, the pre-started
interpreters), ``probes`` (which methods work here, and why not), ``host``
(system paths, run uids, the /etc snapshot, base dirs, launch tools),
``programs`` (interpreters and the pre-start loader), ``confinement`` (the
supervisor's orders and bubblewrap's arguments), ``rlimits``, ``seccomp``,
``supervisor`` (the program that confines and supervises a run without
bubblewrap), ``servers`` (long-lived MCP servers confined the same way, their
network through ``sandboxes.egress``), ``process`` (one sandboxed process tree
and its output) and
``sessions`` (a persistent session's runner as a local process).
"""

from .backend import LocalSandbox
from .probes import describe_method, method_problems

__all__ = ["LocalSandbox", "describe_method", "method_problems"]
