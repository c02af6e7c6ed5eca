"""What the warm pool holds: started containers (``Warm``), grouped by ``Shape``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..base import Limits
from .channel import RunnerChannel


@dataclass(frozen=True)
class Shape:
    """The container-level limits; runs with the same shape can share a container."""

    memory_mb: int
    max_processes: int
    disk_mb: int
    network: bool

    @classmethod
    def of(cls, limits: Limits) -> Shape:
        return cls(limits.memory_mb, limits.max_processes, limits.disk_mb, limits.network)


@dataclass
class Warm:
    """A started container with its runner ready."""

    id: str
    channel: RunnerChannel
    shape: Shape
    guarded: bool = False  # the runner is out of the runs' reach (not dumpable)
    runs: int = 0
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
