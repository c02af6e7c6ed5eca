"""``LayerMessage`` now belongs to the infrastructure app; its table and rows stay as they are."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("console", "0001_initial"),
        ("infrastructure", "0001_layer_message"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="LayerMessage")],
            database_operations=[],
        ),
    ]
