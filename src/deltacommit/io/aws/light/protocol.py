"""What one request looks like on the wire and how its answer is read into botocore's shapes:
shared by the light S3 and DynamoDB clients.

``send`` signs a request with the current time (the only impure input besides the pool) and
reads the answer; ``error_response`` turns an error answer into the ``response`` dict botocore's
``ClientError`` carries, so ``deltacommit.io.aws.errors`` reads both clients alike.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from deltacommit.io.aws.light.http import Endpoint, HttpPool, Response
from deltacommit.io.aws.light.sigv4 import Credentials, canonical_query, sign

__all__ = ["json_error_response", "metadata", "s3_error_response", "send"]

_XML_CODE = re.compile(r"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")


_MONTHS = {name: i for i, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def http_date(text: str) -> datetime | None:
    """An HTTP date (``Date``, ``Last-Modified``) as an aware UTC datetime, None if unreadable.

    The IMF-fixdate every server sends (``Sun, 06 Nov 1994 08:49:37 GMT``) is read here;
    the obsolete forms HTTP still allows go to ``email.utils``, imported only then."""
    parts = text.split()
    if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTHS:
        clock = parts[4].split(":")
        if len(clock) == 3 and all(p.isdigit() for p in (parts[1], parts[3], *clock)):
            try:
                return datetime(int(parts[3]), _MONTHS[parts[2]], int(parts[1]), int(clock[0]),
                                int(clock[1]), int(clock[2]), tzinfo=UTC)
            except ValueError:
                return None
    import email.utils

    try:
        value = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def amz_date(now: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))


def send(pool: HttpPool, endpoint: Endpoint, *, method: str, path: str,
         params: list[tuple[str, str]] | None, headers: Mapping[str, str], body: bytes,
         body_sha256: str, credentials: Credentials, region: str, service: str) -> Response:
    """Sign and send one request; the whole answer, or a transport failure."""
    query = canonical_query(params or [])
    signed = sign(method=method, host=endpoint.host_header, path=path, query=query,
                  headers=headers, body_sha256=body_sha256, credentials=credentials,
                  region=region, service=service, amz_date=amz_date())
    target = f"{path}?{query}" if query else path
    return pool.request(endpoint, method, target, {**headers, **signed}, body)


def metadata(response: Response, retries: int = 0) -> dict[str, Any]:
    """botocore's ``ResponseMetadata`` of an answer."""
    request_id = (response.headers.get("x-amz-request-id")
                  or response.headers.get("x-amzn-requestid") or "")
    return {"RequestId": request_id, "HostId": response.headers.get("x-amz-id-2", ""),
            "HTTPStatusCode": response.status, "HTTPHeaders": dict(response.headers),
            "RetryAttempts": retries}


def s3_error_response(response: Response) -> dict[str, Any]:
    """An S3 (REST-XML) error answer as botocore reads it: the body's Code and Message, or,
    without a body (HEAD, some 304/412), the status as the code and its reason as the message."""
    text = response.body.decode("utf-8", "replace")
    code = _XML_CODE.search(text)
    if code is None:
        error = {"Code": str(response.status),
                 "Message": http.client.responses.get(response.status, "")}
    else:
        message = _XML_MESSAGE.search(text)
        error = {"Code": code.group(1), "Message": message.group(1) if message else ""}
    return {"Error": error, "ResponseMetadata": metadata(response)}


def json_error_response(response: Response, retries: int = 0) -> dict[str, Any]:
    """A DynamoDB (JSON 1.0) error answer as botocore reads it: the code from ``__type`` after
    its ``#``, the message, and the error's other members (``Item`` of a failed condition);
    a body that is not JSON (an emulator's XML) gives the status as the code and the body as
    the message, which ``io.aws.errors`` reads the XML's code from."""
    out: dict[str, Any] = {"ResponseMetadata": metadata(response, retries)}
    try:
        body = json.loads(response.body) if response.body else {}
    except ValueError:
        body = None
    if not isinstance(body, dict):
        out["Error"] = {"Code": str(response.status),
                        "Message": response.body.decode("utf-8", "replace")}
        return out
    code = str(body.get("__type") or response.headers.get("x-amzn-errortype", "")).rsplit("#", 1)[-1]
    code = code.split(":", 1)[0] or str(response.status)
    message = body.get("message", body.get("Message", ""))
    out["Error"] = {"Code": code, "Message": str(message or "")}
    for key, value in body.items():
        if key not in ("__type", "message", "Message"):
            out[key] = value
    return out
