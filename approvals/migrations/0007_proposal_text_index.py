"""A trigram index over proposals' summary and reason, for ``?q=`` on the lists."""

from django.db import migrations

from infrastructure.text_index import TextIndex

INDEX = TextIndex("approvals_proposal", ("summary", "reason"))


def create(apps, schema_editor):
    INDEX.create(schema_editor)


def drop(apps, schema_editor):
    INDEX.drop(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0006_fewer_indexes_to_write'),
    ]

    operations = [migrations.RunPython(create, drop)]
