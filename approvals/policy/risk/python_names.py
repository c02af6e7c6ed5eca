"""What Python names are worth to the risk score: modules, attributes and calls, and how to spot them.

The tables ``python.py`` reads as it walks the code: which modules give the
code processes, network, files or native code; which attributes and calls
reach those without an import; the patterns of encoded blobs and write modes.
"""

from __future__ import annotations

import re

from approvals.policy.risk.text import name_set

# module -> (points, what importing it gives the code)
MODULES: dict[str, tuple[int, str]] = {
    "os": (4, "processes, files and environment"),
    "posix": (5, "processes and files, like os"),
    "nt": (5, "processes and files, like os"),
    "subprocess": (5, "runs processes"),
    "_posixsubprocess": (7, "spawns processes natively"),
    "pty": (6, "spawns shells in a terminal"),
    "pexpect": (5, "drives interactive processes"),
    "sh": (5, "runs processes"),
    "plumbum": (5, "runs processes"),
    "multiprocessing": (3, "starts processes"),
    "signal": (3, "sends and traps signals"),
    "psutil": (4, "inspects and controls processes"),
    "socket": (5, "opens raw network connections"),
    "socketserver": (5, "serves on a network port"),
    "ssl": (3, "network encryption"),
    "urllib": (4, "network access"),
    "http": (4, "network access"),
    "requests": (4, "network access"),
    "httpx": (4, "network access"),
    "aiohttp": (4, "network access"),
    "urllib3": (4, "network access"),
    "websocket": (4, "network access"),
    "websockets": (4, "network access"),
    "ftplib": (5, "file transfer over the network"),
    "smtplib": (5, "sends email"),
    "telnetlib": (5, "remote terminal sessions"),
    "poplib": (4, "network access"),
    "imaplib": (4, "network access"),
    "xmlrpc": (4, "remote procedure calls"),
    "paramiko": (5, "SSH to other hosts"),
    "webbrowser": (3, "opens URLs"),
    "shutil": (4, "copies and deletes files"),
    "pathlib": (2, "file paths"),
    "fileinput": (3, "reads and rewrites files"),
    "glob": (1, "lists files"),
    "tempfile": (1, "temporary files"),
    "zipfile": (2, "archives on disk"),
    "tarfile": (2, "archives on disk"),
    "sqlite3": (2, "database files"),
    "mmap": (4, "maps memory and files"),
    "fcntl": (3, "low-level file control"),
    "ctypes": (7, "calls native code"),
    "_ctypes": (7, "calls native code"),
    "cffi": (7, "calls native code"),
    "importlib": (4, "imports modules dynamically"),
    "imp": (5, "imports modules dynamically"),
    "runpy": (5, "runs other modules"),
    "pkgutil": (3, "finds and loads modules"),
    "zipimport": (4, "imports code from archives"),
    "code": (4, "runs an interactive interpreter"),
    "codeop": (4, "compiles code"),
    "builtins": (5, "reaches the builtins module"),
    "__builtin__": (5, "reaches the builtins module"),
    "sys": (2, "interpreter internals"),
    "gc": (4, "walks live objects"),
    "inspect": (3, "reads frames and source"),
    "types": (2, "builds functions and code objects"),
    "marshal": (5, "loads code objects"),
    "pickle": (4, "unpickling can run code"),
    "_pickle": (4, "unpickling can run code"),
    "dill": (4, "unpickling can run code"),
    "cloudpickle": (4, "unpickling can run code"),
    "shelve": (3, "unpickling can run code"),
    "pwd": (3, "reads user accounts"),
    "grp": (3, "reads user accounts"),
    "spwd": (6, "reads password hashes"),
    "crypt": (3, "password hashing"),
    "resource": (2, "process limits"),
    "site": (3, "interpreter start-up hooks"),
    "pip": (5, "installs packages"),
    "ensurepip": (5, "installs packages"),
    "venv": (3, "creates environments"),
    "docker": (6, "controls Docker"),
    "boto3": (5, "controls cloud resources"),
    "keyring": (4, "reads stored secrets"),
}

SAFE_MODULES = name_set(
    """
    __future__ abc argparse array ast asyncio base64 binascii bisect calendar cmath codecs
    collections colorsys concurrent contextlib contextvars copy csv dataclasses datetime
    decimal difflib doctest enum errno fnmatch fractions functools getpass gettext graphlib
    hashlib heapq hmac html io ipaddress itertools json keyword locale logging math
    matplotlib numbers numpy operator pandas platform pprint queue random re reprlib
    scipy secrets selectors shlex statistics string stringprep struct sympy textwrap
    threading time timeit token tokenize traceback typing typing_extensions unicodedata
    unittest uuid warnings weakref xml zlib zoneinfo
    """
)

# Dangerous by attribute name, whatever object it is looked up on.
ATTRIBUTES: dict[str, tuple[int, str]] = {
    "system": (7, "runs a shell command"),
    "popen": (7, "runs a shell command"),
    "Popen": (6, "runs a process"),
    "check_output": (6, "runs a process"),
    "check_call": (6, "runs a process"),
    "getoutput": (6, "runs a shell command"),
    "getstatusoutput": (6, "runs a shell command"),
    "create_subprocess_exec": (6, "runs a process"),
    "create_subprocess_shell": (7, "runs a shell command"),
    "fork": (5, "forks the process"),
    "forkpty": (6, "forks into a terminal"),
    "rmtree": (7, "deletes directory trees"),
    "unlink": (6, "deletes files"),
    "removedirs": (6, "deletes directories"),
    "rmdir": (5, "deletes directories"),
    "read_text": (4, "reads files"),
    "read_bytes": (4, "reads files"),
    "write_text": (5, "writes files"),
    "write_bytes": (5, "writes files"),
    "symlink_to": (4, "creates links"),
    "hardlink_to": (4, "creates links"),
    "environ": (3, "reads environment variables"),
    "__import__": (7, "reaches the import machinery"),
    "__subclasses__": (8, "walks subclasses to reach hidden classes"),
    "__globals__": (7, "reaches a function's globals"),
    "__builtins__": (6, "reaches the builtins"),
    "__code__": (6, "reaches or replaces code objects"),
    "__closure__": (5, "reaches closure cells"),
    "__bases__": (4, "walks the class hierarchy"),
    "__base__": (4, "walks the class hierarchy"),
    "__mro__": (4, "walks the class hierarchy"),
    "__class__": (2, "reaches an object's class"),
    "__dict__": (2, "reaches an object's namespace"),
    "__getattribute__": (4, "looks attributes up below getattr"),
    "__self__": (3, "reaches a bound method's owner"),
    "__func__": (3, "reaches a method's function"),
    "__loader__": (5, "reaches the module loader"),
    "__reduce__": (5, "overrides pickling (runs code when unpickled)"),
    "__reduce_ex__": (5, "overrides pickling (runs code when unpickled)"),
    "__traceback__": (4, "walks tracebacks to frames"),
    "f_globals": (7, "reads a frame's globals"),
    "f_locals": (5, "reads a frame's locals"),
    "f_builtins": (7, "reads a frame's builtins"),
    "f_back": (5, "walks up the call stack"),
    "tb_frame": (6, "reaches execution frames"),
    "gi_frame": (6, "reaches execution frames"),
    "cr_frame": (6, "reaches execution frames"),
    "ag_frame": (6, "reaches execution frames"),
    "co_code": (5, "reaches raw bytecode"),
    "_getframe": (6, "reaches execution frames"),
}
EXEC_ATTRIBUTE = re.compile(r"^(?:exec|spawn)[lv]p?e?$|^posix_spawnp?$")

# Dangerous by the resolved dotted name, where the last part alone is too common.
QUALIFIED: dict[str, tuple[int, str]] = {
    "os.remove": (6, "deletes files"),
    "os.rename": (4, "moves files"),
    "os.replace": (4, "moves files"),
    "os.chmod": (5, "changes file permissions"),
    "os.chown": (5, "changes file ownership"),
    "os.lchown": (5, "changes file ownership"),
    "os.kill": (6, "sends signals to processes"),
    "os.killpg": (6, "sends signals to processes"),
    "os.setuid": (7, "changes the process identity"),
    "os.setgid": (7, "changes the process identity"),
    "os.seteuid": (7, "changes the process identity"),
    "os.chroot": (6, "changes the root directory"),
    "os.truncate": (5, "truncates files"),
    "os.write": (3, "writes to file descriptors"),
    "os.open": (4, "opens files by descriptor"),
    "os.putenv": (3, "changes environment variables"),
    "os.getenv": (3, "reads environment variables"),
    "os.mkfifo": (4, "creates named pipes"),
    "os.symlink": (4, "creates links"),
    "os.link": (4, "creates links"),
    "os.listdir": (2, "lists directories"),
    "os.scandir": (2, "lists directories"),
    "os.walk": (2, "walks directory trees"),
    "shutil.move": (4, "moves files"),
    "shutil.copy": (3, "copies files"),
    "shutil.copyfile": (3, "copies files"),
    "shutil.copytree": (3, "copies directory trees"),
    "shutil.chown": (5, "changes file ownership"),
    "shutil.unpack_archive": (4, "unpacks archives onto disk"),
    "subprocess.run": (6, "runs a process"),
    "subprocess.call": (6, "runs a process"),
    "pty.spawn": (8, "spawns a shell in a terminal"),
    "socket.socket": (6, "opens a network socket"),
    "socket.create_connection": (6, "opens a network connection"),
    "socket.create_server": (6, "listens on a network port"),
    "socket.fromfd": (6, "opens a network socket"),
    "urllib.request.urlopen": (4, "fetches a URL"),
    "urllib.request.urlretrieve": (5, "downloads a URL to disk"),
    "http.client.HTTPConnection": (5, "opens an HTTP connection"),
    "http.client.HTTPSConnection": (5, "opens an HTTP connection"),
    "http.server.HTTPServer": (6, "serves on a network port"),
    "ftplib.FTP": (5, "opens an FTP connection"),
    "smtplib.SMTP": (5, "sends email"),
    "ctypes.CDLL": (8, "loads a native library"),
    "ctypes.cdll": (8, "loads a native library"),
    "ctypes.PyDLL": (8, "loads a native library"),
    "ctypes.pythonapi": (8, "calls the interpreter's C API"),
    "ctypes.memmove": (8, "writes raw memory"),
    "ctypes.string_at": (7, "reads raw memory"),
    "importlib.reload": (4, "reloads modules"),
    "runpy.run_path": (6, "runs another file"),
    "runpy.run_module": (6, "runs another module"),
    "code.interact": (5, "starts an interactive interpreter"),
    "marshal.loads": (7, "loads code objects"),
    "pickle.loads": (5, "unpickles data (can run code)"),
    "pickle.load": (5, "unpickles data (can run code)"),
    "types.CodeType": (6, "builds code objects"),
    "types.FunctionType": (5, "builds functions from code objects"),
    "sys.modules": (5, "reaches loaded modules through sys.modules"),
    "sys.settrace": (4, "installs a tracer"),
    "sys.setprofile": (4, "installs a profiler"),
    "gc.get_objects": (6, "walks every live object"),
    "gc.get_referrers": (6, "walks live objects"),
    "gc.get_referents": (6, "walks live objects"),
    "inspect.currentframe": (5, "reaches execution frames"),
    "inspect.stack": (5, "reaches execution frames"),
    "webbrowser.open": (3, "opens URLs"),
}
REQUESTS_CALL = re.compile(
    r"^(?:requests|httpx)\.(?:get|post|put|patch|delete|head|request|Session|Client)$"
)

# Builtins that matter when called (or merely referenced, e.g. ``e = eval``).
BUILTINS: dict[str, tuple[int, str]] = {
    "eval": (6, "evaluates a string as code (eval)"),
    "exec": (6, "runs a string as code (exec)"),
    "compile": (5, "compiles code at run time (compile)"),
    "__builtins__": (6, "reaches the builtins (__builtins__)"),
    "__loader__": (5, "reaches the module loader (__loader__)"),
    "globals": (3, "reads the global namespace (globals())"),
    "vars": (2, "reads a namespace (vars())"),
    "locals": (2, "reads the local namespace (locals())"),
    "breakpoint": (3, "starts a debugger (breakpoint())"),
}
GETATTR_FAMILY = frozenset({"getattr", "setattr", "delattr", "hasattr"})
SHELL_CALLS = frozenset(
    {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"}
)
PROCESS_CALLS = frozenset(
    {
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
    }
)
DECODERS = frozenset(
    {
        "b64decode",
        "b32decode",
        "b85decode",
        "a85decode",
        "decode",
        "fromhex",
        "decompress",
        "unhexlify",
        "loads",
    }
)
WRITE_MODE = re.compile(r"[wax+]")
MODE = re.compile(r"^[rwaxbtU+]{1,4}$")
ENCODED_BLOB = re.compile(r"^[A-Za-z0-9+/=\s]{200,}$|^(?:[0-9a-fA-F]{2}){100,}$")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TEXT_IMPORT = re.compile(r"\b(?:import|from)\s+([A-Za-z_][\w.]*)")
