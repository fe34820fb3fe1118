"""A Debug Adapter Protocol client over a raw socket: the few requests an IDE sends to attach to debugpy,
continue past the breakpoint the runner sets before the function, and let the job go on."""

from __future__ import annotations

import json
import socket
from typing import Any

TIMEOUT = 60.0


class DapClient:
    """The few Debug Adapter Protocol requests an IDE sends to attach, continue and let go."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.buffer = b""
        self.seq = 0

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def receive(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._chunk()
        header, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(header.split(b":")[1])
        while len(rest) < length:
            rest += self._chunk()
        self.buffer = rest[length:]
        message: dict[str, Any] = json.loads(rest[:length])
        return message

    def _chunk(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the debug adapter closed the connection")
        return data

    def until(self, wanted: str) -> dict[str, Any]:
        """Messages up to the response to command `wanted` or the event `wanted`."""
        while True:
            message = self.receive()
            if message.get("command") == wanted or message.get("event") == wanted:
                return message

    def close(self) -> None:
        self.sock.close()


def attach_and_continue(host: str, port: int) -> list[str]:
    """Attach as an IDE would, continue past the runner's breakpoint; the events seen on the way."""
    client = DapClient(host, port)
    try:
        client.send("initialize", adapterID="debugpy", clientID="kinetic-tests")
        assert client.until("initialize")["success"]
        client.send("attach", justMyCode=False)
        client.until("initialized")
        client.send("configurationDone")
        stopped = client.until("stopped")  # the breakpoint the runner sets before the function
        client.send("continue", threadId=stopped["body"]["threadId"])
        client.until("continue")
        client.send("disconnect", terminateDebuggee=False)
        return ["stopped", stopped["body"]["reason"]]
    finally:
        client.close()
