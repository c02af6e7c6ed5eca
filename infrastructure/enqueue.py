"""The one function that puts a task on the broker."""

from __future__ import annotations

from celery import current_app


def enqueue(task: str, *args, **options) -> None:
    """Send the task registered as ``task`` with ``args``; ``options`` as Celery's ``apply_async``.

    By name, so that a workflow never imports the tasks module that calls it
    back (each app's tasks take a primary key and call one service). Tasks
    are registered when their app is ready, so an unknown name raises at
    once (``NotRegistered``). Under ``task_always_eager`` the task runs here.
    Raises what the broker raises: the caller decides what a failed enqueue means.
    """
    current_app.tasks[task].apply_async(args=list(args), **options)
