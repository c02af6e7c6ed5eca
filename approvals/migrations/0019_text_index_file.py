"""The proposals' text index moves out of the database into a file of its own.

Its merges ran inside the writing transactions, under the database's writer
lock (``infrastructure.text_index.sqlite``). The database keeps only notes of
what changed; the index is built again from the rows by the next catch-up,
and searches read the table until then.
"""

from django.db import migrations

from infrastructure.text_index import TextIndex

INDEX = TextIndex("approvals_proposal", ("summary", "reason"))


def create(apps, schema_editor):
    INDEX.create(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0018_upstream_image"),
    ]

    operations = [migrations.RunPython(create, migrations.RunPython.noop)]
