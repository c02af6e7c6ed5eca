from __future__ import annotations

import select

import psycopg
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def check_connection(conn: psycopg.Connection) -> None:
    """psycopg's pool check, run only if the idle connection's socket has something to read."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    if poller.poll(0):
        ConnectionPool.check_connection(conn)


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        # Django gives the pool psycopg's check (CONN_HEALTH_CHECKS); this one
        # replaces it. Should psycopg_pool keep it elsewhere, its own stays.
        if pool is not None and getattr(pool, "_check", None) is ConnectionPool.check_connection:
            pool._check = check_connection
        return pool
