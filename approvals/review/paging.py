"""Pages of a long list whose size is counted only so far: what the history needs at a million rows.

Counting every row a filter matches (``COUNT(*)`` over the whole table) was
most of the history page's time at 10⁶ proposals. A ``CappedPaginator``
counts at most ``cap`` rows (a thousand: twenty pages): past it the list says "more than N" and offers
the pages up to it; the date filters reach further back.
"""

from __future__ import annotations

from functools import cached_property

from django.core.paginator import Paginator


class CappedPaginator(Paginator):
    CAP = 1_000  # 20 pages of 50: as far as people page; the dates reach further

    def __init__(self, object_list, per_page, cap: int | None = None, **kwargs):
        super().__init__(object_list, per_page, **kwargs)
        self.cap = cap or self.CAP

    @cached_property
    def counted(self) -> int:
        """The rows, counted up to one past the cap."""
        return self.object_list[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        """More rows match than were counted."""
        return self.counted > self.cap

    @cached_property
    def count(self) -> int:
        return min(self.counted, self.cap)
