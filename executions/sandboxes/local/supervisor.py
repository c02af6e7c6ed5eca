"""The supervisor that runs the code when bubblewrap is not available.

A small Python program (``SUPERVISOR_SOURCE``, started as
``python3 -I -S -c SUPERVISOR_SOURCE config``): a child subreaper that runs the
code and kills and reaps every descendant when the code ends or the run is
stopped, then reports the code's exit status on ``status_fd``.
"""

# Runs as the worker's user (root when the worker is root, so the code, under
# its own uid, cannot kill it). Blocking the signals and waiting for them with
# sigtimedwait leaves no window in which a stop request is lost.
SUPERVISOR_SOURCE = r"""
import ctypes, json, os, resource, signal, sys, time
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the run re-parent here
libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: the worker died, clean up
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCHLD})
stop = os.getppid() != cfg["parent"]
main = os.fork()
if main == 0:
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.close(cfg["status_fd"])  # the code must not be able to forge its own exit status
        os.setsid()
        for res, soft, hard in cfg["rlimits"]:
            resource.setrlimit(res, (soft, hard))
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        os.chdir(cfg["cwd"])
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: setuid binaries cannot raise privileges
        if cfg["seccomp"]:
            prog = ctypes.create_string_buffer(bytes.fromhex(cfg["seccomp"]))

            class Fprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            fprog = Fprog(len(prog.raw) // 8, ctypes.addressof(prog))
            if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
                raise OSError(ctypes.get_errno(), "seccomp filter refused")
        os.execv(cfg["argv"][0], cfg["argv"])
    except BaseException as exc:
        os.write(2, ("sandbox: cannot start the interpreter: %s\n" % exc).encode())
    os._exit(127)
status = None

def reap():
    global status
    try:
        while True:
            pid, st = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
            if pid == main and status is None:
                status = st
    except ChildProcessError:
        return False

def descendants():
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found

def kill_uid(uid):
    if not uid or uid < 1000:
        return  # never "kill everything" as root or a system account
    killer = os.fork()
    if killer == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(100):
                os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(killer, 0)

while not stop and status is None:
    reap()
    if status is not None:
        break
    info = signal.sigtimedwait({signal.SIGTERM, signal.SIGCHLD}, 1.0)
    stop = info is not None and info.si_signo == signal.SIGTERM
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    if cfg["uid"] is not None:
        kill_uid(cfg["uid"])
    for pid in descendants():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if not reap():
        break
    time.sleep(0.002)
if status is not None:
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    os.write(cfg["status_fd"], str(code).encode())
"""
