"""The embedded deployment's Celery broker: kombu's filesystem transport, written atomically.

kombu's own ``_put`` creates the message file, then locks and writes it. A
consumer polling the folder can move and read the file in between, get an
empty payload, and the worker dies on the JSON error. Here a message is
written under a name no consumer matches (``….msg.part``) and renamed into
place, so a reader sees a whole message or none.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


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


class Transport(filesystem.Transport):
    Channel = Channel
