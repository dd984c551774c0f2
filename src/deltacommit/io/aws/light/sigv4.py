"""AWS Signature Version 4, as a pure function of a request: no clock, no I/O.

The caller gives the time (``amz_date``, ``YYYYMMDDTHHMMSSZ``), the credentials and the request
(method, host, path as sent, query parameters, headers, payload hash) and gets back the headers
to send with it: ``X-Amz-Date``, ``X-Amz-Security-Token`` with a session token,
``X-Amz-Content-SHA256`` for S3, and ``Authorization``.  The rules are AWS's (and botocore's,
which ``tests/aws/test_light_sigv4.py`` checks this against request by request):

- the canonical URI is the path as sent for S3 (its keys are percent-encoded once, ``/`` and
  ``~`` kept); for every other service the path has its dot segments and empty segments removed
  and is percent-encoded again;
- the canonical query string is every parameter percent-encoded (unreserved characters
  ``A-Za-z0-9-_.~`` kept), sorted by encoded key, then value;
- every header is signed except the hop-by-hop and tracing ones a proxy or the HTTP layer may
  change (``expect``, ``connection``, ``user-agent``, ``traceparent``...); names lower-cased,
  values with runs of whitespace made one space, the values of one name joined by commas;
  ``host`` from the URL without a default port;
- the payload is its SHA-256 in hex, or ``UNSIGNED-PAYLOAD`` where the caller chooses so.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

__all__ = ["EMPTY_SHA256", "UNSIGNED_PAYLOAD", "Credentials", "canonical_query", "canonical_uri",
           "payload_hash", "sign"]

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"
#: Headers a proxy or the HTTP layer may add or change after signing.
_UNSIGNED_HEADERS = frozenset({
    "baggage", "connection", "expect", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "te", "traceparent", "tracestate", "trailer", "transfer-encoding", "upgrade", "user-agent",
    "x-amzn-trace-id"})


@dataclass(frozen=True, slots=True)
class Credentials:
    """Static credentials: an access key id, its secret and, for temporary ones, the token."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"Credentials({self.access_key_id[:4]}…)"


def payload_hash(body: bytes) -> str:
    """The SHA-256 of a payload in hex, as the canonical request carries it."""
    return hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256


def remove_dot_segments(path: str) -> str:
    """RFC 3986's dot-segment removal, with empty segments dropped as AWS requires."""
    if not path:
        return ""
    kept: list[str] = []
    for segment in path.split("/"):
        if not segment or segment == ".":
            continue
        if segment == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    first = "/" if path.startswith("/") else ""
    last = "/" if path.endswith("/") and kept else ""
    return first + "/".join(kept) + last


def canonical_uri(path: str, *, s3: bool) -> str:
    """The canonical URI of ``path`` (as sent, already percent-encoded)."""
    if s3:
        return path or "/"
    return quote(remove_dot_segments(path) or "/", safe="/~")


def encode_query_part(text: str) -> str:
    """A query key or value percent-encoded, only unreserved characters kept."""
    return quote(text, safe="-_.~")


def canonical_query(params: Iterable[tuple[str, str]]) -> str:
    """Parameters encoded and sorted by key, then value: also the query string to send."""
    pairs = sorted((encode_query_part(k), encode_query_part(v)) for k, v in params)
    return "&".join(f"{k}={v}" for k, v in pairs)


def _canonical_headers(headers: Mapping[str, str]) -> tuple[str, str]:
    grouped: dict[str, list[str]] = {}
    for name, value in headers.items():
        lname = name.lower()
        if lname in _UNSIGNED_HEADERS:
            continue
        grouped.setdefault(lname, []).append(" ".join(str(value).split()))
    names = sorted(grouped)
    canonical = "".join(f"{n}:{','.join(grouped[n])}\n" for n in names)
    return canonical, ";".join(names)


@lru_cache(maxsize=32)
def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = _hmac(("AWS4" + secret).encode(), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def sign(*, method: str, host: str, path: str, query: str, headers: Mapping[str, str],
         body_sha256: str, credentials: Credentials, region: str, service: str,
         amz_date: str) -> dict[str, str]:
    """The headers that sign this request (to add to ``headers``, which must not hold them).

    ``host`` is the Host header as sent (no default port); ``query`` the canonical query string
    (``canonical_query``), which is also what is sent; ``body_sha256`` the payload's hash or
    ``UNSIGNED_PAYLOAD``.  S3 also gets ``X-Amz-Content-SHA256``, which S3 requires.
    """
    s3 = service == "s3"
    added: dict[str, str] = {"X-Amz-Date": amz_date}
    if credentials.session_token:
        added["X-Amz-Security-Token"] = credentials.session_token
    if s3:
        added["X-Amz-Content-SHA256"] = body_sha256
    signed = {"host": host, **headers, **added}
    canonical_headers, signed_names = _canonical_headers(signed)
    canonical_request = "\n".join((method.upper(), canonical_uri(path, s3=s3), query,
                                   canonical_headers, signed_names, body_sha256))
    date = amz_date[:8]
    scope = f"{date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join((_ALGORITHM, amz_date, scope,
                                hashlib.sha256(canonical_request.encode("utf-8")).hexdigest()))
    signature = hmac.new(_signing_key(credentials.secret_access_key, date, region, service),
                         string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    added["Authorization"] = (f"{_ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
                              f"SignedHeaders={signed_names}, Signature={signature}")
    return added
