"""The channel layer's table, taken over from the console app with its rows.

It was ``console.LayerMessage``; the table keeps its name, so this migration
changes the migration state only (and the content type's app label), never
the schema or the data. ``console.0002`` removes the old model from the state.
"""

from django.db import migrations, models


def move_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    taken = ContentType.objects.filter(app_label="infrastructure", model="layermessage").exists()
    if not taken:
        ContentType.objects.filter(app_label="console", model="layermessage").update(
            app_label="infrastructure"
        )


def restore_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    taken = ContentType.objects.filter(app_label="console", model="layermessage").exists()
    if not taken:
        ContentType.objects.filter(app_label="infrastructure", model="layermessage").update(
            app_label="console"
        )


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("console", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="LayerMessage",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("group", models.CharField(db_index=True, max_length=100)),
                        ("origin", models.CharField(max_length=32)),
                        ("payload", models.TextField()),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                    ],
                    options={"db_table": "console_layermessage"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
