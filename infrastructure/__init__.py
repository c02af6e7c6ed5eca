"""Airlock's own shared infrastructure, below every app: what moves data between its processes.

Owns the database backends (``sqlite``: writers queued, the log checkpointed beside
them; ``postgres``: pooled connections checked cheaply), queries compiled once
(``prepared``), substring search over a table's text on either database
(``text_index``), the ids a URL takes (``converters``: ``<id:…>``, what a 64-bit
key holds), the append order of append-only tables (``appends``), the
embedded deployment's wake-ups (``doorbell``), Celery broker (``broker``) and
channel layer (``channel_layers``, with its one table), the one function that
puts a task on the broker (``enqueue``), Django's HTTP side under ASGI
(``handler``), per-process objects (``per_process``), files written to be trusted
later (``files``), the REST plumbing
every API shares (``rest``: the error contract, negotiation, serializers) and
either deployment's backups (``backups/``: SQLite's online copy or
``pg_dump`` of a snapshot, checked restores, verification in a scratch place,
the scheduled ones; ``manage.py backup`` and ``restore``) and the archive
that retention fills (``archive/``: checked day files in a directory or an
S3-compatible bucket).

Also owns traces (``tracing/``: OpenTelemetry set up once per process when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, span helpers that cost a call when it is not).

Also owns credentials in text (``credentials/``): found with detect-secrets' plugins
and an admin's patterns, masked in a text, in a JSON-able object and in output as it
streams (a secret split between two chunks too), and originals sealed at rest with
Fernet under ``CREDENTIALS_KEY``, a key the database does not hold.

Knows nothing of proposals, executions or people: it may import Django and
third-party libraries only, never another Airlock package. (The hosts and
containers that agents act on are not this; they are ``executions.actions``.)
"""
