"""S3 through pyarrow's own S3 file system, for processes without boto3.

Spark executors have pyarrow but rarely boto3.  What a task does on S3 needs no atomic
primitive: it writes data files under fresh unique names and reads data files and deletion
vectors.  So when boto3 is missing, ``s3://`` opens this store: the same options (endpoint,
region, keys, ``AWS_ALLOW_HTTP``) resolved the same way, reads and plain writes through
``pyarrow.fs.S3FileSystem``, and every conditional write refused with the fix, since committing
needs S3's conditional requests (or DynamoDB) through boto3.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, cast

from deltacommit.errors import ObjectNotFoundError, StorageConfigError, StorageError
from deltacommit.io.aws.config import AwsConfig
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode
from deltacommit.io.storage.s3_location import parse_s3_uri


def _filesystem(config: AwsConfig) -> Any:
    from pyarrow import fs

    kwargs: dict[str, Any] = {"region": config.region or "us-east-1"}
    if config.access_key_id and config.secret_access_key:
        kwargs.update(access_key=config.access_key_id, secret_key=config.secret_access_key,
                      session_token=config.session_token)
    if config.endpoint_url:
        scheme, _, rest = config.endpoint_url.partition("://")
        kwargs.update(endpoint_override=rest.rstrip("/") or scheme, scheme=scheme or "https")
    if config.addressing_style == "virtual":
        kwargs["force_virtual_addressing"] = True
    return fs.S3FileSystem(**kwargs)


class ArrowS3Store(ObjectStore):
    """Reads and plain writes on S3 without boto3 (see the module docstring)."""

    supports_conditional_put = False

    def __init__(self, bucket: str, prefix: str, config: AwsConfig, scheme: str = "s3") -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.config = config
        self.scheme = scheme
        self.uri = f"{scheme}://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._fs = _filesystem(config)

    @classmethod
    def from_uri(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> ArrowS3Store:
        scheme, bucket, prefix = parse_s3_uri(uri)
        return cls(bucket, prefix, resolve_aws_config(storage_options), scheme)

    def __repr__(self) -> str:
        return f"ArrowS3Store({self.uri!r})"

    def _key(self, path: str) -> str:
        return f"{self.bucket}/{self.prefix}/{path}" if self.prefix else f"{self.bucket}/{path}"

    def _failed(self, op: str, path: str, e: Exception) -> StorageError:
        return StorageError(op, f"{self.uri}/{path}", str(e))

    def get(self, path: str) -> bytes:
        try:
            with self._fs.open_input_stream(self._key(path)) as f:
                return cast(bytes, f.read())
        except FileNotFoundError:
            raise ObjectNotFoundError("get", f"{self.uri}/{path}", "no such object") from None
        except OSError as e:
            raise self._failed("get", path, e) from None

    def head(self, path: str) -> ObjectMeta:
        from pyarrow import fs

        try:
            info = self._fs.get_file_info(self._key(path))
        except OSError as e:
            raise self._failed("head", path, e) from None
        if info.type != fs.FileType.File:
            raise ObjectNotFoundError("get", f"{self.uri}/{path}", "no such object")
        mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
        return ObjectMeta(path, int(info.size or 0), mtime)

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        if mode.conditional:
            raise StorageConfigError(
                f"{self.uri}/{path}: a conditional write ({mode.operation}) on S3 needs boto3, "
                "which this process lacks: pip install 'deltacommit[s3]'")
        try:
            with self._fs.open_output_stream(self._key(path)) as f:
                f.write(data)
        except OSError as e:
            raise self._failed("put", path, e) from None
        return self.head(path)

    def delete(self, path: str) -> None:
        try:
            self._fs.delete_file(self._key(path))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._failed("delete", path, e) from None

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        from pyarrow import fs

        directory = prefix.rpartition("/")[0]
        base = self._key(directory).rstrip("/") if directory else self._key("").rstrip("/")
        try:
            infos = self._fs.get_file_info(fs.FileSelector(base, recursive=True,
                                                           allow_not_found=True))
        except OSError as e:
            raise self._failed("list", prefix, e) from None
        root = self._key("")
        found = []
        for info in infos:
            if info.type != fs.FileType.File:
                continue
            rel = info.path[len(root):]
            if rel.startswith(prefix) and (start_after is None or rel > start_after):
                mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
                found.append(ObjectMeta(rel, int(info.size or 0), mtime))
        yield from sorted(found, key=lambda m: m.path)

    def open_input(self, path: str) -> BinaryIO:
        try:
            return cast(BinaryIO, self._fs.open_input_file(self._key(path)))
        except FileNotFoundError:
            raise ObjectNotFoundError("get", f"{self.uri}/{path}", "no such object") from None
        except OSError as e:
            raise self._failed("open", path, e) from None

    def child(self, prefix: str) -> ObjectStore:
        sub = f"{self.prefix}/{prefix.strip('/')}" if self.prefix else prefix.strip("/")
        return ArrowS3Store(self.bucket, sub, self.config, self.scheme)


__all__ = ["ArrowS3Store"]
