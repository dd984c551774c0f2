"""A TCP proxy that answers every HTTP request a fixed time late, so a benchmark can put a
network round trip between the libraries and the one local moto server.

On the benchmarks' moto, a request costs about 2 ms of the server's one thread and nothing
else: the figures measure how few requests a library makes, not how many it makes one after
another.  Against S3 a request costs a round trip of 10-30 ms, served in parallel with
everyone else's.  Delaying each response by ``delay`` seconds (after moto has served the
request, so that the server stays free for others meanwhile) gives the libraries that second
shape: a commit then costs its requests in sequence, and requests issued together overlap.

Every library under test reaches moto through the same proxy, so the comparison stays like
with like.  The delay falls on the first bytes of each response that follow bytes of a request,
which is once per request whether a connection carries one request (moto's single-threaded
server speaks HTTP/1.0) or several.

``observe``, when given, is called (on the proxy's thread) once per request with the request's
head (request line and headers), the status line of its response and the seconds from the
request's first byte to its response's delivery, so that a benchmark can count requests by
kind on the wire, whichever library sent them.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

#: What ``LatencyProxy`` tells an observer of each request: its head, the response's status
#: line and the round trip as the client saw it (seconds).
Observer = Callable[[bytes, bytes, float], None]


class LatencyProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` (``http://host:port``), each response
    ``delay`` seconds late; a context manager that serves from a background thread."""

    def __init__(self, upstream: str, delay: float, observe: Observer | None = None) -> None:
        scheme, _, rest = upstream.partition("://")
        if scheme != "http" or ":" not in rest:
            raise ValueError(f"latency proxy: expected an upstream like http://host:port, "
                             f"got {upstream!r}")
        host, _, port = rest.rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self.delay = delay
        self.observe = observe
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="latency-proxy")
        self._server: asyncio.base_events.Server | None = None
        # The connections being served: asyncio holds a connection's task only weakly once
        # its client has hung up, and a task collected while pending is lost mid-request.
        self._serving: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> asyncio.base_events.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        # Set when the client has sent bytes that no response has answered yet.
        asked = asyncio.Event()
        # The heads of the requests not answered yet, with when their first byte came.
        heads: list[tuple[bytes, float]] = []
        partial = bytearray()

        async def requests() -> None:
            while data := await client_r.read(65536):
                if not asked.is_set():
                    partial.clear()
                    heads.append((b"", time.monotonic()))
                if self.observe is not None and heads and not heads[-1][0]:
                    partial.extend(data[:65536 - len(partial)])
                    end = partial.find(b"\r\n\r\n")
                    if end >= 0 or len(partial) >= 65536:
                        heads[-1] = (bytes(partial[:end if end >= 0 else None]), heads[-1][1])
                asked.set()
                server_w.write(data)
                await server_w.drain()
            if server_w.can_write_eof() and not server_w.is_closing():
                server_w.write_eof()

        # Responses are read from moto as soon as it writes them and handed on when due:
        # moto's one thread must not wait on a connection whose answer is being delayed.
        answers: asyncio.Queue[tuple[float | None, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def responses() -> None:
            while data := await server_r.read(65536):
                due = None
                if asked.is_set():
                    asked.clear()
                    due = loop.time() + self.delay
                    # moto has read the whole request, and answers one per connection: it
                    # would otherwise wait for a next request until the client hangs up.
                    if server_w.can_write_eof():
                        server_w.write_eof()
                answers.put_nowait((due, data))
            answers.put_nowait((None, b""))

        async def deliver() -> None:
            while True:
                due, data = await answers.get()
                if not data:
                    break
                if due is not None:
                    await asyncio.sleep(max(0.0, due - loop.time()))
                client_w.write(data)
                await client_w.drain()
                if due is not None and heads and self.observe is not None:
                    head, began = heads.pop(0)
                    try:
                        self.observe(head, data.split(b"\r\n", 1)[0],
                                     time.monotonic() - began)
                    except Exception as e:  # an observer's fault must not cut the response
                        print(f"latency proxy: observer failed: {e!r}", file=sys.stderr)
            client_w.close()

        try:
            await asyncio.gather(requests(), responses(), deliver())
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (client_w, server_w):
                if not w.is_closing():
                    w.close()
