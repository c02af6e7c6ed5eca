"""The secret scan CI runs (scripts/scan_secrets.py): it passes on the tree and fails on a plant."""

from __future__ import annotations

import random
import shutil
import string
import subprocess
import sys

from tests.serving import ROOT

SCAN = [sys.executable, str(ROOT / "scripts" / "scan_secrets.py")]


def random_text(alphabet: str, length: int, seed: int) -> str:
    return "".join(random.Random(seed).choices(alphabet, k=length))


# Made at run time, so that this file holds none of them.
UPPER, MIXED = string.ascii_uppercase + string.digits, string.ascii_letters + string.digits
PLANTED = {
    "deploy.py": f'AWS_ACCESS_KEY_ID = "AKIA{random_text(UPPER, 16, 1)}"\n',
    "notes.md": f"token: ghp_{random_text(MIXED, 36, 2)}\n",
    "id_deploy": "-----BEGIN "
    + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    "secret_key": random_text(MIXED + "-_", 64, 3) + "\n",
}


def scan(root) -> subprocess.CompletedProcess:
    return subprocess.run([*SCAN, "--root", str(root)], capture_output=True, text=True, timeout=300)


def repository(tmp_path, files: dict[str, str]):
    """A git work tree with the reviewed baseline and ``files``, all tracked."""
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    shutil.copy(ROOT / ".secrets.baseline", tree / ".secrets.baseline")
    (tree / "app.py").write_text('GREETING = "hello"\n')
    for name, text in files.items():
        (tree / name).write_text(text)
    # -f: secret_key is ignored (.gitignore) where this repository's rules apply
    subprocess.run(["git", "-C", str(tree), "add", "-f", "."], check=True)
    return tree


def test_the_tree_as_committed_holds_no_secret():
    done = scan(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[secrets] none in" in done.stdout


def test_it_fails_on_each_planted_key_token_and_private_key(tmp_path):
    clean = scan(repository(tmp_path / "clean", {}))
    assert clean.returncode == 0, clean.stdout + clean.stderr

    found = scan(repository(tmp_path / "planted", PLANTED))
    assert found.returncode == 1
    lines = found.stdout.splitlines()
    assert "deploy.py:1: AWS Access Key (not in .secrets.baseline)" in lines
    assert "notes.md:1: GitHub Token (not in .secrets.baseline)" in lines
    assert "id_deploy:1: Private Key (not in .secrets.baseline)" in lines
    assert "secret_key:1: a file a data dir holds (its key or database)" in lines
    assert "4 secret(s) in tracked files" in found.stderr


def test_an_unreviewed_baseline_entry_fails(tmp_path):
    tree = repository(tmp_path, {})
    text = (tree / ".secrets.baseline").read_text()
    assert '"is_secret": false' in text
    (tree / ".secrets.baseline").write_text(
        text.replace('"is_secret": false', '"is_secret": true', 1)
    )
    found = scan(tree)
    assert found.returncode == 1
    assert "not marked reviewed" in found.stdout
