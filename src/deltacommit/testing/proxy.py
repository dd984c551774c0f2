"""A fault-injecting HTTP proxy in front of a local server (moto, dynalite, LocalStack).

Tests and benchmarks point a client's endpoint at the proxy to fail chosen requests on purpose
(throttling, 5xx, dropped connections, answers lost after the write happened, hangs) and to
count what a client sends (``records``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import http.client
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from deltacommit.testing.servers import HOST


@dataclass
class Fault:
    """What the proxy does to the next matching request(s).

    ``forward=True`` sends the request upstream first, so the write happens, and then fails
    the response: the client cannot know its request succeeded.  ``drop=True`` closes the
    connection without any response (a connection reset) instead of answering ``status``.

    ``path`` (fnmatch on the request path without its query, e.g. ``"*/_delta_log/*.json"``)
    and ``target`` (the DynamoDB operation, e.g. ``"PutItem"``) narrow which requests match.
    ``hang`` holds the answer until the event is set (a client with a short read timeout gives
    up first: a timeout); the connection is then closed without an answer.  ``reached`` is set
    when a request is held, so a test can wait for that instead of sleeping.
    """

    status: int = 503
    code: str = "SlowDown"
    message: str = "injected by the fault proxy"
    method: str | None = None
    forward: bool = False
    drop: bool = False
    times: int = 1
    path: str | None = None
    target: str | None = None
    hang: threading.Event | None = None
    hang_limit: float = 60.0
    reached: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str, target: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path.split("?", 1)[0], self.path):
            return False
        return self.target is None or target.rsplit(".", 1)[-1] == self.target


@dataclass
class ProxyRecord:
    method: str
    path: str
    status: int | None  # None: the connection was dropped
    injected: bool


@dataclass
class _ProxyState:
    upstream_host: str
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    records: list[ProxyRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, method: str, path: str = "", target: str = "") -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, path, target):
                    fault.times -= 1
                    return fault
        return None

    def record(self, rec: ProxyRecord) -> None:
        with self.lock:
            self.records.append(rec)


_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
               "trailer", "proxy-authenticate", "proxy-authorization"}


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _ProxyServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_GET

    def _handle(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = state.take_fault(self.command, self.path, self.headers.get("X-Amz-Target") or "")
        # Each request is recorded before its answer goes out, so a client that has its answer
        # always finds it in ``records``.
        if fault is not None and not fault.forward:
            state.record(ProxyRecord(self.command, self.path,
                                     None if fault.drop or fault.hang else fault.status, True))
            self._fail(fault)
            return
        upstream_status, headers, payload = self._forward(body)
        if fault is not None:
            state.record(ProxyRecord(self.command, self.path,
                                     None if fault.drop or fault.hang else fault.status, True))
            self._fail(fault)
            return
        state.record(ProxyRecord(self.command, self.path, upstream_status, False))
        self._relay(upstream_status, headers, payload)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        state = self.server.state
        conn = http.client.HTTPConnection(state.upstream_host, state.upstream_port, timeout=60)
        try:
            # The Host header is part of the request signature: pass it through unchanged.
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            conn.endheaders(body if body else None)
            response = conn.getresponse()
            payload = response.read()
            return response.status, response.getheaders(), payload
        finally:
            conn.close()

    def _relay(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response_only(status)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = dict((k.lower(), v) for k, v in headers).get("content-length", str(len(payload)))
        self.send_header("Content-Length", length if self.command == "HEAD" else str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _fail(self, fault: Fault) -> None:
        if fault.hang is not None:
            fault.reached.set()
            fault.hang.wait(fault.hang_limit)
        if fault.drop or fault.hang is not None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.headers.get("X-Amz-Target"):  # DynamoDB speaks JSON
            payload = (f'{{"__type":"com.amazonaws.dynamodb.v20120810#{fault.code}",'
                       f'"message":"{fault.message}"}}').encode()
            content_type = "application/x-amz-json-1.0"
        else:
            payload = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{fault.code}</Code>"
                       f"<Message>{fault.message}</Message></Error>").encode()
            content_type = "application/xml"
        self.send_response_only(fault.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    state: _ProxyState


class FaultInjectingProxy:
    """An HTTP proxy in front of a local server that fails chosen requests on purpose.

    Point a client's endpoint at ``proxy.endpoint``; requests pass through to ``upstream``
    unchanged until ``inject`` arms a fault.  Used to show that stores retry throttling, 5xx and
    dropped connections, and resolve writes whose outcome the client never heard.
    """

    def __init__(self, upstream: str) -> None:
        target = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = target.partition(":")
        self._state = _ProxyState(host, int(port or 80))
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the fault proxy is not running")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> None:
        server = _ProxyServer((HOST, 0), _ProxyHandler)
        server.state = self._state
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def inject(self, fault: Fault) -> None:
        with self._state.lock:
            self._state.faults.append(fault)

    def clear(self) -> None:
        with self._state.lock:
            self._state.faults.clear()
            self._state.records.clear()

    @property
    def records(self) -> list[ProxyRecord]:
        with self._state.lock:
            return list(self._state.records)

    @property
    def pending_faults(self) -> int:
        with self._state.lock:
            return sum(f.times for f in self._state.faults)

    def __enter__(self) -> FaultInjectingProxy:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

