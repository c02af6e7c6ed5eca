"""The overview's tallies of settled days: figures that no longer change, kept once counted."""

from django.db import models


class OverviewDay(models.Model):
    """One local day's overview figures, counted once the day had settled: it ended more
    than ``overview.SETTLED_AFTER`` ago and none of its proposals was still waiting.

    Nothing changes a settled day's figures but retention (which forgets the
    tallies) and proposals written into the past (``seed_history``, the same);
    ``data`` holds counts by outcome, risk score, agent id and action, and the
    seconds people took to decide, for the percentiles (in all and per team of
    the review routes).
    """

    day = models.DateField()
    time_zone = models.CharField(max_length=64)
    data = models.JSONField()
    counted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "approvals"
        constraints = [
            models.UniqueConstraint(fields=["time_zone", "day"], name="overview_day_once")
        ]

    def __str__(self) -> str:
        return f"overview of {self.day} ({self.time_zone})"
