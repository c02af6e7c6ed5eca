"""How each language's interpreter is started: cold, or pre-started and waiting for its code."""

from __future__ import annotations

from dataclasses import dataclass

SCRIPT_NAMES = {"python": "main.py", "bash": "main.sh", "javascript": "main.js"}


# A pre-started Python waits here for its code on stdin, then runs it as
# ``python main.py`` would: stdin becomes /dev/null, ``__main__`` is clean,
# ``__file__`` and ``sys.argv`` point at the script, tracebacks start in it.
WARM_LOADER = r"""
def _load():
    import builtins, os, sys
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    path = os.path.join(os.getcwd(), "main.py")
    with open(path, "wb") as f:
        f.write(b"".join(chunks))
    sys.argv[:] = [path]
    namespace = globals()
    namespace.clear()
    namespace.update(__name__="__main__", __builtins__=builtins, __file__=path,
                     __doc__=None, __cached__=None, __spec__=None, __package__=None, __loader__=None)
    try:
        code = compile(b"".join(chunks), path, "exec")
        del chunks
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
        if warm:
            return [*self.argv, "-c", WARM_LOADER]
        return [*self.argv, script_path]
