"""Text checks every language shares: Unicode look-alikes and sensitive paths.

Code is normalised to NFKC before any analysis, so full-width or other
compatibility letters (``ｉｍｐｏｒｔ ｏｓ``) read as what they stand for.
That such letters were used to spell a dangerous word is a finding of its own:
nobody writes ``ｏｓ`` by accident.
"""

from __future__ import annotations

import re
import unicodedata

from approvals.policy.risk.base import Finding


def name_set(text: str) -> frozenset[str]:
    """A set of names written as whitespace-separated text (easier to read than a literal)."""
    return frozenset(text.split())


# Words worth disguising: module, builtin, attribute and command names the
# analysers flag. A look-alike spelling of one of them is high risk.
DISGUISED_WORDS = name_set(
    """
    import from require eval exec compile open getattr setattr globals builtins
    os sys subprocess socket shutil ctypes importlib pty pathlib system popen
    spawn rmtree unlink remove __import__ __builtins__ __subclasses__ __globals__
    __class__ __bases__ __code__ child_process fs net http https vm process env
    Function constructor rm sudo su curl wget sh bash zsh dash nc ncat netcat dd
    mkfs chmod chown kill pkill killall shutdown reboot python python3 perl node
    base64 printf echo tcp dev etc passwd shadow
    """
)

_WORD = re.compile(r"\w+")

# Paths whose contents are secrets, or whose mere presence gives control.
_SECRET_PATH = re.compile(
    r"/etc/(?:shadow|gshadow|sudoers)|\.ssh/|\bid_(?:rsa|dsa|ecdsa|ed25519)\b"
    r"|/(?:var/)?run/docker\.sock|/proc/(?:self|\d+)/(?:environ|mem|maps|root)"
    r"|/dev/k?mem\b|\.aws/credentials|\.kube/config|\.netrc\b|\.git-credentials"
    r"|\.docker/config\.json"
)
# Directories that belong to the system: reading them is mostly fine, writing never is.
_SYSTEM_PATH = re.compile(
    r"^(?:/etc|/boot|/root|/usr|/bin|/sbin|/lib|/lib64|/opt|/var/lib|/var/spool"
    r"|/var/log|/proc|/sys|/dev)(?:/|$)"
)
_ACCOUNT_FILES = re.compile(r"^/etc/(?:passwd|group|hosts\.allow|hosts\.deny|crontab)$")
# Devices that hold filesystems or memory; writing to them destroys data.
_BLOCK_DEVICE = re.compile(r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|md|dm-|loop|disk|mapper/|k?mem\b)")
_HARMLESS_DEVICE = re.compile(r"^/dev/(?:null|zero|stdout|stderr|stdin|tty|fd/\d+|urandom|random)$")


def normalise(code: str) -> str:
    """NFKC form of the code (a no-op for ASCII, which is almost every script)."""
    return code if code.isascii() else unicodedata.normalize("NFKC", code)


def lookalike_findings(code: str) -> list[Finding]:
    """Findings for words spelled with compatibility letters that NFKC turns into ASCII."""
    if code.isascii():
        return []
    findings: list[Finding] = []
    first_example = ""
    for match in _WORD.finditer(code):
        word = match.group()
        if word.isascii():
            continue
        plain = unicodedata.normalize("NFKC", word)
        if plain == word or not plain.isascii():
            continue  # real non-Latin text, not a disguise
        if plain in DISGUISED_WORDS:
            findings.append(
                Finding(7, f"spells {plain!r} with look-alike Unicode letters ({word})")
            )
        elif not first_example:
            first_example = f"{word} → {plain}"
    if first_example:
        findings.append(
            Finding(5, f"uses look-alike Unicode letters that stand for ASCII ({first_example})")
        )
    return findings


def short(text: str, limit: int = 60) -> str:
    """A snippet fit for a reason: one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def is_secret_path(text: str) -> bool:
    return bool(_SECRET_PATH.search(text))


def is_system_path(path: str) -> bool:
    return bool(_SYSTEM_PATH.match(path))


def is_block_device(path: str) -> bool:
    return bool(_BLOCK_DEVICE.match(path))


def is_harmless_device(path: str) -> bool:
    return bool(_HARMLESS_DEVICE.match(path))


def mentioned_path_findings(text: str) -> list[Finding]:
    """Findings for a string literal that names a secret or system path."""
    if "/" not in text and "id_" not in text:
        return []
    if is_secret_path(text):
        return [Finding(7, f"touches a secret-bearing path ({short(text)})")]
    stripped = text.strip()
    if _ACCOUNT_FILES.match(stripped):
        return [Finding(4, f"touches the account file {stripped}")]
    if is_system_path(stripped):
        return [Finding(4, f"touches the system path {short(stripped)}")]
    return []
