"""Moving the channel layer's model from ``console`` to ``infrastructure`` keeps every row.

The database is first put back where the earlier code left it (console's
migration 0001 only, ``console.LayerMessage`` in the state), a row is written
through that state's model, and the migrations are run forward as an upgrade
would run them.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from infrastructure.models import LayerMessage

OLD = [("console", "0001_initial"), ("infrastructure", None)]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_a_database_made_before_the_move_keeps_its_rows_and_content_type():
    from django.contrib.contenttypes.models import ContentType

    try:
        executor = migrate(OLD)
        old_apps = executor.loader.project_state(OLD[:1]).apps
        OldMessage = old_apps.get_model("console", "LayerMessage")
        kept = OldMessage.objects.create(group="queue", origin="abc", payload='{"n": 1}')
        # As the earlier code left it: the content type under the console app.
        ContentType.objects.filter(app_label="infrastructure", model="layermessage").delete()
        ContentType.objects.get_or_create(app_label="console", model="layermessage")

        migrate(latest())

        row = LayerMessage.objects.get(pk=kept.pk)
        assert (row.group, row.origin, row.payload) == ("queue", "abc", '{"n": 1}')
        ContentType.objects.clear_cache()
        assert ContentType.objects.get_for_model(LayerMessage).app_label == "infrastructure"
        assert not ContentType.objects.filter(app_label="console", model="layermessage").exists()
    finally:
        migrate(latest())


@pytest.mark.django_db(transaction=True)
def test_the_move_is_reversible_without_touching_the_table():
    try:
        LayerMessage.objects.create(group="g", origin="o", payload="p")
        executor = migrate(OLD)
        OldMessage = executor.loader.project_state(OLD[:1]).apps.get_model(
            "console", "LayerMessage"
        )
        assert OldMessage.objects.filter(group="g", payload="p").count() == 1
    finally:
        migrate(latest())
    assert LayerMessage.objects.filter(group="g", payload="p").count() == 1
