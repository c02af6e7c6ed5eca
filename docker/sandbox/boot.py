# Where every Python run in the sandbox image starts: ``python3 -I -S -c`` with
# this file's text (``runner.py``'s ``PY_BOOT``; no docstring here, or it would
# be the run's ``__doc__``).


def _airlock_boot():
    import io
    import sys

    class Prompt(io.BufferedWriter):
        def write(self, data):
            written = super().write(data)
            self.flush()
            return written

    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        if old is not None:
            raw = io.FileIO(old.fileno(), "w", closefd=False)
            new = io.TextIOWrapper(
                Prompt(raw), encoding=old.encoding, errors=old.errors, write_through=True
            )
            setattr(sys, name, new)
            setattr(sys, f"__{name}__", new)
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        with open(3, encoding="utf-8") as f:
            path = f.read()
        if not path:
            raise SystemExit(0)
    sys.argv[:] = [path]
    main = sys.modules["__main__"].__dict__
    del main["_airlock_boot"]
    main["__file__"], main["__cached__"] = path, None
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    try:
        exec(code, main)
    except SystemExit:
        raise
    except BaseException as exc:
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # hide this frame
        sys.excepthook(type(exc), exc, exc.__traceback__)
        sys.exit(1)


_airlock_boot()
