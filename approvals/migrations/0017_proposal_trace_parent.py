"""A proposal keeps the trace context it was made in: later spans, in any process, join its trace."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0016_upstream_network")]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="trace_parent",
            field=models.CharField(blank=True, max_length=55, null=True),
        ),
    ]
