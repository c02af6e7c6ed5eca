from django.db import models


class LayerMessage(models.Model):
    """A message of the embedded channel layer, for processes that share only the database."""

    group = models.CharField(max_length=100, db_index=True)
    origin = models.CharField(max_length=32)
    payload = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.group} #{self.pk}"
