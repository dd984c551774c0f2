"""The light client's SigV4 signer against botocore's, request by request (pure: no I/O).

The same request (method, host, path, query parameters, headers, body, credentials with and
without a session token, region, service, time) must get the same ``Authorization`` header and
the same ``X-Amz-*`` headers from both, for S3 (path as sent, payload hash in
``X-Amz-Content-SHA256``) and for other services (path normalized and encoded again).
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from unittest import mock
from urllib.parse import quote

import hypothesis.strategies as st
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import given, settings

from deltacommit.io.aws.light.sigv4 import (
    UNSIGNED_PAYLOAD,
    Credentials,
    canonical_query,
    payload_hash,
    remove_dot_segments,
    sign,
)

_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"),
                max_size=12)
_HEADER_VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
_HEADER_NAMES = st.sampled_from(["If-None-Match", "If-Match", "Content-Type", "x-amz-meta-a",
                                 "X-Amz-Target", "Content-MD5", "x-amz-copy-source", "Expect",
                                 "User-Agent"])
_MOMENT = st.datetimes(min_value=datetime.datetime(2000, 1, 1),
                       max_value=datetime.datetime(2099, 12, 31))


def _botocore_sign(auth_class: type[SigV4Auth], *, url: str, method: str,
                   params: list[tuple[str, str]], headers: dict[str, str], body: bytes,
                   credentials: Credentials, region: str, service: str,
                   moment: datetime.datetime) -> dict[str, str]:
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body, params=params)
    boto = BotoCredentials(credentials.access_key_id, credentials.secret_access_key,
                           credentials.session_token)
    with mock.patch("botocore.auth.get_current_datetime", return_value=moment):
        auth_class(boto, service, region).add_auth(request)
    return {k: v for k, v in request.headers.items()}


@st.composite
def _requests(draw: st.DrawFn, *, s3: bool) -> dict[str, object]:
    scheme = draw(st.sampled_from(["http", "https"]))
    host = draw(st.sampled_from(["127.0.0.1", "s3.eu-west-1.amazonaws.com", "bucket.localhost",
                                 "dynamodb.us-east-1.amazonaws.com"]))
    port = draw(st.sampled_from([None, 80, 443, 4566, 5000]))
    if s3:
        key = draw(st.lists(_TEXT, max_size=4).map("/".join))
        path = "/" + quote(draw(st.sampled_from(["bkt", "my.bucket"])), safe="/~") + (
            "/" + quote(key, safe="/~") if key else "")
    else:
        segments = draw(st.lists(st.one_of(_TEXT, st.sampled_from([".", "..", ""])), max_size=5))
        path = "/" + "/".join(quote(s, safe="~") for s in segments)
    keys = draw(st.lists(st.sampled_from(["prefix", "list-type", "start-after", "delete",
                                          "continuation-token", "max-keys", "a b", "ü"]),
                         unique=True, max_size=4))
    params = [(k, draw(_TEXT)) for k in keys]
    headers = draw(st.dictionaries(_HEADER_NAMES, _HEADER_VALUE, max_size=4))
    token = draw(st.one_of(st.none(), st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                              min_size=1, max_size=30)))
    credentials = Credentials(draw(st.sampled_from(["AKIDEXAMPLE", "testing"])),
                              draw(st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                           min_size=1, max_size=40)), token)
    return {
        "scheme": scheme, "host": host, "port": port, "path": path, "params": params,
        "headers": headers, "body": draw(st.binary(max_size=64)),
        "method": draw(st.sampled_from(["GET", "PUT", "POST", "HEAD", "DELETE"])),
        "credentials": credentials,
        "region": draw(st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2"])),
        "moment": draw(_MOMENT),
    }


def _check(request: dict[str, object], *, s3: bool) -> None:
    scheme, host, port = request["scheme"], request["host"], request["port"]
    default = 443 if scheme == "https" else 80
    host_header = host if port in (None, default) else f"{host}:{port}"
    url = f"{scheme}://{host_header}{request['path']}"
    body = request["body"]
    assert isinstance(body, bytes)
    moment = request["moment"]
    assert isinstance(moment, datetime.datetime)
    service = "s3" if s3 else "dynamodb"
    expected = _botocore_sign(S3SigV4Auth if s3 else SigV4Auth, url=url,
                              method=str(request["method"]), params=request["params"],  # type: ignore[arg-type]
                              headers=request["headers"], body=body,  # type: ignore[arg-type]
                              credentials=request["credentials"],  # type: ignore[arg-type]
                              region=str(request["region"]), service=service, moment=moment)
    mine = sign(method=str(request["method"]), host=str(host_header), path=str(request["path"]),
                query=canonical_query(request["params"]),  # type: ignore[arg-type]
                headers=request["headers"], body_sha256=payload_hash(body),  # type: ignore[arg-type]
                credentials=request["credentials"],  # type: ignore[arg-type]
                region=str(request["region"]), service=service,
                amz_date=moment.strftime("%Y%m%dT%H%M%SZ"))
    for name, value in mine.items():
        assert expected[name] == value, name
    assert {k for k in expected if k.lower().startswith("x-amz-") and k not in request["headers"]} \
        | {"Authorization"} == set(mine) | {"Authorization"}


@settings(max_examples=300, deadline=None)
@given(_requests(s3=True))
def test_s3_requests_are_signed_as_botocore_signs_them(request: dict[str, object]) -> None:
    _check(request, s3=True)


@settings(max_examples=300, deadline=None)
@given(_requests(s3=False))
def test_other_services_normalize_and_encode_the_path_again(request: dict[str, object]) -> None:
    _check(request, s3=False)


def test_unsigned_payload_is_signed_as_its_literal() -> None:
    """S3 accepts ``UNSIGNED-PAYLOAD`` in place of the hash; it goes into the canonical request
    and ``X-Amz-Content-SHA256`` as is (as botocore signs with payload signing turned off)."""
    credentials = Credentials("AKIDEXAMPLE", "secret")
    moment = datetime.datetime(2026, 11, 28, 10, 0, 0)
    request = AWSRequest(method="PUT", url="https://bkt.s3.amazonaws.com/k", data=b"abc")
    request.context["client_config"] = SimpleNamespace(s3={"payload_signing_enabled": False})
    with mock.patch("botocore.auth.get_current_datetime", return_value=moment):
        S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret"), "s3", "us-east-1").add_auth(request)
    mine = sign(method="PUT", host="bkt.s3.amazonaws.com", path="/k", query="", headers={},
                body_sha256=UNSIGNED_PAYLOAD, credentials=credentials, region="us-east-1",
                service="s3", amz_date="20261128T100000Z")
    assert mine["X-Amz-Content-SHA256"] == UNSIGNED_PAYLOAD
    assert mine["Authorization"] == request.headers["Authorization"]


@given(st.lists(st.sampled_from(["a", "b", ".", "..", ""]), max_size=8).map("/".join),
       st.booleans())
def test_dot_segments_are_removed_as_botocore_removes_them(path: str, absolute: bool) -> None:
    from botocore.utils import remove_dot_segments as botocore_remove

    path = ("/" + path) if absolute else path
    assert remove_dot_segments(path) == botocore_remove(path)


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(2200, 1, 1)))
def test_http_dates_read_as_email_utils_reads_them(moment: datetime.datetime) -> None:
    import email.utils

    from deltacommit.io.aws.light.protocol import http_date

    text = email.utils.format_datetime(moment.replace(microsecond=0, tzinfo=datetime.UTC),
                                       usegmt=True)
    assert http_date(text) == email.utils.parsedate_to_datetime(text)
    assert http_date("Sunday, 06-Nov-94 08:49:37 GMT") == datetime.datetime(
        1994, 11, 6, 8, 49, 37, tzinfo=datetime.UTC)
    assert http_date("not a date") is None
