"""What a credential looks like, and what its masked form is.

The high-signal shapes (``HIGH_SIGNAL``) are the ones both ``find`` and the output
stream look for. Each is one regex with a literal prefix (``AKIA``, ``gh``, ``xox``,
``://``) or behind a literal gate (``k_live_``): CPython's ``re`` searches for a literal
prefix at about a gigabyte a second, and loses that once alternatives start with
different characters, so an alternation of all of them runs at a tenth of the speed
of the shapes searched one after the other. Each is bounded (``longest``), so the
stream knows how much of a chunk's tail could still be the start of one. A private
key is its block: the BEGIN line (``KEY_BEGIN``) to the first END line (``KEY_END``),
or to the end of the text when none follows.

``spans`` and ``resolve`` are the one way every caller turns matches into replacements:
all candidates, leftmost first, the longest at the same start, and overlapping ones
merged (two secrets run together are masked as one, rather than one left to show).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

# A known value shorter than this is too likely to be ordinary text to be replaced everywhere.
SHORTEST_KNOWN = 6
ELLIPSIS = "…"


@dataclass(frozen=True)
class Matcher:
    """One shape: its label, its regex, which group is the secret, and what else it must pass."""

    kind: str
    regex: re.Pattern[str]
    group: int = 0
    longest: int | None = None  # the longest match, when bounded (None: an admin's pattern)
    check: Callable[[str], bool] | None = None
    block: bool = False  # a private key's BEGIN line: the block that follows is the secret
    # Search again from each match's second character, not its end: a greedy shape may
    # run into the next secret (two tokens back to back), which must be found too.
    rescan: bool = False
    gate: str = ""  # a substring without which there is no match: looked for first
    literal: str = ""  # a known value: searched for with str.find, faster than re


class Span(NamedTuple):
    kind: str
    start: int  # the secret's
    end: int
    value: str
    match_start: int  # the whole match's (a password's URL, a key's BEGIN line)
    match_end: int
    block: bool


# [ ]: this file is scanned for secrets too, and a BEGIN line is one.
KEY_BEGIN = re.compile(
    r"----(?:-BEGIN (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
    r"| BEGIN SSH2 ENCRYPTED PRIVATE[ ]KEY ----)"
)
KEY_END = re.compile(
    r"----(?:-END (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
    r"| END SSH2 ENCRYPTED PRIVATE[ ]KEY ----)"
)
KEY_BLOCK = re.compile(rf"(?:{KEY_BEGIN.pattern})[\s\S]*?(?:{KEY_END.pattern}|\Z)")
LONGEST_KEY_LINE = 64

# detect-secrets' basic_auth RESERVED_CHARACTERS + SUB_DELIMITER_CHARACTERS (RFC 3986),
# spelled out: the streams' shapes load without detect-secrets (its import is 0.2-0.4 s).
_URL_RESERVED = re.escape(":/?#[]@" + "!$&'()*+,;=")
# detect-secrets' BasicAuthDetector, with bounds.
BASIC_AUTH = re.compile(rf"://[^{_URL_RESERVED}\s]{{1,256}}:([^{_URL_RESERVED}\s]{{1,256}})@")

HIGH_SIGNAL = (
    Matcher(
        "AWS access key id",
        re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}"),
        longest=20,
        rescan=True,
    ),
    Matcher(
        "GitHub token", re.compile(r"gh[opsur]_[A-Za-z0-9_]{36,251}"), longest=255, rescan=True
    ),
    Matcher(
        "GitHub token", re.compile(r"github_pat_[A-Za-z0-9_]{22,244}"), longest=255, rescan=True
    ),
    Matcher(
        "Slack token",
        re.compile(r"xox[abposr]-(?:[0-9]{1,20}-){1,4}[0-9A-Za-z]{1,160}"),
        longest=5 + 4 * 21 + 160,
        rescan=True,
    ),
    Matcher(
        "Slack webhook",
        re.compile(
            r"https://hooks\.slack\.com/services/(T[A-Za-z0-9_]{1,64}/B[A-Za-z0-9_]{1,64}"
            r"/[A-Za-z0-9_]{1,64})"
        ),
        group=1,
        longest=34 + 3 * 65,
        rescan=True,
        gate="hooks.slack.com",
    ),
    Matcher(
        "Stripe key",
        re.compile(r"[rs]k_live_[0-9A-Za-z]{24,247}"),
        longest=255,
        rescan=True,
        gate="k_live_",
    ),
    Matcher(
        "basic-auth password in a URL",
        BASIC_AUTH,
        group=1,
        longest=3 + 256 + 1 + 256 + 1,
        rescan=True,
    ),
)
KEY_MARKER = Matcher("private key", KEY_BEGIN, longest=LONGEST_KEY_LINE, block=True, rescan=True)


def mask(value: str) -> str:
    """``value``'s masked form: a few leading characters, then "…".

    At most a quarter of it and at most 4 are kept (``AKIA…``, ``ghp_…``); under 8
    characters, none. A private key keeps its BEGIN and END lines around "…" (the line
    break written as it was: a real one, or ``\\n`` in an escaped string).
    """
    begin = KEY_BEGIN.match(value)
    if begin is not None:
        between = "\\n" if value.startswith("\\n", begin.end()) else "\n"
        end = KEY_END.search(value, begin.end())
        tail = between + end.group() if end is not None else ""
        return begin.group() + between + ELLIPSIS + tail
    keep = 0 if len(value) < 8 else min(4, len(value) // 4)
    return value[:keep] + ELLIPSIS


def admin_matchers(patterns: Iterable[str]) -> tuple[Matcher, ...]:
    """An admin's regexes: a match's group 1 is the secret if it has groups, else the match.

    A pattern that does not compile raises ``re.error``: check them where they are saved.
    """
    matchers = []
    for pattern in patterns:
        regex = re.compile(pattern)
        matchers.append(Matcher(f"secret pattern {pattern}", regex, group=1 if regex.groups else 0))
    return tuple(matchers)


def known_matchers(
    values: Iterable[str], kind: str = "known value", shortest: int = SHORTEST_KNOWN
) -> tuple[Matcher, ...]:
    """Literal values (those under ``shortest`` characters ignored), each searched for as is."""
    unique = sorted({value for value in values if len(value) >= shortest}, key=len)
    return tuple(
        Matcher(kind, _NEVER, longest=len(value), literal=value) for value in reversed(unique)
    )


_NEVER = re.compile(r"(?!)")


def spans(text: str, matchers: Iterable[Matcher], pos: int = 0) -> list[Span]:
    """Every match of every matcher in ``text[pos:]`` (overlapping ones too), unresolved."""
    found = []
    for matcher in matchers:
        if matcher.literal:
            found += _occurrences(matcher, text, pos)
            continue
        if matcher.gate and text.find(matcher.gate, pos) < 0:
            continue
        group, check = matcher.group, matcher.check
        for match in _matches(matcher, text, pos):
            start, end = match.span(group)
            if start == end or start < 0:
                continue
            value = match.group(group)
            if check is not None and not check(value):
                continue
            found.append(
                Span(matcher.kind, start, end, value, match.start(), match.end(), matcher.block)
            )
    return found


def _occurrences(matcher: Matcher, text: str, pos: int) -> list[Span]:
    value, kind = matcher.literal, matcher.kind
    found = []
    at = text.find(value, pos)
    while at >= 0:
        end = at + len(value)
        found.append(Span(kind, at, end, value, at, end, False))
        at = text.find(value, end)
    return found


def _matches(matcher: Matcher, text: str, pos: int) -> Iterator[re.Match[str]]:
    if not matcher.rescan:
        yield from matcher.regex.finditer(text, pos)
        return
    match = matcher.regex.search(text, pos)
    while match is not None:
        yield match
        match = matcher.regex.search(text, match.start() + 1)


def resolve(candidates: list[Span], text: str) -> list[Span]:
    """The spans to replace, in order: overlapping ones merged into one, so none shows.

    A merged span's kind is its first one's; it is a block if one of its spans is.
    """
    merged: list[Span] = []
    for span in sorted(candidates, key=lambda span: (span.start, -span.end)):
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            end = max(last.end, span.end)
            merged[-1] = last._replace(
                end=end,
                value=text[last.start : end],
                match_end=max(last.match_end, span.match_end),
                block=last.block or span.block,
            )
        else:
            merged.append(span)
    return merged
