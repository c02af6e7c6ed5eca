"""A server error fails the test during which it happened, whether or not the test looked.

A 500 the test did not ask about is still a bug: a page whose answer was ignored, a
fixture's request, a background thread's. Django logs every 5xx answer at ERROR on
``django.request`` (``django.server`` for runserver's), with its status in the record;
this plugin collects those records during each test (setup, call, teardown) and fails
the test with them, and an MCP tool that failed inside Airlock (the MCP's 500, logged by
``approvals.agents.mcp.server``) with them. The ``serve`` processes that tests start
(``tests.serving``) log to a file: the lines each running server wrote during the test
are read the same way, those and an exception that escaped the ASGI application
(uvicorn's "Exception in ASGI application", a websocket without a route among them).

A test that causes one on purpose (a 503 while the database is away) says so:
``@pytest.mark.server_error_expected("the database is away")``.

Registered from ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import logging
import threading

import pytest

from tests import serving

MARKER = "server_error_expected"
LOGGERS = ("django.request", "django.server", "approvals.agents.mcp.server")


class _Collector(logging.Handler):
    """The 5xx records logged in this process since the last ``take()`` (any thread)."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self._records: list[logging.LogRecord] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "status_code", 500) >= 500:
            with self._lock_records:
                self._records.append(record)

    def take(self) -> list[str]:
        with self._lock_records:
            records, self._records = self._records, []
        return [_described(record) for record in records]


def _described(record: logging.LogRecord) -> str:
    text = f"{record.name}: {record.getMessage()}"
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        text += f" ({type(error).__name__}: {error})"
    return text


_collector = _Collector()


def _listen() -> None:
    """Put the collector on the loggers, again if needed: Django's logging configuration
    (``django.setup()``, a test's) takes the handlers off the loggers it names and their
    children."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _collector not in logger.handlers:
            logger.addHandler(_collector)


def pytest_unconfigure(config):
    for name in LOGGERS:
        logging.getLogger(name).removeHandler(_collector)


def _server_errors() -> list[str]:
    return _collector.take() + [f"serve: {line}" for line in serving.unread_server_errors()]


def _fail_on_server_errors(item: pytest.Item, when: str) -> None:
    found = _server_errors()
    if found and item.get_closest_marker(MARKER) is None:
        shown = "\n  ".join(found[:20])
        pytest.fail(
            f"a server error was logged during the test's {when} (mark the test "
            f"@pytest.mark.{MARKER}(why) if it causes one on purpose):\n  {shown}",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _listen()
    _server_errors()  # what came before (another test's stragglers) is no one's to fail on
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        result = yield
    except BaseException:
        _server_errors()  # the test failed already; its own report says why
        raise
    _fail_on_server_errors(item, "setup or call")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    _fail_on_server_errors(item, "teardown")
    return result
