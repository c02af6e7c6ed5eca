"""The embedded deployment's Celery broker: kombu's filesystem transport, atomic and rung.

- Atomic: kombu's own ``_put`` creates the message file, then locks and writes
  it. A consumer polling the folder can move and read the file in between,
  get an empty payload, and the worker dies on the JSON error. Here a message
  is written under a name no consumer matches (``….msg.part``) and renamed
  into place, so a reader sees a whole message or none.
- Private: a consumer claims a message by renaming it, in its folder, to a
  name no other consumer matches (kombu moves it through the host's /tmp).
- Rung: a producer rings the ``broker`` doorbell after the rename, and a
  consumer with nothing to do waits on it instead of sleeping a polling
  interval, so a message is picked up as soon as it is written. The polling
  interval stays as the safety net (``infrastructure/doorbell.py``).
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from . import doorbell

TOPIC = "broker"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # readers match "<stamp>_<uuid>.<queue>.msg" only
        try:
            with open(partial, "wb") as fh:
                fh.write(str_to_bytes(dumps(payload)))
            os.rename(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc
        doorbell.ring(TOPIC)

    def _get(self, queue):
        wanted = f"{queue}.msg"
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            source = os.path.join(self.data_folder_in, filename)
            claimed = f"{source}.{uuid.uuid4().hex}.claimed"
            try:
                os.rename(source, claimed)
            except OSError:
                continue  # another consumer claimed it first
            try:
                with open(claimed, "rb") as fh:
                    payload = fh.read()
                if self.store_processed:
                    os.rename(claimed, os.path.join(self.processed_folder, filename))
                else:
                    os.remove(claimed)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        bell = self._bell()
        started = monotonic()
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                waited = monotonic() - started
                if timeout is not None and waited >= timeout:
                    raise TimeoutError() from None
                wait = self.polling_interval
                if timeout is not None:
                    wait = min(wait, timeout - waited)
                bell.wait(wait)

    def _bell(self) -> doorbell.Bell:
        # Made before the first look at the folder: a message written after
        # that look rings a bell that already listens.
        if getattr(self, "_doorbell", None) is None or self._doorbell_pid != os.getpid():
            self._doorbell = doorbell.Bell(TOPIC)
            self._doorbell_pid = os.getpid()
        return self._doorbell
