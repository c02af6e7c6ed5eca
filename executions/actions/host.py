"""Host actions: systemd services, signalling processes, and ``host.exec``.

Each names the host it acts on (``host``; by default ``HOST_ACTIONS_DEFAULT_HOST``,
the console's own host) and is ``host_bound``: routed to the ``host.<host>``
queue, which only that host's workers consume, and refused by any other
worker. Nothing here ever goes through a shell:
every command is an argument list, run with a scrubbed environment in its own
process group, its output handed to the sink as it is produced, and the whole
group killed on timeout or cancel (and whatever it left running in that group
killed when it ends: a run leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from django.conf import settings
from rest_framework import serializers

from executions.sandboxes.base import RunOutcome
from executions.sandboxes.local.host import default_signals_prefix
from infrastructure.rest.serializers import Serializer

from .base import ActionContext, ActionSpec, Runner, failed

ACTIONS: list[ActionSpec] = []  # this module's part of the catalog, in order

BACKEND = "host"

SERVICE_PATTERN = re.compile(r"\A[A-Za-z0-9_.@-]+\Z")
# A host name: dot-separated labels of letters, digits, _ and - (not at a label's ends).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
HOST_PATTERN = re.compile(rf"\A(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*\Z")
# A process name as it appears in /proc/<pid>/comm, minus the characters a
# reviewer could misread (spaces, slashes); never an option-looking '-x'.
PROCESS_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9_.@+:][A-Za-z0-9_.@+:-]{0,254}\Z")
SIGNALS = {
    "SIGTERM": signal.SIGTERM,
    "SIGKILL": signal.SIGKILL,
    "SIGHUP": signal.SIGHUP,
    "SIGINT": signal.SIGINT,
}
PID_MAX = 4_194_304  # the kernel's ceiling for /proc/sys/kernel/pid_max
COMM_LENGTH = 15  # the kernel truncates comm to this many bytes
COMMAND_MAX_LENGTH = 4096
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_CHUNK = 65536
POLL_SECONDS = 0.05
# After the command exits, how long to keep reading from a pipe that something
# it left behind still holds open, before that straggler is killed.
DRAIN_GRACE_SECONDS = 1.0


# --- parameters ---------------------------------------------------------------


def host_queue(hostname: str | None = None) -> str:
    """The queue only the workers of ``hostname`` (this host when None) consume."""
    return f"host.{hostname or settings.WORKER_HOSTNAME}"


def _name_field(help_text: str, max_length: int = 255) -> serializers.CharField:
    # Whitespace is an error, not something to trim silently.
    return serializers.CharField(max_length=max_length, trim_whitespace=False, help_text=help_text)


class HostParameters(Serializer):
    """The host a host action acts on: that host's worker carries it out, and no other."""

    host = serializers.CharField(
        required=False,  # validate() fills in the deployment's default, if it has one
        max_length=253,
        trim_whitespace=False,
        help_text="The host to act on: the WORKER_HOSTNAME of its workers "
        "(by default the console's own host, where the deployment has one).",
    )

    def validate_host(self, value: str) -> str:
        if not HOST_PATTERN.match(value):
            raise serializers.ValidationError(
                "must be a host name: labels of letters, digits, _ and - separated by dots"
            )
        return value

    def validate(self, data: dict) -> dict:
        if not data.get("host"):
            default = settings.HOST_ACTIONS_DEFAULT_HOST
            if not default:
                raise serializers.ValidationError(
                    {"host": ["this deployment has several hosts: name the one to act on"]}
                )
            data = {**data, "host": default}
        return data


class ServiceParameters(HostParameters):
    service_name = _name_field("A systemd unit name, e.g. nginx or nginx.service.")

    def validate_service_name(self, value: str) -> str:
        if value.startswith("-") or not SERVICE_PATTERN.match(value):
            raise serializers.ValidationError(
                "must be a unit name of letters, digits and _ . @ - (not starting with -)"
            )
        return value


def parse_target(value: str | int) -> int | str:
    """A pid (int) or a process name (str); ``ValueError`` with a reason otherwise."""
    text = str(value)
    if text.isascii() and text.isdigit():
        pid = int(text)
        if pid <= 0 or pid > PID_MAX:
            raise ValueError(f"must be a pid between 2 and {PID_MAX}")
        if pid == 1:
            raise ValueError("refusing to signal pid 1 (init)")
        return pid
    if not PROCESS_NAME_PATTERN.match(text):
        raise ValueError(
            "must be a pid or a process name of letters, digits and _ . @ + : - "
            "(not starting with -)"
        )
    return text


class KillParameters(HostParameters):
    target = _name_field("A pid, or the exact name of the processes to signal.")
    signal = serializers.ChoiceField(
        choices=sorted(SIGNALS), default="SIGTERM", required=False, help_text="The signal to send."
    )

    def validate_target(self, value: str) -> int | str:
        try:
            return parse_target(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


def split_command(command: str) -> list[str]:
    """The argument list ``command`` stands for; ``ValueError`` when there is none."""
    if "\x00" in command:
        raise ValueError("must not contain NUL bytes")
    argv = shlex.split(command)  # ValueError on unbalanced quotes
    if not argv:
        raise ValueError("must not be empty")
    return argv


class ExecParameters(HostParameters):
    command = serializers.CharField(
        max_length=COMMAND_MAX_LENGTH,
        trim_whitespace=False,
        help_text="A command line, split with shell quoting rules and run without a shell.",
    )

    def validate_command(self, value: str) -> str:
        try:
            split_command(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value


# --- running an argument list -----------------------------------------------


def scrubbed_environment() -> dict[str, str]:
    """The only environment a host command sees: none of the worker's secrets."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = "/"
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": home}


def run_argv(argv: list[str], ctx: ActionContext) -> RunOutcome:
    """Run ``argv`` (never through a shell) under the context's timeout and cancel event."""
    started = time.monotonic()
    if ctx.cancel.is_set():
        return RunOutcome(exit_code=None, duration_ms=0, backend=BACKEND, cancelled=True)
    prefix = default_signals_prefix()
    if prefix and not _exists(argv[0]):
        # Through the prefix a missing program would be env's exit 127: say it as plainly.
        return failed(BACKEND, f"command not found: {argv[0]}", ctx.sink, started)
    try:
        proc = subprocess.Popen(
            prefix + argv,  # not the signals the worker ignores
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=scrubbed_environment(),
            cwd="/",
            start_new_session=True,  # its own process group, so it can be killed whole
        )
    except FileNotFoundError:
        return failed(BACKEND, f"command not found: {argv[0]}", ctx.sink, started)
    except OSError as exc:
        return failed(
            BACKEND, f"could not start {argv[0]}: {exc.strerror or exc}", ctx.sink, started
        )
    try:
        stopped = _pump(proc, ctx, started + ctx.limits.timeout_seconds)
    finally:
        _kill_group(proc)
        proc.stdout.close()
        proc.stderr.close()
    returncode = proc.wait()
    return RunOutcome(
        exit_code=returncode if returncode >= 0 else 128 - returncode,
        duration_ms=int((time.monotonic() - started) * 1000),
        backend=BACKEND,
        timed_out=stopped == "timeout",
        cancelled=stopped == "cancelled",
        details={"argv": argv, "pid": proc.pid},
    )


def _exists(program: str) -> bool:
    """``program`` is a path that exists, or a name found on the actions' PATH."""
    return (
        os.path.exists(program) if "/" in program else bool(shutil.which(program, path=SAFE_PATH))
    )


def _pump(proc: subprocess.Popen, ctx: ActionContext, deadline: float) -> str | None:
    """Copy output to the sink until the command ends; "timeout" or "cancelled" if it did not."""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
        selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
        exited_at: float | None = None
        while True:
            if ctx.cancel.is_set():
                return "cancelled"
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            open_pipes = bool(selector.get_map())
            if exited_at is not None and (not open_pipes or now - exited_at >= DRAIN_GRACE_SECONDS):
                return None
            if not open_pipes:
                # Its output is closed; it is exiting, or running on without output.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(POLL_SECONDS, deadline - now))
                continue
            for key, _ in selector.select(timeout=min(POLL_SECONDS, deadline - now)):
                data = os.read(key.fd, READ_CHUNK)
                if data:
                    ctx.sink.write(key.data, data)
                else:
                    selector.unregister(key.fileobj)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the command's process group and any descendant that left it (setsid)."""
    escaped = _open_pidfds(_descendants(proc.pid)) if proc.poll() is None else []
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signal.SIGKILL)
    for pidfd in escaped:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(pidfd)


# --- /proc ------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    comm: str
    argv0: str
    state: str  # R, S, D, ... or Z: exited, not yet reaped
    kernel_thread: bool

    @property
    def exited(self) -> bool:
        return self.state in ("Z", "X")


def read_process(pid: int) -> ProcessInfo | None:
    """What /proc says about ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/comm", "rb") as f:
            comm = f.read().decode(errors="replace").rstrip("\n")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\x00", 1)[0].decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may itself contain ')' and spaces: the fields start after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return ProcessInfo(
        pid=pid,
        ppid=int(fields[1]),
        comm=comm,
        argv0=argv0,
        state=fields[0],
        kernel_thread=bool(int(fields[6]) & PF_KTHREAD),
    )


def all_processes() -> list[ProcessInfo]:
    infos = (read_process(int(entry)) for entry in os.listdir("/proc") if entry.isdigit())
    return [info for info in infos if info is not None]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for info in all_processes():
        children.setdefault(info.ppid, []).append(info.pid)
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def _open_pidfds(pids: list[int]) -> list[int]:
    # A pidfd pins the process itself, so a signal sent through it can never hit
    # an unrelated process that was given the same pid in the meantime.
    fds = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            fds.append(os.pidfd_open(pid))
    return fds


def protected_pids() -> set[int]:
    """init, this worker process and its ancestors: never signalled."""
    protected = {1, os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        info = read_process(pid)
        if info is None:
            break
        pid = info.ppid
    return protected


def matches_name(info: ProcessInfo, name: str) -> bool:
    """Exact comm match; names longer than comm's 15 bytes must also match argv[0]."""
    if len(name) <= COMM_LENGTH:
        return info.comm == name
    return info.comm == name[:COMM_LENGTH] and os.path.basename(info.argv0) == name


# --- runners ----------------------------------------------------------------


def _service_runner(verb: str) -> Runner:
    def run(params: dict, ctx: ActionContext) -> RunOutcome:
        name = params["service_name"]
        argv = [settings.HOST_ACTIONS_SYSTEMCTL, verb, name]
        outcome = run_argv(argv, ctx)
        if outcome.error or outcome.timed_out or outcome.cancelled:
            return outcome
        code = outcome.exit_code
        outcome.details["systemctl_exit_code"] = code
        if verb == "status" and code in (0, 1, 2, 3):
            # LSB status codes: 0 is running, 1-3 are kinds of "not running" —
            # an answer to the question, not a failure to ask it.
            outcome.details["active"] = code == 0
            outcome.exit_code = 0
            return outcome
        if code == 0:
            return outcome
        unknown = code == (4 if verb == "status" else 5)
        reason = f"unknown service {name}" if unknown else f"exit code {code}"
        result = failed(BACKEND, f"systemctl {verb} {name} failed: {reason}", ctx.sink)
        result.duration_ms = outcome.duration_ms
        result.details = outcome.details
        return result

    return run


def run_kill(params: dict, ctx: ActionContext) -> RunOutcome:
    started = time.monotonic()
    signal_name = params.get("signal") or "SIGTERM"
    if signal_name not in SIGNALS:
        return failed(BACKEND, f"signal {signal_name!r} is not allowed", ctx.sink, started)
    try:
        target = parse_target(params["target"])
    except ValueError as exc:
        return failed(BACKEND, f"invalid target {params['target']!r}: {exc}", ctx.sink, started)
    protected = protected_pids()
    if isinstance(target, int):
        if target in protected:
            message = f"refusing to signal pid {target}: it is init or this worker (or its parent)"
            return failed(BACKEND, message, ctx.sink, started)
        info = read_process(target)
        if info is None or info.exited:
            return failed(BACKEND, f"no such process: {target}", ctx.sink, started)
        if info.kernel_thread:
            return failed(BACKEND, f"refusing to signal kernel thread {target}", ctx.sink, started)
        victims = [info]
    else:
        victims = [
            info
            for info in all_processes()
            if matches_name(info, target)
            and info.pid not in protected
            and not (info.kernel_thread or info.exited)
        ]
        if not victims:
            return failed(BACKEND, f"no process named {target}", ctx.sink, started)
    return _send(victims, signal_name, ctx, started)


def _send(
    victims: list[ProcessInfo], signal_name: str, ctx: ActionContext, started: float
) -> RunOutcome:
    signalled, missed = [], []
    for info in victims:
        problem = _signal_one(info, SIGNALS[signal_name])
        if problem is None:
            signalled.append({"pid": info.pid, "comm": info.comm})
            ctx.sink.write("stdout", f"sent {signal_name} to {info.pid} ({info.comm})\n".encode())
        else:
            missed.append({"pid": info.pid, "comm": info.comm, "reason": problem})
            ctx.sink.write("stderr", f"{info.pid} ({info.comm}): {problem}\n".encode())
    details = {"signal": signal_name, "signalled": signalled, "missed": missed}
    if not signalled:
        result = failed(
            BACKEND, f"{signal_name} was not delivered to any process", ctx.sink, started
        )
        result.details = details
        return result
    duration = int((time.monotonic() - started) * 1000)
    return RunOutcome(exit_code=0, duration_ms=duration, backend=BACKEND, details=details)


def _signal_one(info: ProcessInfo, signum: int) -> str | None:
    """Signal the process ``info`` describes; a reason when it could not be done."""
    try:
        pidfd = os.pidfd_open(info.pid)
    except ProcessLookupError:
        return "exited before it could be signalled"
    except PermissionError:
        return "not permitted"
    try:
        # The pidfd pins whichever process holds the pid now; its comm confirms
        # that this is still the process chosen, not a newcomer given the same pid.
        current = read_process(info.pid)
        if current is None or current.comm != info.comm:
            return "exited before it could be signalled"
        signal.pidfd_send_signal(pidfd, signum)
    except ProcessLookupError:
        return "exited before it could be signalled"
    except PermissionError:
        return "not permitted"
    finally:
        os.close(pidfd)
    return None


def run_exec(params: dict, ctx: ActionContext) -> RunOutcome:
    try:
        argv = split_command(params["command"])
    except ValueError as exc:
        return failed(BACKEND, f"invalid command: {exc}", ctx.sink)
    return run_argv(argv, ctx)


# --- catalog ----------------------------------------------------------------

_SERVICE = {"service": "service_name", "host": "host"}

for _verb, _description, _risk in (
    ("restart", "Restart a systemd service on a host.", 4),
    ("stop", "Stop a systemd service on a host.", 5),
    ("start", "Start a systemd service on a host.", 3),
    ("status", "Show a systemd service's status on a host.", 1),
):
    ACTIONS.append(
        ActionSpec(
            name=f"host.{_verb}_service" if _verb != "status" else "host.service_status",
            description=_description,
            serializer=ServiceParameters,
            base_risk=_risk,
            runner=_service_runner(_verb),
            read_only=_verb == "status",
            host_bound=True,
            targets=_SERVICE,
        )
    )

ACTIONS.append(
    ActionSpec(
        name="host.kill_process",
        description="Send a signal to a process on a host, by pid or by exact name.",
        serializer=KillParameters,
        base_risk=6,
        runner=run_kill,
        host_bound=True,
        targets={"process": "target", "host": "host"},
    )
)
ACTIONS.append(
    ActionSpec(
        name="host.exec",
        description="Run a command on a host as an argument list, without a shell.",
        serializer=ExecParameters,
        base_risk=6,
        runner=run_exec,
        host_bound=True,
        targets={"command": "command", "host": "host"},
    )
)
