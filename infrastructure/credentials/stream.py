"""Masking a run's output as it is written: chunk by chunk, at the speed output comes.

Output is the hot path, so ``OutputMasker`` does not run detect-secrets' plugins line
by line: it searches for the high-signal shapes (``shapes.HIGH_SIGNAL``: AWS key ids,
GitHub, Slack and Stripe tokens, a Slack webhook, a URL's password), a private key's
BEGIN line, an admin's patterns and the ``known`` raw values, one search each (why
not one alternation of them all: see ``shapes``). A keyword's value, a JSON web token
or a high-entropy string is not looked for in output: pass what must not show as
``known``.

A secret split across two chunks is still masked, at the price of holding some
output back until the next chunk (or ``flush``):

- the last line without its line end (``\\n`` or ``\\r``) is held, up to ``cap``
  characters (4 KiB, more with long known values): no shape spans lines, nor does a
  known value without a line break (one with them is held from where it may begin);
- of a line longer than ``cap``, all but the last ``tail`` characters are shown (the
  longest shape or known value): an unfinished one cannot start further back;
- a match that runs into what is held, or to the end of what has come, could still
  grow or meet another: it is held from its start (an admin's pattern's, at most
  16 × ``cap``);
- inside a private key nothing is shown after its BEGIN line but "…", and its END
  line when it comes: the body is dropped as it comes, so no key is held whole.

What this gives up: a prompt without a line end shows with the next chunk; an
admin's pattern that spans lines is found only within what is held; ``flush`` in
the middle of a run, rather than at its end, may show the first characters of a
secret still coming. A secret found once is not masked elsewhere in the output unless
it is ``known``.

Fed the same text in any chunks, the output is the same as fed in one; it is what
``mask_text`` gives for the text when its secrets are of the shapes above, each
between other characters than its own (a token's run of letters stops where its
shape's bound does, detect-secrets' may go on).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .shapes import (
    ELLIPSIS,
    HIGH_SIGNAL,
    KEY_BEGIN,
    KEY_END,
    KEY_MARKER,
    LONGEST_KEY_LINE,
    SHORTEST_KNOWN,
    Matcher,
    admin_matchers,
    known_matchers,
    mask,
    resolve,
    spans,
)

CAP = 4096


class OutputMasker:
    """Masks a stream of output chunks: ``feed`` each one, ``flush`` at the end."""

    def __init__(self, known: Iterable[str] = (), patterns: Sequence[str] = ()) -> None:
        values = [value for value in known if len(value) >= SHORTEST_KNOWN]
        self._matchers: tuple[Matcher, ...] = (
            *HIGH_SIGNAL,
            KEY_MARKER,
            *admin_matchers(patterns),
            *known_matchers(values),
        )
        self.tail = max(matcher.longest or 0 for matcher in self._matchers)
        self.cap = max(CAP, 2 * self.tail)
        self.hard = 16 * self.cap  # what an admin's pattern may hold back, at most
        self._multiline = [value for value in set(values) if "\n" in value or "\r" in value]
        self._held = ""
        self._in_key: str | None = None  # inside a private key: the line break it uses

    def feed(self, text: str) -> str:
        """What of the output so far can be shown, masked; the rest is held for later."""
        buf = self._held + text if self._held else text
        out: list[str] = []
        self._held = buf[self._run(buf, out, final=False) :]
        return "".join(out)

    def flush(self) -> str:
        """All that is held, masked: the output has ended."""
        buf, self._held = self._held, ""
        out: list[str] = []
        self._run(buf, out, final=True)
        self._in_key = None
        return "".join(out)

    def _run(self, buf: str, out: list[str], final: bool) -> int:
        """Append what can be shown of ``buf`` to ``out``; return where the held rest starts."""
        n = len(buf)
        pos = 0
        while True:
            if self._in_key is not None:
                end = KEY_END.search(buf, pos)
                if end is None:  # the body is dropped; an END line may be starting
                    return n if final else max(pos, n - LONGEST_KEY_LINE)
                out.append(self._in_key + end.group())
                self._in_key = None
                pos = end.end()
            cut = n if final else self._cut(buf, pos)
            for span in resolve(spans(buf, self._matchers, pos), buf):
                if span.match_start >= cut:
                    break
                if (
                    not final
                    and (
                        span.match_end > cut  # it may run into what is held
                        or span.match_end == n  # it could grow
                        or (span.block and span.match_end + 2 > n)  # its line break is coming
                    )
                    and n - span.match_start <= self.hard
                ):
                    cut = span.match_start
                    break
                out.append(buf[pos : span.start])
                pos = span.end
                if span.block and _opens_key(span.value):
                    self._in_key = "\\n" if buf.startswith("\\n", span.end) else "\n"
                    # the BEGIN line as it is, unless something ran into it
                    head = span.value if KEY_BEGIN.fullmatch(span.value) else ELLIPSIS
                    out += (head, self._in_key, ELLIPSIS)
                    break
                out.append(mask(span.value))
                cut = max(cut, span.match_end)
            if self._in_key is None:
                out.append(buf[pos:cut])
                return cut

    def _cut(self, buf: str, pos: int) -> int:
        """Where what can be shown ends: after the last line end, unless the line is long."""
        n = len(buf)
        line_end = max(buf.rfind("\n", pos), buf.rfind("\r", pos))
        cut = line_end + 1 if line_end >= 0 else pos
        if n - cut > self.cap:
            cut = n - self.tail
        for value in self._multiline:  # a known value that spans lines may have begun
            start = _partial_start(buf, value, max(pos, n - len(value) + 1))
            if start is not None:
                cut = min(cut, start)
        return max(cut, pos)


def _partial_start(buf: str, value: str, low: int) -> int | None:
    """The first position from ``low`` where the rest of ``buf`` is how ``value`` begins."""
    at = buf.find(value[0], low)
    while at != -1:
        if value.startswith(buf[at:]):
            return at
        at = buf.find(value[0], at + 1)
    return None


def _opens_key(value: str) -> bool:
    """Whether a private key begun in ``value`` is still open at its end: a BEGIN line
    that a known value ran into may come with the whole key, its END line too (then it
    is masked as one value, and what follows it is output again)."""
    begins = list(KEY_BEGIN.finditer(value))
    return not begins or KEY_END.search(value, begins[-1].end()) is None
