"""How each language's interpreter is started: cold, or pre-started and waiting for its code."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

from ..base import LANGUAGES, UnsupportedLanguage
from .host import SYSTEM_PATH

SCRIPT_NAMES = {"python": "main.py", "bash": "main.sh", "javascript": "main.js"}


# Every Python run starts here: pre-started, it waits for its code on stdin
# (which then becomes /dev/null); cold, it is given the script's path. Either
# way it runs the code as ``python main.py`` would: ``__main__`` is clean, ``__file__`` and
# ``sys.argv`` point at the script, tracebacks start in it. Its stdout and stderr
# write each write at once, as ``-u``'s do, but through a buffer: ``-u``'s
# streams drop the rest of a write that a signal cuts short (a write larger than
# the pipe has room for, while the script handles a signal), and a buffer writes
# it. A script with a timer signal lost two thirds of 19 MB of output that way.
PY_LOADER = r"""
def _load():
    import builtins, io, os, sys
    class Prompt(io.BufferedWriter):
        def write(self, data):
            written = super().write(data)
            self.flush()
            return written
    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        if old is not None:
            raw = io.FileIO(old.fileno(), "w", closefd=False)
            new = io.TextIOWrapper(Prompt(raw), encoding=old.encoding, errors=old.errors,
                                   write_through=True)
            setattr(sys, name, new)
            setattr(sys, f"__{name}__", new)
    if len(sys.argv) > 1:
        path = os.path.abspath(sys.argv[1])
        with open(path, "rb") as f:
            source = f.read()
    else:
        chunks = []
        while True:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        source = b"".join(chunks)
        del chunks
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        path = os.path.join(os.getcwd(), "main.py")
        with open(path, "wb") as f:
            f.write(source)
    sys.argv[:] = [path]
    namespace = globals()
    namespace.clear()
    namespace.update(__name__="__main__", __builtins__=builtins, __file__=path,
                     __doc__=None, __cached__=None, __spec__=None, __package__=None, __loader__=None)
    try:
        code = compile(source, path, "exec")
        del source
        exec(code, namespace)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        sys.exit(1)
_load()
"""


@dataclass(frozen=True)
class Program:
    """How one language is started: interpreter argv (the script path goes last)."""

    language: str
    argv: tuple[str, ...]
    filename: str

    def command(self, script_path: str, warm: bool = False) -> list[str]:
        """The argv of a run of ``script_path``; ``warm``: of an interpreter that waits for its
        code on stdin (Python only)."""
        if self.language == "python":
            return [*self.argv, "-c", PY_LOADER, *([] if warm else [script_path])]
        return [*self.argv, script_path]


def _which(name: str) -> str | None:
    return shutil.which(name, path=SYSTEM_PATH) or shutil.which(name)


def resolve_program(language: str) -> Program:
    """The interpreter for a language on this host, or ``UnsupportedLanguage``."""
    if language not in LANGUAGES:
        raise UnsupportedLanguage(f"unknown language {language!r}; use one of {LANGUAGES}")
    filename = SCRIPT_NAMES[language]
    if language == "python":
        # The system interpreter first: an unprivileged run uid can read /usr,
        # not a virtualenv under /root. -I: no user site, no PYTHON* variables.
        python = shutil.which("python3", path=SYSTEM_PATH) or sys.executable
        return Program(language, (python, "-I", "-S"), filename)  # unbuffered: PY_LOADER
    if language == "bash":
        bash = _which("bash")
        if not bash:
            raise UnsupportedLanguage("bash is not installed on this worker")
        return Program(language, (bash, "--noprofile", "--norc"), filename)
    node = _which("node")
    if not node:
        raise UnsupportedLanguage(
            "javascript needs Node.js, but `node` is not on this worker's PATH; "
            "install nodejs or use the docker backend"
        )
    return Program(language, (node,), filename)


def _extra_binds(program: Program) -> list[tuple[str, str]]:
    """An interpreter installed outside the system dirs (e.g. /opt) must be visible too."""
    real = os.path.realpath(program.argv[0])
    if real.startswith(("/usr/", "/bin/", "/lib")):
        return []
    prefix = os.path.dirname(os.path.dirname(real))
    return [(prefix, prefix)]
