"""A target on another host, read by that host's worker while the page waits.

A host service lives where its host actions run: on that host's workers
(the ``host.<name>`` queue). ``ask`` puts a read on that queue and waits for
the answer on a Redis list of its own (one ``BLPOP``, no polling); the worker
runs the same read-only reader there and pushes the state back (``answer``).
The read expires with the page's deadline, so a worker busy with a long run
never reads for a page that has given up; the answer's list expires soon
after, so nothing is left behind.

Only where hosts share a broker and Redis (``REDIS_URL``): the embedded
deployment's one host reads its own services directly.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict
from datetime import datetime

import redis
from django.conf import settings

from executions.actions.host import host_queue
from infrastructure.enqueue import enqueue
from infrastructure.per_process import PerProcess

from .base import Fact, TargetState

log = logging.getLogger(__name__)

READ_TASK = "executions.tasks.read_target"
ANSWER_KEEP_SECONDS = 30  # an answer nobody took is gone after this
WORKER_SHARE = 0.5  # of the seconds the read is given, what the worker's own read may take

_redis: PerProcess[redis.Redis] = PerProcess(
    lambda: redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=5)
)


def possible() -> bool:
    """Whether other hosts' workers can be asked here (a shared broker and Redis)."""
    return bool(settings.REDIS_URL)


def ask(host: str, kind: str, parameters: dict, seconds: float, blank: TargetState) -> TargetState:
    """The state ``host``'s worker reads of the ``kind`` target ``parameters`` name, or "unknown"."""
    key = f"airlock:target-state:{uuid.uuid4().hex}"
    try:
        enqueue(
            READ_TASK,
            kind,
            parameters,
            round(seconds * WORKER_SHARE, 3),
            key,
            queue=host_queue(host),
            expires=seconds,
        )
        popped = _redis().blpop([key], timeout=seconds)
    except Exception as exc:
        log.warning("asking %s's worker for %s failed: %s", host, blank.name, exc)
        return blank.unknown(f"{host}'s worker could not be asked: {exc}"[:300])
    if popped is None:
        return blank.unknown(f"{host}'s worker did not answer within {seconds:g} s")
    return loaded(json.loads(popped[1]))


def answer(key: str, state: TargetState) -> None:
    """Push ``state`` to the page waiting on ``key`` (the worker's side of ``ask``)."""
    client = _redis()
    with client.pipeline() as pipe:
        pipe.rpush(key, json.dumps(asdict(state), default=_moment))
        pipe.expire(key, ANSWER_KEEP_SECONDS)
        pipe.execute()


def _moment(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a state's value")


def loaded(data: dict) -> TargetState:
    facts = tuple(
        Fact(
            f["label"],
            f.get("text", ""),
            datetime.fromisoformat(f["when"]) if f.get("when") else None,
        )
        for f in data.get("facts", ())
    )
    return TargetState(data["kind"], data["name"], data["status"], facts, data.get("why", ""))
