"""An HTTP proxy between a client and the API that fails the way networks and load balancers do:
it forwards a request and then resets the connection once the server's answer arrived (the server
committed, the client never hears of it), holds an answer past the client's timeout, or answers
502 itself. ``choose(request, index)`` picks each request's fate; ``seen`` records every request.

It runs on an event loop of its own in a thread, so sync and async clients can both go through it.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from typing import Any, Callable, Dict, List, Optional, Union

import httpx

Fate = Union[str, Dict[str, Any]]  # "pass", "reset", "hold", "bad_gateway", or an answer to give
FATES = ("pass", "reset", "hold", "bad_gateway")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


def fault_mix(reset: float = 0.1, hold: float = 0.05, bad_gateway: float = 0.05) -> Callable[[dict, int], Fate]:
    """The issue's mix: a tenth reset after the answer, some held past the timeout, some 502."""

    def choose(request: dict, index: int) -> Fate:
        roll = random.random()
        if roll < reset:
            return "reset"
        if roll < reset + hold:
            return "hold"
        if roll < reset + hold + bad_gateway:
            return "bad_gateway"
        return "pass"

    return choose


def _reset(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER 0 makes the close a TCP reset, as a balancer that drops the connection sends.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self, target: str, choose: Optional[Callable[[dict, int], Fate]] = None, hold: float = 1.0) -> None:
        self.target = target.rstrip("/")
        self.choose = choose or (lambda request, index: "pass")
        self.hold = hold
        self.counts: Dict[str, int] = {fate: 0 for fate in FATES}
        self.counts["answered"] = 0
        self.seen: List[dict] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: Optional[asyncio.AbstractServer] = None
        self._upstream: Optional[httpx.AsyncClient] = None
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()

    async def _start(self) -> str:
        self._upstream = httpx.AsyncClient(limits=httpx.Limits(max_connections=64), timeout=60)
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = {"method": method, "path": path, "headers": headers, "body": body}
                with self._lock:
                    self.seen.append(request)
                    index = len(self.seen) - 1
                fate = self.choose(request, index)
                if isinstance(fate, dict):
                    self.counts["answered"] += 1
                    self._write(writer, fate["status"], fate.get("headers", {}), fate.get("body", b""))
                    continue
                self.counts[fate] += 1
                if fate == "bad_gateway":
                    page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
                    self._write(writer, 502, {"content-type": "text/html"}, page)
                    continue
                forward = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
                assert self._upstream is not None
                answer = await self._upstream.request(method, self.target + path, headers=forward, content=body)
                if fate == "reset":
                    # The server has answered (and so committed); the client gets a reset instead.
                    _reset(writer)
                    return
                if fate == "hold":
                    # Past the client's timeout: it has given up by the time this would be sent.
                    await asyncio.sleep(self.hold)
                    _reset(writer)
                    return
                out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
                self._write(writer, answer.status_code, out, answer.content)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    @staticmethod
    def _write(writer: asyncio.StreamWriter, status: int, headers: Dict[str, str], body: Union[bytes, str]) -> None:
        payload = body.encode() if isinstance(body, str) else body
        lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()] + [f"content-length: {len(payload)}", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1") + payload)

    def close(self) -> None:
        async def stop() -> None:
            assert self._server is not None and self._upstream is not None
            self._server.close()
            pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._upstream.aclose()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
