"""What the light S3 and DynamoDB clients share: botocore's ``meta`` shape, the request
listeners benchmarks count with, the key id they sign with, and the botocore client each falls
back to for an operation or argument it does not send itself (made on first need)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from deltacommit.io.aws.light.http import HttpPool
from deltacommit.io.aws.light.sigv4 import Credentials

__all__ = ["ClientConfig", "ClientMeta", "LightClient"]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The client's timeouts and pool size, named as in botocore's ``Config``."""

    connect_timeout: float
    read_timeout: float
    max_pool_connections: int


class ClientMeta:
    """What callers read of a client's ``meta``: its endpoint, region and settings."""

    def __init__(self, endpoint_url: str, region_name: str, pool: HttpPool) -> None:
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self.config = ClientConfig(pool.connect_timeout, pool.read_timeout, pool.max_idle)


class _Signed(Protocol):
    @property
    def credentials(self) -> Credentials: ...

    @property
    def region(self) -> str: ...


SettingsT = TypeVar("SettingsT", bound=_Signed)


class LightClient(Generic[SettingsT]):
    """The part of a light client that is not its service's protocol."""

    light = True

    def __init__(self, settings: SettingsT, pool: HttpPool, endpoint_url: str,
                 fallback: Callable[[], Any]) -> None:
        self._settings = settings
        self._pool = pool
        self._fallback_factory = fallback
        self._fallback: Any = None
        self._listeners: list[Callable[[str, str], None]] = []
        self.meta = ClientMeta(endpoint_url, settings.region, pool)

    def signer_identity(self) -> str:
        """The access key id requests are signed with."""
        return self._settings.credentials.access_key_id

    def on_request(self, listener: Callable[[str, str], None]) -> None:
        """Call ``listener(service, operation)`` before each request (each retry too) is sent
        (botocore's ``before-send`` event, for counting requests in benchmarks)."""
        self._listeners.append(listener)

    def off_request(self, listener: Callable[[str, str], None]) -> None:
        """Stop calling a listener ``on_request`` added."""
        self._listeners = [f for f in self._listeners if f is not listener]

    def _announce(self, service: str, operation: str) -> None:
        for listener in self._listeners:
            listener(service, operation)

    def _botocore(self) -> Any:
        if self._fallback is None:
            self._fallback = self._fallback_factory()
        return self._fallback
