from django.db import models


class LayerMessage(models.Model):
    """A message of the embedded channel layer, for processes that share only the database."""

    group = models.CharField(max_length=100, db_index=True)
    origin = models.CharField(max_length=32)
    payload = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        # The table keeps the name it was created with in the console app: moving the
        # model between apps changed no schema (see migrations/0001_layer_message.py).
        db_table = "console_layermessage"

    def __str__(self) -> str:
        return f"{self.group} #{self.pk}"
