"""Keep-alive HTTP(S) connections for the light client: a small pool per endpoint, thread-safe,
every wait bounded by a connect and a read timeout.

A request either gets a whole answer (status, headers, body read to the end) or raises one of
the light client's transport failures, which say whether the request can have reached the
service: a failure to connect is ``EndpointConnectionError`` or ``ConnectTimeoutError`` (never
sent), anything after the first byte was written is ``ConnectionLostError`` (maybe applied).  An
idle connection the server has closed is noticed before reuse (its socket reads as ready) and
dropped, so a request is not sent into a dead connection.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from deltacommit.io.aws.light.errors import (
    ConnectionLostError,
    ConnectTimeoutError,
    EndpointConnectionError,
)
from deltacommit.runtime.process_state import ForkSafeLock

__all__ = ["Endpoint", "HttpPool", "Response"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: scheme, host and port, and the Host header (no default port)."""

    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    #: Header names lower-cased (as botocore's ``HTTPHeaders`` reads them).
    headers: dict[str, str]
    body: bytes


class HttpPool:
    """Idle keep-alive connections per endpoint, at most ``max_idle`` kept per endpoint."""

    def __init__(self, *, connect_timeout: float, read_timeout: float, max_idle: int) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._idle: dict[Endpoint, list[http.client.HTTPConnection]] = {}
        self._lock = ForkSafeLock()
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()

    def request(self, endpoint: Endpoint, method: str, target: str, headers: Mapping[str, str],
                body: bytes) -> Response:
        conn = self._take(endpoint)
        try:
            try:
                conn.request(method, target, body=body or None, headers=dict(headers))
            except (TimeoutError, OSError, http.client.HTTPException) as e:
                raise ConnectionLostError(endpoint.url, f"sending {method} failed: {e!r}") from e
            try:
                answer = conn.getresponse()
                data = answer.read()
            except (TimeoutError, OSError, http.client.HTTPException) as e:
                raise ConnectionLostError(
                    endpoint.url, f"no complete answer to {method}: {e!r}") from e
        except BaseException:
            conn.close()
            raise
        response = Response(answer.status, answer.reason,
                            {k.lower(): v for k, v in answer.getheaders()}, data)
        if answer.will_close:
            conn.close()
        else:
            self._give_back(endpoint, conn)
        return response

    def _take(self, endpoint: Endpoint) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.get(endpoint)
            while idle:
                conn = idle.pop()
                if _alive(conn):
                    return conn
                conn.close()
        return self._connect(endpoint)

    def _give_back(self, endpoint: Endpoint, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(endpoint, [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, endpoint: Endpoint) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if endpoint.scheme == "https":
            conn = http.client.HTTPSConnection(endpoint.host, endpoint.port,
                                               timeout=self.connect_timeout,
                                               context=self._ssl_context())
        else:
            conn = http.client.HTTPConnection(endpoint.host, endpoint.port,
                                              timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as e:
            conn.close()
            raise ConnectTimeoutError(endpoint.url, f"no connection within "
                                      f"{self.connect_timeout:g} s") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise EndpointConnectionError(endpoint.url, f"could not connect: {e}") from e
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _ssl_context(self) -> ssl.SSLContext:
        with self._ssl_lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=ca_bundle())
            return self._ssl

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


def ca_bundle() -> str | None:
    """The certificates botocore verifies servers with: certifi's bundle where certifi is
    installed, else the one botocore ships (found without importing botocore)."""
    try:
        import certifi
    except ImportError:
        spec = importlib.util.find_spec("botocore")
        if spec is None or spec.origin is None:
            return None
        bundled = os.path.join(os.path.dirname(spec.origin), "cacert.pem")
        return bundled if os.path.exists(bundled) else None
    return str(certifi.where())


def _alive(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is still open: a socket that reads as ready holds either the
    server's close or bytes nobody asked for, and is not reused."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not ready
