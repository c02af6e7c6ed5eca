"""Django's HTTP side under ASGI, with a whole request in one hop to a thread.

Django's own ASGI handler runs its middleware in async mode. Airlock's stack
is synchronous (security, sessions, CSRF, authentication, messages, …), so
every hook of every middleware and then the view each hop to a thread and
back: some twenty hops, which made a bare JSON view cost 5.6 ms instead of
0.3 ms (``scripts/benchmark_api.py`` measures that floor). Here the chain is
built in sync mode and a request goes through it in one hop, as under WSGI,
on a pool of threads that keep their database connections between requests
(as WSGI servers' threads do) instead of a new thread and connection each.
The event loop keeps what only it does well: reading the body, sending the
answer, and holding long-polls without a thread.

Django's handler also sends ``request_started`` and closes the response
through thread-sensitive calls, which start a new thread for every request;
here both run in the request's own hop (a streaming response is closed on
the pool once sent), where their receivers (``close_old_connections``,
``reset_queries``) act on the connection the request used.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.urls import set_script_prefix

# Set on a request by this handler: a view may return at once with a
# ``long_poll`` coroutine function on its response instead of waiting itself.
WAITS_OFF_THREAD = "airlock_waits_off_thread"
# Also set: a coroutine function that runs a function on the request threads, whose
# connections are kept (a thread-sensitive call would make a thread and a connection).
RUNS_ON_POOL = "airlock_runs_on_pool"


class OneHopASGIHandler(ASGIHandler):
    def __init__(self, threads: int):
        super().__init__()
        executor = ThreadPoolExecutor(threads, thread_name_prefix="request")

        def on_pool(function):
            return sync_to_async(function, thread_sensitive=False, executor=executor)

        self._respond = on_pool(self._respond_on_thread)
        self._close = on_pool(lambda response: response.close())  # sends request_finished
        self._finished = on_pool(lambda: signals.request_finished.send(sender=self.__class__))
        self._run = on_pool(lambda function: function())

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def handle(self, scope, receive, send):
        """Django's ``ASGIHandler.handle``, with no thread made for the request."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await self._close(error_response)
            return

        async def process_request():
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the answer was sent
            return response

        # A client that disconnects cancels the request (a long-poll stops waiting).
        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        processing = asyncio.create_task(process_request())
        await asyncio.wait([listening, processing], return_when=asyncio.FIRST_COMPLETED)
        for task in (listening, processing):
            if not task.done():
                task.cancel()
            try:
                await task
            except (asyncio.CancelledError, RequestAborted):
                pass
            except AssertionError:
                body_file.close()
                raise
        if processing.cancelled():
            await self._finished()
        elif processing.result().streaming:
            await self._close(processing.result())  # its content was open until sent
        body_file.close()

    async def get_response_async(self, request):
        setattr(request, WAITS_OFF_THREAD, True)
        setattr(request, RUNS_ON_POOL, self._run)
        response = await self._respond(request)
        # Woken while it waited: the view reads again, and answers or waits on.
        while (long_poll := getattr(response, "long_poll", None)) is not None and await long_poll():
            response = await self._respond(request)
        return response

    def _respond_on_thread(self, request):
        # What a WSGI thread does around a request, for this one's connection:
        # replace it if broken or past CONN_MAX_AGE, else keep it.
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        try:
            response = self.get_response(request)
            if not response.streaming:
                response.close()  # content in hand: request_finished here, not in another hop
            return response
        finally:
            close_old_connections()


def get_asgi_application() -> OneHopASGIHandler:
    """Like ``django.core.asgi.get_asgi_application``, with the one-hop handler."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler(threads=int(os.environ.get("ASGI_THREADS") or 32))
