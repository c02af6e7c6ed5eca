"""Docker sandbox: code runs in a locked-down container via the docker SDK.

Every container runs the image's resident runner (``docker/sandbox/runner.py``)
as PID 1. The host talks to it over the container's attached stdin/stdout —
never the docker socket inside the container: one JSON request per run, and
frames of output back as they are produced. The runner forks the interpreter
per run and, afterwards, kills every process but itself and wipes every
writable place, so a warm container can serve the next run.

Two modes (``SANDBOX_DOCKER_MODE``):
- ``oneshot``: a fresh container per run, removed afterwards. The next run's
  container (a spare no run has touched) starts as soon as a run takes one.
- ``keepalive`` (default): warm containers are reused; one is recycled after
  ``SANDBOX_POOL_MAX_RUNS`` runs, ``SANDBOX_POOL_IDLE_MINUTES`` idle, or any
  run that leaves doubt (timeout, cancel, killed by a signal, not wiped clean,
  a broken or forged protocol frame, a runner that could not make itself
  undumpable).

Persistent sessions (``open_session``) get a container of their own, hardened
like every other, running the session runner (``sessions.RUNNER_SOURCE``)
instead of the resident one; ``DockerSessionTransport`` carries the session
protocol over its attached stdin/stdout, and closing the session removes the
container. The pool never serves a session, nor a session a run.

Whatever the settings or constructor options say, ``check_container_config``
refuses privileged containers, a mounted docker socket, host network / PID /
IPC / user namespaces, added capabilities, devices and root — at construction
and again before every container is created.

The package: ``backend`` (``DockerSandbox``: containers, the warm pool,
runs), ``config`` (``check_container_config``), ``channel`` (the runner
protocol over the attach stream), ``exchange`` (one run's request and the
frames it reads), ``pool`` (what the warm pool holds), ``sessions``
(``DockerSessionTransport`` and the session runner's command), and
``servers`` with ``attach`` and ``relay``: an MCP server run from an image, as a
container whose stdio a small program of its own (``attach.py``) carries, in
the network of a relay container (``relay.py``) when it has a network list.
"""

from .backend import DockerSandbox
from .config import DOCKER_SOCKETS, SandboxConfigRefused, check_container_config

__all__ = ["DOCKER_SOCKETS", "DockerSandbox", "SandboxConfigRefused", "check_container_config"]
