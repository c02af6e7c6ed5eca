"""The supervisor of a local run without bubblewrap: confines the code, runs it, cleans up.

Started as its own program, ``python3 -I -S supervisor.py CONFIG`` (standard
library only: no site-packages, nothing imported from Airlock), as the
worker's user. It is a child subreaper that runs the code and kills and reaps
every descendant when the code ends or the run is stopped, then reports the
code's exit status on ``status_fd``.

How the code is confined (``confine`` in the config):

- ``namespaces`` — the code gets new user, PID, mount, network, IPC, UTS and
  cgroup namespaces and a root of its own: the system directories read-only,
  a snapshot of /etc, a minimal /dev, a private /proc, and size-limited tmpfs
  for the work dir, /tmp and /dev/shm. Nothing else of the host exists there:
  no data dir, no checkout, no home, no sockets. These are the kernel calls
  bubblewrap makes (unprivileged user namespaces), made here directly with
  ctypes: no extra program per mount, the same code as root or not, and
  nothing to install. PID 1 of the namespace is a small init that reaps and,
  when it exits, makes the kernel kill everything left inside.
- ``landlock`` — for hosts that refuse user namespaces (e.g. an AppArmor
  policy): the code stays in the host's namespaces, and Landlock allows it to
  read only the system directories and listed /etc entries, to write only its
  own work dir, no TCP, no abstract UNIX sockets, no signals outside the run;
  a seccomp filter refuses new sockets.
- ``none`` — rlimits, a scrubbed environment, seccomp and (for a root worker)
  a uid of its own: the weak fallback the console warns about.

In every mode Landlock is applied where the kernel has it (5.13+), through its
three system calls: there is no Landlock binding in the standard library, and
this program must not import from site-packages.

A long-lived server (``servers.py``) is started the same way, with its own
environment (``env``), its paths bound after the tmpfs (``server_binds``,
``writable``), no ``status_fd`` (its caller holds its stdio and sees it end)
and, since its uid is one per server name, no "kill everything of the uid";
with a network list, its proxy's socket (``hand_over_egress``).

Runs as the worker's user (root when the worker is root, so the code, under
its own uid, cannot kill it). Blocking the signals and waiting for them with
sigtimedwait leaves no window in which a stop request is lost.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
MNT_DETACH = 2
# The new mount API (every architecture): a root caller clones a server's paths for it.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0o2000000, 0x8000, 0x1000
AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY = -100, 4, 1
SYS_PIVOT_ROOT_BY_MACHINE = {"x86_64": 155, "aarch64": 41}

# Landlock (include/uapi/linux/landlock.h).
SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self: every architecture
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_CHAR, FS_MAKE_BLOCK = 1 << 6, 1 << 11
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
FILE_ACCESS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ_ACCESS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def fail(what: str) -> None:
    errno = ctypes.get_errno()
    raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, arg: int = 0) -> int:
    return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


# --- Landlock ------------------------------------------------------------------


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled)."""
    version = libc.syscall(SYS_LANDLOCK[0], None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(version), 0)


def fs_access(abi: int) -> int:
    """Every file-system right this ABI can restrict."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def landlock(rules: dict, abi: int) -> None:
    """Restrict this process (and what it executes) to ``rules``; no_new_privs must be set.

    ``rules``: ``read`` (paths to read and execute), ``write`` (paths to read,
    write and execute), ``devices`` (device files to read and write). A listed
    path that does not exist is skipped. No TCP but to ``connect_tcp`` (a server's proxy).
    """
    handled = fs_access(abi)
    write = handled & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_IOCTL_DEV)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    ruleset = libc.syscall(SYS_LANDLOCK[0], attr, len(attr), 0)
    if ruleset < 0:
        fail("landlock_create_ruleset")
    try:
        grants = [(p, READ_ACCESS) for p in rules.get("read", ())]
        grants += [(p, write) for p in rules.get("write", ())]
        grants += [
            (p, FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV) for p in rules.get("devices", ())
        ]
        for path, rights in grants:
            allow_beneath(ruleset, path, rights & handled)
        for port in rules.get("connect_tcp", ()) if net else ():
            attr = struct.pack("=QQ", NET_CONNECT_TCP, port)
            if libc.syscall(SYS_LANDLOCK[1], ruleset, LANDLOCK_RULE_NET_PORT, attr, 0) != 0:
                fail(f"landlock_add_rule port {port}")
        if libc.syscall(SYS_LANDLOCK[2], ruleset, 0) != 0:
            fail("landlock_restrict_self")
    finally:
        os.close(ruleset)


def allow_beneath(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this host
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= FILE_ACCESS  # a file takes only the rights that apply to files
        attr = struct.pack("=Qi", rights, fd)
        if libc.syscall(SYS_LANDLOCK[1], ruleset, LANDLOCK_RULE_PATH_BENEATH, attr, 0) != 0:
            fail(f"landlock_add_rule {path}")
    finally:
        os.close(fd)


# --- namespaces and the run's own root ---------------------------------------------


def mount(source, target: str, fstype, flags: int, data: str | None = None) -> None:
    result = libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if result != 0:
        fail(f"mount {target}")


def locked_flags(path: str) -> int:
    """The flags a remount inside a user namespace must keep (the kernel locks them)."""
    st = os.statvfs(path).f_flag
    flags = st & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if st & os.ST_NOATIME:
        flags |= MS_NOATIME
    elif st & os.ST_RELATIME:
        flags |= MS_RELATIME
    else:
        flags |= MS_STRICTATIME
    if st & os.ST_NODIRATIME:
        flags |= MS_NODIRATIME
    return flags


def bind_read_only(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    mounts = [target] + [m for m in mount_points() if m.startswith(target.rstrip("/") + "/")]
    for point in mounts:  # a recursive bind brings submounts along; each must be read-only
        mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags(point))


def mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4].replace("\\040", " ") for line in f]


def enter_namespaces() -> None:
    """New namespaces for this process, the caller's uid and gid mapped to 65534 inside."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    flags |= CLONE_NEWCGROUP | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        fail("cannot create namespaces (unshare)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"65534 {uid} 1"),
        ("gid_map", f"65534 {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def build_root(layout: dict, code: bytes | None) -> None:
    """Make ``layout["root"]`` the root of this mount namespace; runs as PID 1 inside."""
    root = layout["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for target, link in layout.get("symlinks", ()):
        os.symlink(target, root + link)
    for source, target in layout.get("binds", ()):
        path = root + target
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.isdir(source):
            os.makedirs(path, exist_ok=True)
        else:
            open(path, "w").close()
        bind_read_only(source, path)
    os.makedirs(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    build_dev(root + "/dev")
    for target, size, mode in layout.get("tmpfs", ()):
        os.makedirs(root + target, exist_ok=True)
        mount("tmpfs", root + target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")
    # A server's own paths (servers.py) come last: one under /tmp stays visible.
    for key, read_only in (("server_binds", True), ("writable", False)):
        for source, target in layout.get(key, ()):
            os.makedirs(root + target, exist_ok=True)
            if source in layout.get("cloned", {}):
                attach(layout["cloned"][source], root + target)
            elif read_only:
                bind_read_only(source, root + target)
            else:
                mount(source, root + target, None, MS_BIND | MS_REC)
    if egress := layout.get("egress"):  # the proxy's handover socket, for hand_over_egress
        open(root + egress["target"], "w").close()
        mount(egress["socket"], root + egress["target"], None, MS_BIND)
    if code is not None:
        with open(root + layout["script"], "wb") as f:
            f.write(code)
        os.chmod(root + layout["script"], 0o644)
    os.mkdir(root + "/.old-root")
    os.chdir(root)
    pivot = SYS_PIVOT_ROOT_BY_MACHINE[os.uname().machine]
    if libc.syscall(pivot, b".", b".old-root") != 0:
        fail("pivot_root")
    os.chdir("/")
    if libc.umount2(b"/.old-root", MNT_DETACH) != 0:
        fail("umount the host's root")
    os.rmdir("/.old-root")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    hostname = layout.get("hostname", "sandbox").encode()
    libc.sethostname(hostname, len(hostname))
    loopback_up()
    if egress:
        hand_over_egress(egress)


def hand_over_egress(egress: dict) -> None:
    """Listen on the server's own loopback and hand the socket to its proxy (egress.py)."""
    import socket  # loaded before pivot_root, with array (start_code)

    listener = socket.create_server(("127.0.0.1", egress["port"]))
    with listener, socket.socket(socket.AF_UNIX) as proxy:
        proxy.settimeout(10)
        proxy.connect(egress["target"])
        socket.send_fds(proxy, [b"L"], [listener.fileno()])
        if proxy.recv(1) != b"k":
            fail("the proxy did not take the server's socket")
    libc.umount2(egress["target"].encode(), MNT_DETACH)


def clone_server_paths(layout: dict) -> None:
    """As root, before the uid drop: a detached copy of each of a server's paths.

    A server started by root runs as a uid of its own, which may not pass the
    folders above its paths (/root); root clones the mounts (read-only where
    they are to be) and the server's namespace attaches them (``attach``).
    """
    cloned = {}
    for key, read_only in (("server_binds", True), ("writable", False)):
        for source, _ in layout.get(key, ()):
            flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
            fd = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source.encode(), flags)
            if fd < 0:
                fail(f"open_tree {source}")
            if read_only:
                attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
                at = AT_EMPTY_PATH | AT_RECURSIVE
                if libc.syscall(SYS_MOUNT_SETATTR, fd, b"", at, attr, ctypes.sizeof(attr)) != 0:
                    fail(f"read-only {source}")
            cloned[source] = fd
    layout["cloned"] = cloned


def attach(fd: int, target: str) -> None:
    if libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH):
        fail(f"mount {target}")


def build_dev(dev: str) -> None:
    """A minimal /dev: the harmless devices bound from the host, and links to /proc."""
    os.makedirs(dev)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{dev}/{name}", "w").close()
            mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{dev}/{link}")
    os.symlink("/proc/self/fd/1", f"{dev}/stdout")
    os.symlink("/proc/self/fd/2", f"{dev}/stderr")
    os.mkdir(f"{dev}/shm")
    os.chmod(dev, 0o755)


def loopback_up() -> None:
    """The new network namespace's lo starts down; the code may talk to itself.

    Through libc: after pivot_root the worker's own standard library (socket,
    fcntl) may no longer be importable.
    """
    sock = libc.socket(2, 2 | 0o2000000, 0)  # AF_INET, SOCK_DGRAM | SOCK_CLOEXEC
    if sock < 0:
        fail("socket for lo")
    try:
        request = ctypes.create_string_buffer(struct.pack("16sH22x", b"lo", 0), 40)
        if libc.ioctl(sock, 0x8913, request) != 0:  # SIOCGIFFLAGS
            fail("read lo flags")
        flags = struct.unpack_from("16sH", request.raw)[1] | 0x1 | 0x40  # IFF_UP | IFF_RUNNING
        struct.pack_into("16sH", request, 0, b"lo", flags)
        if libc.ioctl(sock, 0x8914, request) != 0:  # SIOCSIFFLAGS
            fail("bring lo up")
    finally:
        os.close(sock)


def init(code_pid: int, result_fd: int) -> None:
    """PID 1 of the run's namespace: reap everything, report the code's status, exit.

    Exiting makes the kernel kill whatever is left in the namespace.
    """
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == code_pid:
            os.write(result_fd, str(status).encode())
            os._exit(0)


# --- the code's process --------------------------------------------------------------


CATCHABLE = tuple(
    signum for signum in signal.valid_signals() if signum not in (signal.SIGKILL, signal.SIGSTOP)
)


def default_signals() -> None:
    """Every signal back to its default and none blocked: a worker started with SIGINT or
    SIGHUP ignored (nohup, ``cmd &`` from a script) passes that on through exec, and the
    session's timeout could no longer interrupt a snippet; Python itself ignores SIGPIPE,
    which a shell pipeline of the code must not inherit."""
    for signum in CATCHABLE:
        if signal.getsignal(signum) != signal.SIG_DFL:
            try:
                signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError):  # signals the runtime keeps (32, 33: NPTL's)
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def become_code(cfg: dict, rules: dict | None) -> None:
    """Apply the limits and filters and exec the code; never returns."""
    default_signals()
    for res, soft, hard in cfg["rlimits"]:
        resource.setrlimit(res, (soft, hard))
    os.chdir(cfg["cwd"])
    if cfg["confine"] == "namespaces":
        # Capabilities inside the namespace go at exec (the code is not uid 0
        # there); the bounding set goes too, so nothing can bring them back.
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
        for cap in range(64):
            if prctl(PR_CAPBSET_DROP, cap) != 0:
                break
    if prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:  # setuid binaries cannot raise privileges
        fail("no_new_privs")
    if rules is not None and cfg.get("landlock_abi", 0) > 0:
        landlock(rules, cfg["landlock_abi"])
    if cfg["seccomp"]:
        program = ctypes.create_string_buffer(bytes.fromhex(cfg["seccomp"]))

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = Fprog(len(program.raw) // 8, ctypes.addressof(program))
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            fail("seccomp filter refused")
    if "env" in cfg:  # a server's (servers.py): exactly this, not the supervisor's
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    os.execv(cfg["argv"][0], cfg["argv"])


def drop_to(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # A uid change makes the process non-dumpable, which puts /proc/self (and the
    # uid_map the namespaces need) out of its own reach.
    prctl(PR_SET_DUMPABLE, 1)


def start_code(cfg: dict, result_w: int) -> None:
    """The main child: drop to the run uid, confine, exec the code; never returns."""
    try:
        os.setsid()
        if (cfg.get("layout") or {}).get("egress"):  # while the library is in reach
            __import__("array"), __import__("socket")
        if cfg["uid"] is not None:
            if cfg.get("layout"):
                clone_server_paths(cfg["layout"])
            drop_to(cfg["uid"])
        if cfg["confine"] != "namespaces":
            os.close(result_w)
            become_code(cfg, cfg.get("landlock"))
        layout = cfg["layout"]
        code = None
        if layout.get("code_file"):
            with open(layout["code_file"], "rb") as f:
                code = f.read()
        enter_namespaces()
        init_pid = os.fork()
        if init_pid == 0:
            build_root(layout, code)
            code_pid = os.fork()
            if code_pid == 0:
                os.close(result_w)
                become_code(cfg, cfg.get("landlock"))
            prctl(PR_SET_DUMPABLE, 0)  # the code cannot open this init's memory
            init(code_pid, result_w)
        os.close(result_w)
        _, status = os.waitpid(init_pid, 0)
        os._exit(0 if os.WIFEXITED(status) else 1)
    except BaseException as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        os.write(2, f"sandbox: cannot start the code: {reason}\n".encode())
    os._exit(127)


# --- the supervisor ---------------------------------------------------------------


def reap(main: int, state: dict) -> bool:
    """Reap what has ended; False once no child is left."""
    try:
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
            if pid == main and state.get("status") is None:
                state["status"] = status
    except ChildProcessError:
        return False


def descendants() -> list[int]:
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def kill_uid(uid: int | None) -> None:
    if not uid or uid < 1000:
        return  # never "kill everything" as root or a system account
    killer = os.fork()
    if killer == 0:
        try:
            drop_to(uid)
            for _ in range(100):
                os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(killer, 0)


def exit_code(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def supervise(cfg: dict) -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the run re-parent here
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the worker died: clean up
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCHLD})
    stop = os.getppid() != cfg["parent"]
    result_r, result_w = os.pipe()  # the namespace's init reports the code's status here
    os.set_blocking(result_r, False)
    main = os.fork()
    if main == 0:
        os.close(result_r)
        if "status_fd" in cfg:  # the code must not be able to forge its own exit status
            os.close(cfg["status_fd"])
        start_code(cfg, result_w)
    os.close(result_w)
    # The run's output pipes reach end-of-file as soon as the code's processes are gone.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    state: dict = {}
    while not stop and state.get("status") is None:
        reap(main, state)
        if state.get("status") is not None:
            break
        info = signal.sigtimedwait({signal.SIGTERM, signal.SIGCHLD}, 1.0)
        stop = info is not None and info.si_signo == signal.SIGTERM
    # A server's uid is shared by its copies in other processes: never "kill all of it".
    end_everything(cfg["uid"] if cfg.get("kill_uid", True) else None, main, state)
    status = state.get("status")
    if cfg["confine"] == "namespaces":
        try:
            reported = os.read(result_r, 32)
        except BlockingIOError:
            reported = b""
        status = int(reported) if reported and status is not None else None
    if status is not None and "status_fd" in cfg:
        os.write(cfg["status_fd"], str(exit_code(status)).encode())


def end_everything(uid: int | None, main: int, state: dict) -> None:
    """Kill and reap every descendant (bounded); orphans of the run re-parented here."""
    deadline = time.monotonic() + 3
    while reap(main, state) and time.monotonic() < deadline:
        left = descendants()
        if left:
            kill_uid(uid)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.001)


if __name__ == "__main__":
    supervise(json.loads(sys.argv[1] if sys.argv[1:] else os.environ.pop("AIRLOCK_SUPERVISOR")))
    os._exit(0)  # nothing to flush or finalise: exit at once
