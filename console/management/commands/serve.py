"""``serve``: the whole embedded deployment in one command.

Migrates, then runs the web processes (HTTP + websockets, one per core by
default, each on a socket of its own that serve binds to the one port), a
Celery worker and Celery beat as child processes, and stops them all on
SIGTERM or Ctrl-C.
Without ``DATABASE_URL``/``REDIS_URL`` everything is local: SQLite, a
filesystem broker, a channel layer in the database.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.environment import private_data_dir
from infrastructure.sqlite.checkpoints import BACKSTOP_PAGES, Checkpointer

STOP_GRACE_SECONDS = 10
UVICORN_OPTIONS = [
    "--loop", "uvloop", "--http", "httptools", "--ws", "websockets-sansio",
    "--lifespan", "off",  # Channels' router answers HTTP and websockets only
    "--no-access-log", "--no-server-header",
    "--no-proxy-headers",  # X-Forwarded-* is trusted only where Django is told to
    "--timeout-graceful-shutdown", "5",
]  # fmt: skip
PR_SET_PDEATHSIG = 1
WILDCARDS = ("0.0.0.0", "::", "")


class Command(BaseCommand):
    help = "Run the console, a worker and the scheduler on one machine."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("AIRLOCK_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--concurrency", type=int, default=4, help="worker threads")
        parser.add_argument(
            "--web-processes",
            type=int,
            default=int(os.environ.get("AIRLOCK_WEB_PROCESSES") or os.cpu_count() or 1),
            help="web server processes (default: AIRLOCK_WEB_PROCESSES, else one per core)",
        )
        parser.add_argument(
            "--demo", action="store_true", help="create demo users and an agent token"
        )
        parser.add_argument("--no-worker", action="store_true", help="serve the web only")
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="show the worker's, the scheduler's and the web server's own logs here "
            "(default: the worker's and the scheduler's go to DATA_DIR/logs/)",
        )
        parser.add_argument(
            "--certfile",
            default=os.environ.get("AIRLOCK_TLS_CERT", ""),
            help="serve HTTPS with this certificate (PEM; default: AIRLOCK_TLS_CERT)",
        )
        parser.add_argument(
            "--keyfile",
            default=os.environ.get("AIRLOCK_TLS_KEY", ""),
            help="the certificate's private key (PEM; default: AIRLOCK_TLS_KEY)",
        )

    def handle(self, *args, host, port, concurrency, web_processes, demo, no_worker, **options):
        self.verbose = options["verbose"]
        if not 1 <= port <= 65535:
            raise CommandError(f"--port {port} is not a TCP port")
        if web_processes < 1:
            raise CommandError(f"--web-processes {web_processes}: at least one is needed")
        self.tls = _tls_files(options["certfile"], options["keyfile"])
        scheme = "https" if self.tls else "http"
        address = f"{scheme}://{_shown_host(host)}:{port}"
        # The children's links, allowed hosts and cookies follow the address
        # served, unless SITE_URL says where people reach it (a proxy, a name).
        if host in WILDCARDS and "SITE_URL" not in os.environ:
            # Reached by names serve cannot know: any Host header, as before,
            # and a warning that browsers elsewhere need SITE_URL.
            os.environ.setdefault("ALLOWED_HOSTS", "*")
            self.stderr.write(
                f"Set SITE_URL to the address people use (e.g. {scheme}://airlock.example.com:{port}): "
                "links in mails and Slack point to it, and only its pages may open the "
                "console's live updates (this machine's own always may)."
            )
        os.environ.setdefault("SITE_URL", address)
        # Before anything else: a taken port fails at once.
        listeners = _listen(host, port, web_processes)
        self._prepare_dirs()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("createcachetable", verbosity=0)  # the embedded deployment's shared cache
        self._print_sandbox()
        if demo:
            self._print_demo(address)
        self.children: list[subprocess.Popen] = []
        self._stopping = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        checkpointer = self._start_checkpoints()
        try:
            self._start(listeners, concurrency, no_worker)
            for listener in listeners:
                listener.close()  # the web processes hold them now
            self.stdout.write(
                f"Airlock is running at {address}/  "
                f"({web_processes} web process{'es' if web_processes > 1 else ''}; Ctrl-C to stop)"
            )
            if not self.verbose and not no_worker:
                self.stdout.write(
                    f"Worker and scheduler logs: {self.logs}/ (worker.log, beat.log; "
                    "serve --verbose shows them here)"
                )
            self.stdout.flush()  # the demo token too, when stdout is a file or a pipe
            self._supervise()
        finally:
            self._stop_all()
            if checkpointer is not None:
                checkpointer.stop()

    def _start_checkpoints(self) -> Checkpointer | None:
        """SQLite's log is checkpointed here, not in the commits of the children."""
        database = settings.DATABASES["default"]
        if database["ENGINE"] != "infrastructure.sqlite":
            return None
        os.environ["SQLITE_WAL_AUTOCHECKPOINT"] = str(BACKSTOP_PAGES)  # the children's
        return Checkpointer(database["NAME"]).start()

    def _prepare_dirs(self) -> None:
        # Everything Airlock writes from here on is its own user's alone: the
        # database, broker messages, the beat schedule (children inherit this).
        os.umask(0o077)
        try:
            data_dir = private_data_dir(Path(settings.DATA_DIR))
        except ImproperlyConfigured as exc:  # inside a checkout
            raise CommandError(str(exc)) from None
        _make_private(data_dir, 0o700)
        self.logs = data_dir / "logs"
        self.logs.mkdir(mode=0o700, exist_ok=True)
        # Static files are served from the source tree (WhiteNoise's finders);
        # an empty STATIC_ROOT keeps it from warning in every web process.
        Path(settings.STATIC_ROOT).mkdir(mode=0o700, exist_ok=True)
        for entry in data_dir.iterdir():  # what an older install left readable
            if entry.is_file() and not entry.is_symlink():
                _make_private(entry, 0o600)
        for option in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
            folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get(option)
            if folder:
                Path(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
                _make_private(Path(folder), 0o700)

    def _print_sandbox(self) -> None:
        """Say at start how scripts will be isolated; weak isolation is never silent."""
        from executions.sandboxes.status import sandbox_status

        status = sandbox_status(refresh=True)
        self.stdout.write(
            f"Sandbox: {status['backend']} · isolation {status['isolation']} ({status['reason']})"
        )
        if status["warning"]:
            self.stderr.write(self.style.ERROR(f"WARNING: {status['warning']}"))

    def _print_demo(self, address: str) -> None:
        from console.demo import ensure_demo

        demo = ensure_demo()
        password = next(iter(demo["users"].values()))
        needed = "to change the policy, agents or roles"
        if settings.STEP_UP_MIN_RISK <= 10:
            needed = f"to decide a proposal of risk {settings.STEP_UP_MIN_RISK}+ and {needed}"
        lines = ["", f"Demo accounts (password for each: {password}):"]
        lines += [f"  {name}" for name in demo["users"]]
        lines += [
            f"Demo agent {demo['agent']} token (shown once):",
            f"  {demo['token']}",
            "Try:",
            f"  curl -s -X POST {address}/api/v1/proposals \\",
            f"    -H 'Authorization: Bearer {demo['token']}' -H 'Content-Type: application/json' \\",
            """    -d '{"action": "script.execute", "parameters": {"language": "python", "code": "print(\\"hi\\")"}}'""",
            "From the terminal (docs/guides/reviewers.md):",
            f"  .venv/bin/airlock login {address} --token {demo['token']}",
            "  echo 'print(\"hi\")' | .venv/bin/airlock run -",
            "Second factors: each person adds a passkey or an authenticator app at",
            f"  {address}/profile/security/ (needed {needed}).",
            "Single sign-on: set OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET and"
            " OIDC_REVIEWER_GROUPS (docs/guides/admins.md)."
            if not settings.OIDC_PROVIDER_IDS
            else f"Single sign-on through: {', '.join(settings.OIDC_PROVIDER_IDS)}.",
            "",
        ]
        self.stdout.write("\n".join(lines))

    def _spawn(
        self, argv: list[str], extra_env: dict | None = None, pass_fds=(), log: str = ""
    ) -> None:
        """Start a child; ``log``: the file in DATA_DIR/logs/ its output goes to (unless verbose)."""
        env = {**os.environ, **(extra_env or {})}
        output = None
        if log and not self.verbose:
            output = open(self.logs / log, "ab")  # noqa: SIM115 - the child writes to it
        # Own session: a Ctrl-C reaches us once, and we stop children in order.
        # If serve itself dies (even SIGKILL), the kernel sends its children SIGTERM.
        self.children.append(
            subprocess.Popen(
                argv,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                pass_fds=pass_fds,
                stdout=output,
                stderr=output,
            )
        )
        if output is not None:
            output.close()  # the child holds it

    def _start(self, listeners: list[socket.socket], concurrency: int, no_worker: bool) -> None:
        python = sys.executable
        # Uvicorn (uvloop + httptools, websockets by the websockets library's sans-I/O core):
        # it served a bare view about a third faster than Daphne here, and
        # takes an inherited socket. Each web process gets a socket of its
        # own on the one port (SO_REUSEPORT): the kernel spreads connections
        # evenly, where on one shared socket the first process to wake took
        # most keep-alive connections. Nothing a request needs lives in one
        # process: sessions and the channel layer are in the database (or
        # Redis), and every process's long-poll watcher and layer poller are
        # woken across processes.
        tls = []
        if self.tls:
            tls = ["--ssl-certfile", self.tls[0], "--ssl-keyfile", self.tls[1]]
        for listener in listeners:
            fd = listener.fileno()
            self._spawn(
                [python, "-m", "uvicorn", "--fd", str(fd), *UVICORN_OPTIONS, *tls]
                + ([] if self.verbose else ["--log-level", "warning"])
                + ["console.asgi:application"],
                pass_fds=(fd,),
            )
        if no_worker:
            return
        queues = f"{settings.CELERY_TASK_DEFAULT_QUEUE},host.{settings.WORKER_HOSTNAME}"
        self._spawn(
            [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                str(concurrency),
                "-Q",
                queues,
                "-n",
                f"airlock@{settings.WORKER_HOSTNAME}",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ],
            log="worker.log",
        )
        self._spawn(
            [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(Path(settings.DATA_DIR) / "celerybeat-schedule"),
            ],
            log="beat.log",
        )

    def _on_signal(self, signum, frame) -> None:
        self._stopping = True

    def _supervise(self) -> None:
        while not self._stopping:
            for child in self.children:
                if child.poll() is not None:
                    self.stderr.write(
                        f"{child.args[2:5]} exited with {child.returncode}; stopping"
                        + ("" if self.verbose else f" (its log: {self.logs}/)")
                    )
                    self._stopping = True
                    break
            time.sleep(0.2)

    def _stop_all(self) -> None:
        for child in self.children:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in self.children:
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for child in self.children:
            _signal_group(child, signal.SIGKILL)  # whatever is left in its session
            child.wait()
        self.stdout.write("Airlock stopped.")


def _listen(host: str, port: int, processes: int) -> list[socket.socket]:
    """A socket per web process, all bound to the port (SO_REUSEPORT).

    Bound once without SO_REUSEPORT first: a port another program (or another
    Airlock) holds is refused, never silently shared with it.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise CommandError(f"--host {host}: {error.strerror}") from None
    listeners = []
    for shared in [False] + [True] * processes:
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(shared))
        # Inherited by accepted connections: Uvicorn takes an inherited socket
        # for a UNIX one and would leave Nagle on (40 ms stalls on small answers).
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            listener.bind(address)
        except OSError as error:
            listener.close()
            for bound in listeners:
                bound.close()
            raise CommandError(f"cannot listen on {host}:{port}: {error.strerror}") from None
        if not shared:
            listener.close()  # the port is free
            continue
        listener.listen(1024)
        listeners.append(listener)
    return listeners


def _make_private(path: Path, mode: int) -> None:
    """Tighten a path this user owns to ``mode``; leave anyone else's alone."""
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:
        pass


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _tls_files(certfile: str, keyfile: str) -> tuple[str, str] | None:
    """The certificate and key to serve HTTPS with, both readable, or None for plain HTTP."""
    if not certfile and not keyfile:
        return None
    if not (certfile and keyfile):
        raise CommandError("HTTPS needs both --certfile and --keyfile (AIRLOCK_TLS_CERT/KEY)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"cannot serve HTTPS with {certfile} and {keyfile}: {exc}") from None
    return str(Path(certfile).resolve()), str(Path(keyfile).resolve())


def _shown_host(host: str) -> str:
    """The host to put in links: a wildcard address is no address to visit."""
    if host in WILDCARDS:
        return "localhost"
    return f"[{host}]" if ":" in host else host
