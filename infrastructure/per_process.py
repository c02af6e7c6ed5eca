"""One object per process, made on first use and made again in a forked child."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """``PerProcess(make)()`` is this process's ``make()``.

    For what holds threads, connections or loops: a forked child has none of
    its parent's threads, so it makes its own. Once made, a call takes no lock.
    """

    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._made: tuple[int, T] | None = None  # (pid, object), replaced whole
        self._lock = threading.Lock()

    def __call__(self) -> T:
        made, pid = self._made, os.getpid()
        if made is None or made[0] != pid:
            with self._lock:
                made = self._made
                if made is None or made[0] != pid:
                    made = self._made = (pid, self._make())
        return made[1]
