"""Finding credentials in text: detect-secrets' detectors, the shapes of ``shapes``, an admin's patterns.

detect-secrets' plugins are used without its settings machinery (which is global):
the regex-based ones through their ``denylist`` (their ``analyze_string`` returns a
regex's first group, which for some is only the prefix, ``ghp``), the keyword and
entropy ones through ``analyze_string``. What a plugin says on shape alone (a prefix
and a length) is taken as it is; what a heuristic says (a keyword before a value, a
quoted string's entropy) must also pass detect-secrets' own filters (no template, no
``$VAR``, no sequence, no UUID, no ``_id``, at least one letter) and ours: no
whitespace, and, where no quotes show it is a literal, not a word or a path
(``password: required``, ``token_file=/run/secrets/x`` are names, not secrets).

High-entropy strings are looked for only between quotes, as detect-secrets does, so
commands and prose (``rm -rf /srv/cache/*``, a container's name) are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from detect_secrets.filters import heuristic
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import (
    Base64HighEntropyString,
    HexHighEntropyString,
    HighEntropyStringsPlugin,
)
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from .shapes import (
    BASIC_AUTH,
    HIGH_SIGNAL,
    KEY_BLOCK,
    Matcher,
    admin_matchers,
    known_matchers,
    spans,
)

ASSIGNED = "password in an assignment"
HIGH_ENTROPY = "high-entropy string"


JWT = Matcher(
    "JSON web token",
    re.compile(r"eyJ[A-Za-z0-9_-]{1,512}\.eyJ[A-Za-z0-9_-]{1,4096}\.[A-Za-z0-9_-]{0,1024}"),
    check=JwtTokenDetector.is_formally_valid,
)


@dataclass(frozen=True)
class Found:
    """A credential found: what kind it is, and its raw value (kept out of ``repr``)."""

    kind: str
    value: str = field(repr=False)


def _plugin(kind: str, plugin: type, group: int = 0) -> list[Matcher]:
    return [Matcher(kind, regex, group=group) for regex in plugin.denylist]


PLUGINS = (
    Matcher("AWS access key id", AWSKeyDetector.denylist[0]),
    Matcher("AWS secret access key", AWSKeyDetector.denylist[1], group=1),
    *_plugin("GitHub token", GitHubTokenDetector),
    *_plugin("GitLab token", GitLabTokenDetector),
    *_plugin("Slack token", SlackDetector),
    *_plugin("Stripe key", StripeDetector),
    *_plugin("OpenAI key", OpenAIDetector),
    *_plugin("PyPI token", PypiTokenDetector),
    *_plugin("SendGrid key", SendGridDetector),
    *_plugin("Twilio key", TwilioKeyDetector),
    *_plugin("Discord bot token", DiscordBotTokenDetector),
    *_plugin("Telegram bot token", TelegramBotTokenDetector),
    *_plugin("Square OAuth secret", SquareOAuthDetector),
    *_plugin("Mailchimp key", MailchimpDetector),
    *_plugin("npm token", NpmDetector, group=1),
    Matcher("basic-auth password in a URL", BASIC_AUTH, group=1),
    Matcher(
        "JSON web token",
        JwtTokenDetector.denylist[0],
        check=JwtTokenDetector.is_formally_valid,
    ),
    JWT,  # the plugin's leaves the signature out
    Matcher("Azure storage key", re.compile(r"AccountKey=([A-Za-z0-9+/=]{88})"), group=1),
)

# A name that says its value is a secret. "pass" and "pwd" only as a whole word
# (``db_pass``, not ``compass``); the others anywhere at its end (``clientSecret``).
SECRET_NAME = (
    r"(?:[\w.-]*?(?:password|passwd|passphrase|secret|token|api_?key|access_?key"
    r"|private_?key|auth_?key|credentials?)|(?:[\w.-]*[_.-])?(?:pass|pwd))"
)
_SECRET_NAME = re.compile(SECRET_NAME, re.IGNORECASE)
_VALUE = (
    r"""(?:(?P<quote>["'`])(?P<quoted>[^\s"'`]+)(?P=quote)|(?P<bare>[^\s"'`,;&|<>(){}\[\]]+))"""
)
# name=value, name: value, name := value; the name's own quotes or a closing bracket allowed.
ASSIGNMENT = re.compile(
    rf"(?<![\w.-]){SECRET_NAME}[\"'\]]{{0,2}}[ \t]*(?::=|=|:)[ \t]*{_VALUE}", re.IGNORECASE
)
# --password value, --api-key value
FLAG = re.compile(
    r"(?<![\w-])--?[\w-]*?(?:password|passwd|pass|token|secret|api-?key|access-?key)"
    rf"[ \t]+(?!-){_VALUE}",
    re.IGNORECASE,
)
USER_FLAG = re.compile(r"""(?<![\w-])(?:-u|--user)[ \t]+(["']?)[^\s:"']+:([^\s"']+)\1""")
BEARER = re.compile(r"\b[Bb]earer[ \t]+([A-Za-z0-9._~+/=-]{16,})")
WORD = re.compile(r"[A-Za-z_][A-Za-z_.-]*")  # a word, an identifier, a dotted name

KEYWORD = KeywordDetector()
KEYWORD_HINTS = ("key", "pass", "pwd", "secret", "contras")  # of keyword.DENYLIST
NAME_HINTS = ("pass", "pwd", "secret", "token", "key", "credential")  # of SECRET_NAME, FLAG
SHORTEST_RANDOM = 16  # a quoted short commit hash is not a secret
ENTROPY: tuple[HighEntropyStringsPlugin, ...] = (
    Base64HighEntropyString(limit=4.5),
    HexHighEntropyString(limit=3.0),
)


def find(text: str, patterns: Sequence[str] = ()) -> list[Found]:
    """The credentials in ``text``, each value once, in the order they first appear.

    ``patterns`` are an admin's regexes (group 1 is the secret if there is one). A value
    only ever seen inside a longer one found (detect-secrets' 40 characters of a longer
    GitHub token) is left out: the longer one is what gets masked.
    """
    found: dict[str, Found] = {}
    for block in KEY_BLOCK.finditer(text):
        found.setdefault(block.group(), Found("private key", block.group()))
    rest = KEY_BLOCK.sub("\n", text) if found else text
    for span in spans(rest, (*HIGH_SIGNAL, *PLUGINS, *admin_matchers(patterns))):
        found.setdefault(span.value, Found(span.kind, span.value))
    for line in rest.splitlines():
        for kind, value in _heuristic(line):
            found.setdefault(value, Found(kind, value))
    return sorted(_unshadowed(text, list(found.values())), key=lambda f: text.find(f.value))


def named_secret(name: str, value: str) -> Found | None:
    """``value`` as a secret when its name says it is one (a JSON object's ``"password"``)."""
    if _SECRET_NAME.fullmatch(name) and _plausible(value, "", None) and _not_a_name(value):
        return Found(ASSIGNED, value)
    return None


def _heuristic(line: str) -> list[tuple[str, str]]:
    """What a keyword, a flag, a header or a quoted string's entropy says on one line."""
    out = []
    lowered = line.lower()  # the keyword regexes are slow: run them where they can match
    if any(hint in lowered for hint in KEYWORD_HINTS):
        keyword = [v for v in KEYWORD.analyze_string(line) if _plausible(v, line, KEYWORD)]
        if keyword and not heuristic.is_indirect_reference(line):
            out += [(ASSIGNED, value) for value in keyword]
    named = any(hint in lowered for hint in NAME_HINTS)
    for regex in (ASSIGNMENT, FLAG) if named else ():
        for match in regex.finditer(line):
            quoted = match.group("quoted")
            value = quoted or match.group("bare")
            # unquoted, it must not be a name, a call or an index (``token = uuid.uuid4().hex``)
            literal = quoted or (
                _not_a_name(value) and not line.startswith(("(", "["), match.end())
            )
            if literal and _plausible(value, line, None):
                out.append((ASSIGNED, value))
    for match in USER_FLAG.finditer(line):
        if _plausible(match.group(2), line, None):
            out.append(("basic-auth password in a command", match.group(2)))
    for match in BEARER.finditer(line):
        if _plausible(match.group(1), line, None) and _not_a_name(match.group(1)):
            out.append(("bearer token", match.group(1)))
    for plugin in ENTROPY:
        for value in plugin.analyze_string(line):
            if (
                len(value) >= SHORTEST_RANDOM
                and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit
                and _plausible(value, line, plugin)
                and not heuristic.is_potential_uuid(value)
            ):
                out.append((HIGH_ENTROPY, value))
    return out


def _plausible(value: str, line: str, plugin: BasePlugin | None) -> bool:
    """detect-secrets' filters of a heuristic's value, and no whitespace in it."""
    return not (
        len(value) < 4
        or any(character.isspace() for character in value)
        or heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
        or heuristic.is_not_alphanumeric_string(value)
        or heuristic.is_sequential_string(value)
        or (bool(line) and heuristic.is_likely_id_string(value, line, plugin))
    )


def _not_a_name(value: str) -> bool:
    """Not a word, an identifier, a path or a YAML tag: what a value with no quotes is when
    it is no secret (``password: required``, ``key_file=/etc/x``, ``password: !vault``)."""
    return not (WORD.fullmatch(value) or value.startswith(("/", "./", "../", "~/", "!")))


def _unshadowed(text: str, found: list[Found]) -> list[Found]:
    """``found`` but the values that occur only inside others."""
    if len(found) < 2:
        return found
    literals = known_matchers((f.value for f in found), shortest=1)
    shown, reached = set(), -1
    for span in sorted(spans(text, literals), key=lambda span: (span.start, -span.end)):
        if span.end > reached:
            shown.add(span.value)
        reached = max(reached, span.end)
    return [f for f in found if f.value in shown]
