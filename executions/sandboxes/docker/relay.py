"""The network of an MCP server run from an image, and its one way out: ``python3 -I -S -c``.

Its source is the command of a container of the sandbox image that has no
network but its own loopback (``servers.py``): it listens on
``127.0.0.1:PORT`` there, hands the listening socket to the gateway's proxy
(``egress.Egress``) over the UNIX socket at ``PATH`` (a folder mounted
read-only), says ``ready`` on stdout, and then holds the network until its
stdin ends. The server's container joins this network (``container:<relay>``),
so the server's only peer is that proxy, which runs in the gateway's process
and opens only what the server's list names. Standard library only.
"""

import os
import socket
import sys


def main() -> int:
    port, path = int(sys.argv[1]), sys.argv[2]
    listener = socket.create_server(("127.0.0.1", port))
    with socket.socket(socket.AF_UNIX) as proxy:
        proxy.settimeout(10)
        proxy.connect(path)
        socket.send_fds(proxy, [b"L"], [listener.fileno()])
        if proxy.recv(1) != b"k":
            print("the proxy did not take the server's socket", file=sys.stderr)
            return 1
    listener.close()  # the proxy holds it now
    print("ready", flush=True)
    while os.read(0, 4096):  # until the attach program goes
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
