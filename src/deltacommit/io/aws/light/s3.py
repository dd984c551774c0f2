"""The light S3 client: the operations the S3 store and the DynamoDB log stores call, with
botocore's method names, arguments, result dicts and ``ClientError`` codes.

``get_object``, ``head_object``, ``put_object`` (``IfNoneMatch`` / ``IfMatch``),
``delete_object``, ``delete_objects``, ``list_objects_v2`` and ``copy_object`` are sent here;
anything else, and every request on a bucket whose name needs botocore's endpoint rules (ARNs,
access points, directory buckets), goes to a botocore client made on first need.  As the
botocore clients made for the S3 store, it makes one attempt per call (the store retries and
counts every request), sends no ``Expect: 100-continue`` and no checksums beyond what S3
requires (``Content-MD5`` of ``DeleteObjects``), and signs the payload's SHA-256, as botocore
does without a checksum header.  ``ListObjectsV2`` asks for URL-encoded keys and decodes them,
as botocore does, so that any key survives the XML.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote_plus
from xml.etree import ElementTree

from deltacommit.io.aws.light.client import LightClient
from deltacommit.io.aws.light.errors import ClientError
from deltacommit.io.aws.light.http import HttpPool, Response
from deltacommit.io.aws.light.protocol import http_date, metadata, s3_error_response, send
from deltacommit.io.aws.light.settings import S3Settings, standard_region, unserved_bucket
from deltacommit.io.aws.light.sigv4 import payload_hash

__all__ = ["LightS3Client"]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
#: How AWS answers a request sent to a bucket's wrong region (``PermanentRedirect``,
#: ``TemporaryRedirect``, ``AuthorizationHeaderMalformed``), with ``x-amz-bucket-region``.
_REDIRECTED = frozenset({301, 307, 400})


class _Body:
    """A response body read already (botocore's ``StreamingBody`` offers ``read``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self, amt: int | None = None) -> bytes:
        data, self._data = (self._data, b"") if amt is None else (self._data[:amt], self._data[amt:])
        return data

    def close(self) -> None:
        self._data = b""


class LightS3Client(LightClient[S3Settings]):
    """An S3 client without botocore for settings ``light_s3`` accepted; thread-safe."""

    def __init__(self, settings: S3Settings, pool: HttpPool, endpoint_url: str,
                 fallback: Callable[[], Any]) -> None:
        super().__init__(settings, pool, endpoint_url, fallback)
        #: Buckets AWS said are in another region than the client's (``_send``).
        self._regions: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        # Operations the light client does not send itself: botocore's client does.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._botocore(), name)

    # ----------------------------------------------------------------- operations

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if unserved_bucket(Bucket):
            return self._botocore().get_object(Bucket=Bucket, Key=Key)  # type: ignore[no-any-return]
        response = self._send("GetObject", "GET", Bucket, Key)
        return {**_object_fields(response), "Body": _Body(response.body),
                "ResponseMetadata": metadata(response)}

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if unserved_bucket(Bucket):
            return self._botocore().head_object(Bucket=Bucket, Key=Key)  # type: ignore[no-any-return]
        response = self._send("HeadObject", "HEAD", Bucket, Key)
        return {**_object_fields(response), "ResponseMetadata": metadata(response)}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes = b"", IfNoneMatch: str | None = None,
                   IfMatch: str | None = None) -> dict[str, Any]:
        if unserved_bucket(Bucket):
            args: dict[str, Any] = {"Bucket": Bucket, "Key": Key, "Body": Body}
            if IfNoneMatch is not None:
                args["IfNoneMatch"] = IfNoneMatch
            if IfMatch is not None:
                args["IfMatch"] = IfMatch
            return self._botocore().put_object(**args)  # type: ignore[no-any-return]
        headers: dict[str, str] = {}
        if IfNoneMatch is not None:
            headers["If-None-Match"] = IfNoneMatch
        if IfMatch is not None:
            headers["If-Match"] = IfMatch
        response = self._send("PutObject", "PUT", Bucket, Key, headers=headers, body=bytes(Body))
        out: dict[str, Any] = {"ResponseMetadata": metadata(response)}
        if "etag" in response.headers:
            out["ETag"] = response.headers["etag"]
        return out

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if unserved_bucket(Bucket):
            return self._botocore().delete_object(Bucket=Bucket, Key=Key)  # type: ignore[no-any-return]
        response = self._send("DeleteObject", "DELETE", Bucket, Key)
        return {"ResponseMetadata": metadata(response)}

    def delete_objects(self, *, Bucket: str, Delete: Mapping[str, Any]) -> dict[str, Any]:
        if unserved_bucket(Bucket):
            return self._botocore().delete_objects(Bucket=Bucket, Delete=Delete)  # type: ignore[no-any-return]
        root = ElementTree.Element("Delete", xmlns=_NS[1:-1])
        for item in Delete.get("Objects", []):
            ElementTree.SubElement(ElementTree.SubElement(root, "Object"), "Key").text = item["Key"]
        if "Quiet" in Delete:
            ElementTree.SubElement(root, "Quiet").text = "true" if Delete["Quiet"] else "false"
        body = ElementTree.tostring(root, encoding="utf-8", xml_declaration=False)
        headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode(),
                   "Content-Type": "application/xml"}
        response = self._send("DeleteObjects", "POST", Bucket, "", params=[("delete", "")],
                              headers=headers, body=body)
        tree = _xml(response)
        out: dict[str, Any] = {"ResponseMetadata": metadata(response)}
        deleted = [{"Key": _text(e, "Key")} for e in tree.iter(f"{_NS}Deleted")]
        errors = [{"Key": _text(e, "Key"), "Code": _text(e, "Code"), "Message": _text(e, "Message")}
                  for e in tree.iter(f"{_NS}Error")]
        if deleted:
            out["Deleted"] = deleted
        if errors:
            out["Errors"] = errors
        return out

    def list_objects_v2(self, *, Bucket: str, Prefix: str | None = None, MaxKeys: int | None = None,
                        ContinuationToken: str | None = None, StartAfter: str | None = None,
                        Delimiter: str | None = None) -> dict[str, Any]:
        given = {"Prefix": Prefix, "MaxKeys": MaxKeys, "ContinuationToken": ContinuationToken,
                 "StartAfter": StartAfter, "Delimiter": Delimiter}
        if unserved_bucket(Bucket):
            return self._botocore().list_objects_v2(  # type: ignore[no-any-return]
                Bucket=Bucket, **{k: v for k, v in given.items() if v is not None})
        names = {"Prefix": "prefix", "MaxKeys": "max-keys", "ContinuationToken": "continuation-token",
                 "StartAfter": "start-after", "Delimiter": "delimiter"}
        params = [("list-type", "2"), ("encoding-type", "url")]
        params += [(names[k], str(v)) for k, v in given.items() if v is not None]
        response = self._send("ListObjectsV2", "GET", Bucket, "", params=params)
        tree = _xml(response)
        out: dict[str, Any] = {"ResponseMetadata": metadata(response),
                               "IsTruncated": _text(tree, "IsTruncated") == "true",
                               "Name": _text(tree, "Name"),
                               "KeyCount": int(_text(tree, "KeyCount") or 0)}
        contents = []
        for item in tree.findall(f"{_NS}Contents"):
            entry: dict[str, Any] = {"Key": unquote_plus(_text(item, "Key")),
                                     "Size": int(_text(item, "Size") or 0)}
            modified = _text(item, "LastModified")
            if modified:
                entry["LastModified"] = _iso_datetime(modified)
            if item.find(f"{_NS}ETag") is not None:
                entry["ETag"] = _text(item, "ETag")
            contents.append(entry)
        if contents:
            out["Contents"] = contents
        prefixes = [{"Prefix": unquote_plus(_text(p, "Prefix"))}
                    for p in tree.findall(f"{_NS}CommonPrefixes")]
        if prefixes:
            out["CommonPrefixes"] = prefixes
        token = tree.find(f"{_NS}NextContinuationToken")
        if token is not None and token.text:
            out["NextContinuationToken"] = token.text
        for name in ("Prefix", "StartAfter", "Delimiter"):
            if tree.find(f"{_NS}{name}") is not None:
                out[name] = unquote_plus(_text(tree, name))
        return out

    def copy_object(self, *, Bucket: str, Key: str, CopySource: Mapping[str, str] | str) -> dict[str, Any]:
        source = (CopySource if isinstance(CopySource, str)
                  else f"{CopySource['Bucket']}/{CopySource['Key']}")
        if unserved_bucket(Bucket) or unserved_bucket(source.split("/", 1)[0]) or "?" in source:
            return self._botocore().copy_object(Bucket=Bucket, Key=Key, CopySource=CopySource)  # type: ignore[no-any-return]
        headers = {"x-amz-copy-source": quote(source, safe="/~")}
        response = self._send("CopyObject", "PUT", Bucket, Key, headers=headers)
        if b"<Error>" in response.body:
            # S3 can fail a copy after answering 200; botocore reads that as a 500.
            error = s3_error_response(response)
            error["ResponseMetadata"]["HTTPStatusCode"] = 500
            raise ClientError(error, "CopyObject")
        tree = _xml(response)
        result: dict[str, Any] = {"ETag": _text(tree, "ETag")}
        modified = _text(tree, "LastModified")
        if modified:
            result["LastModified"] = _iso_datetime(modified)
        return {"CopyObjectResult": result, "ResponseMetadata": metadata(response)}

    # ----------------------------------------------------------------- one request

    def _send(self, operation: str, method: str, bucket: str, key: str, *,
              params: list[tuple[str, str]] | None = None, headers: Mapping[str, str] | None = None,
              body: bytes = b"") -> Response:
        settings = self._settings
        region = self._regions.get(bucket)
        if region is not None:
            settings = replace(settings, region=region)
        response = self._exchange(settings, operation, method, bucket, key, params,
                                  headers or {}, body)
        # A bucket in another region than the client's: AWS answers with the bucket's region
        # and without executing the request; botocore's S3 client then sends it again there
        # (and remembers the region), and so does this one.  Custom endpoints are left alone.
        moved = response.headers.get("x-amz-bucket-region")
        if (response.status in _REDIRECTED and settings.endpoint is None and moved
                and moved != settings.region and standard_region(moved)):
            self._regions[bucket] = moved
            response = self._exchange(replace(settings, region=moved), operation, method, bucket,
                                      key, params, headers or {}, body)
        if response.status >= 300:
            raise ClientError(s3_error_response(response), operation)
        return response

    def _exchange(self, settings: S3Settings, operation: str, method: str, bucket: str, key: str,
                  params: list[tuple[str, str]] | None, headers: Mapping[str, str],
                  body: bytes) -> Response:
        """One signed HTTP request to where ``settings`` locate ``bucket``."""
        self._announce("s3", operation)
        endpoint, base = settings.locate(bucket)
        path = base + "/" + quote(key, safe="/~") if key else (base or "/")
        return send(self._pool, endpoint, method=method, path=path, params=params,
                    headers=headers, body=body, body_sha256=payload_hash(body),
                    credentials=settings.credentials, region=settings.region, service="s3")


def endpoint_url_of(settings: S3Settings, given: str | None) -> str:
    """``meta.endpoint_url`` as botocore reports it: the endpoint given, or S3's regional one."""
    if given is not None:
        return given
    if settings.endpoint is not None:
        return settings.endpoint.url
    region = settings.region
    return "https://s3.amazonaws.com" if region == "us-east-1" else f"https://s3.{region}.amazonaws.com"


def _object_fields(response: Response) -> dict[str, Any]:
    headers = response.headers
    out: dict[str, Any] = {}
    if "content-length" in headers:
        out["ContentLength"] = int(headers["content-length"])
    if "etag" in headers:
        out["ETag"] = headers["etag"]
    if "last-modified" in headers:
        modified = http_date(headers["last-modified"])
        if modified is not None:
            out["LastModified"] = modified
    if "content-type" in headers:
        out["ContentType"] = headers["content-type"]
    return out


def _xml(response: Response) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(response.body)
    except ElementTree.ParseError as e:
        error = {"Error": {"Code": "InvalidResponse",
                           "Message": f"the answer is not the XML S3 sends ({e})"},
                 "ResponseMetadata": metadata(response)}
        raise ClientError(error, "S3") from None


def _text(element: ElementTree.Element, name: str) -> str:
    found = element.find(f"{_NS}{name}")
    if found is None:
        found = element.find(name)
    return "" if found is None or found.text is None else found.text


def _iso_datetime(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


