"""An upstream MCP server for the gateway's tests, built on the official SDK's ``MCPServer``.

``python -m tests.gateway.upstream stdio`` speaks on stdin and stdout;
``python -m tests.gateway.upstream http PORT`` serves streamable HTTP on
``/mcp``. Every call it receives is appended, as a JSON line, to the file
named by ``UPSTREAM_CALLS`` (when it is set) (so a test can show a call never reached it),
with a token of the process (so a test can see a restarted one); ``whoami``
answers the ``Authorization`` header a call came with over HTTP; ``probe``
tries to read, list or connect (the sandbox tests), ``attack`` runs the
adversarial suites' attack code in its own process, ``fetch`` makes an HTTP
request through the proxy its environment names (its network list), ``scratch``
writes its working dir.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import socket
import sys
import time
from urllib.parse import urlsplit

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

server = MCPServer("upstream-under-test")
# Which process answered: in a sandbox of its own PID namespace every one is pid 2.
PROCESS = os.urandom(8).hex()


def _called(tool: str, **arguments) -> None:
    if "UPSTREAM_CALLS" not in os.environ:
        return
    line = {"tool": tool, "arguments": arguments, "process": PROCESS}
    with open(os.environ["UPSTREAM_CALLS"], "a") as calls:
        calls.write(json.dumps(line) + "\n")


class Sum(BaseModel):
    total: int
    terms: int


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    _called("echo", text=text)
    return f"echo: {text}"


@server.tool(description="Add two whole numbers; the total is structured content.")
def add(a: int, b: int) -> Sum:
    _called("add", a=a, b=b)
    return Sum(total=a + b, terms=2)


@server.tool(description="Refund an amount to a customer.")
def refund(customer: str, amount: int, reason: str = "") -> str:
    _called("refund", customer=customer, amount=amount, reason=reason)
    return f"refunded {amount} to {customer} ({reason or 'no reason given'})"


@server.tool(description="Answer with an error, as a tool does when it cannot do its job.")
def fail(why: str) -> CallToolResult:
    _called("fail", why=why)
    return CallToolResult(content=[TextContent(text=f"cannot: {why}")], is_error=True)


@server.tool(description="Take this many seconds to answer.")
def slow(seconds: float) -> str:
    _called("slow", seconds=seconds)
    time.sleep(seconds)
    return "slept"


@server.tool(description="Exit the process in the middle of the call.")
def crash() -> str:
    _called("crash")
    os._exit(3)


@server.tool(description="The environment variable's value, as this process sees it.")
def getenv(name: str) -> str:
    _called("getenv", name=name)
    return os.environ.get(name, "<unset>")


@server.tool(description="The Authorization header this call came with (HTTP only).")
def whoami(ctx: Context) -> str:
    _called("whoami")
    request = ctx.request_context.request
    return request.headers.get("authorization", "<none>") if request is not None else "<stdio>"


@server.tool(
    description="Try to read a file, list a folder or connect to host:port; say what happened."
)
def probe(path: str = "", folder: str = "", host: str = "", port: int = 0) -> str:
    _called("probe", path=path, folder=folder, host=host, port=port)
    if path:
        try:
            with open(path, "rb") as f:
                return f"read {len(f.read())} bytes"
        except OSError as exc:
            return f"refused: {exc.strerror}"
    if folder:
        try:
            return f"listed {sorted(os.listdir(folder))}"
        except OSError as exc:
            return f"refused: {exc.strerror}"
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"
    return "connected"


@server.tool(
    description="GET http://host:port/ through the proxy HTTPS_PROXY names (a CONNECT tunnel, "
    "as an https client makes one), or directly when none is named; say what answered."
)
def fetch(host: str, port: int) -> str:
    _called("fetch", host=host, port=port)
    proxy = os.environ.get("HTTPS_PROXY")
    try:
        if proxy:
            address = urlsplit(proxy)
            connection = http.client.HTTPConnection(address.hostname, address.port, timeout=5)
            connection.set_tunnel(host, port)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=5)
        connection.request("GET", "/")
        return f"answered {connection.getresponse().status}"
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


@server.tool(description="Run Python code in this process; what it printed (the attack code).")
def attack(code: str) -> str:
    _called("attack")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, {"__name__": "__attack__"})  # noqa: S102 - the point: a hostile server
    return printed.getvalue()


@server.tool(description="Write text to a file in the working dir and read it back.")
def scratch(text: str) -> str:
    _called("scratch", text=text)
    with open("scratch.txt", "w") as f:
        f.write(text)
    with open("scratch.txt") as f:
        return f"{os.getcwd()}: {f.read()}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=True)
