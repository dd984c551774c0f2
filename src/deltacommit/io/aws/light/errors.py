"""The light client's failures, shaped as botocore's so that one reading serves both clients.

``ClientError`` is a service's answer (``response["Error"]["Code"]``, ``"Message"``,
``response["ResponseMetadata"]["HTTPStatusCode"]``, as botocore builds it); the transport
failures say what botocore's do about whether a request may have taken effect:
``EndpointConnectionError`` and ``ConnectTimeoutError`` were never sent, ``ConnectionLostError``
(reset, closed or timed out after sending) may have been applied.  ``deltacommit.io.aws.errors``
groups them with botocore's counterparts, so callers catch a kind of failure, not a client.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ClientError", "ConnectTimeoutError", "ConnectionLostError", "EndpointConnectionError",
           "LightClientError", "TransportError"]


class LightClientError(Exception):
    """Base of the light client's failures that are not a service's answer (botocore's
    ``BotoCoreError``)."""


class TransportError(LightClientError):
    """The HTTP exchange failed."""

    def __init__(self, endpoint: str, detail: str) -> None:
        super().__init__(f"{detail} ({endpoint})")
        self.endpoint = endpoint


class EndpointConnectionError(TransportError):
    """No connection could be made (refused, unresolvable name): the request was never sent."""


class ConnectTimeoutError(TransportError):
    """The connection was not made within the connect timeout: never sent."""


class ConnectionLostError(TransportError):
    """The connection was reset, closed or timed out after the request was sent (in part or
    whole): the service may have applied it."""


class ClientError(Exception):
    """A service's error answer, with botocore's ``response`` dict and ``operation_name``."""

    def __init__(self, response: dict[str, Any], operation_name: str) -> None:
        error = response.get("Error", {})
        super().__init__(f"An error occurred ({error.get('Code', 'Unknown')}) when calling the "
                         f"{operation_name} operation: {error.get('Message', 'Unknown')}")
        self.response = response
        self.operation_name = operation_name
