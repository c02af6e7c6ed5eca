"""The overview's kept tallies gained the waits per team: forget the ones kept before, so
each settled day is counted again, with them."""

from django.db import migrations


def forget_tallies(apps, schema_editor):
    apps.get_model("approvals", "OverviewDay").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0014_risk_lines")]

    operations = [migrations.RunPython(forget_tallies, migrations.RunPython.noop)]
