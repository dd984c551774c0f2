"""The boto3-free S3 store (what Spark executors without boto3 use) against single-threaded
moto: data files written through it are the bytes the boto3 store reads, listings agree, and a
conditional write is refused with the fix instead of being made unconditionally."""

from __future__ import annotations

import pytest

from deltacommit.errors import ObjectNotFoundError, StorageConfigError
from deltacommit.io.storage.arrow_s3 import ArrowS3Store
from deltacommit.io.storage.s3 import S3Store
from deltacommit.testing import S3Bucket


def test_reads_and_plain_writes_agree_with_the_boto3_store(s3_bucket: S3Bucket) -> None:
    uri = f"{s3_bucket.uri}/t"
    arrow = ArrowS3Store.from_uri(uri, s3_bucket.storage_options)
    boto = S3Store.from_uri(uri, s3_bucket.storage_options)
    meta = arrow.put("day=1/part-0.parquet", b"data-0")
    boto.put("day=1/part-1.parquet", b"data-1")
    assert meta.size == 6
    assert boto.get("day=1/part-0.parquet") == b"data-0"
    assert arrow.get("day=1/part-1.parquet") == b"data-1"
    assert arrow.open_input("day=1/part-1.parquet").read() == b"data-1"
    listed = [m.path for m in arrow.list("day=1/")]
    assert listed == [m.path for m in boto.list("day=1/")] == ["day=1/part-0.parquet",
                                                                "day=1/part-1.parquet"]
    assert [m.path for m in arrow.list("day=1/", start_after="day=1/part-0.parquet")] == [
        "day=1/part-1.parquet"]
    assert arrow.child("day=1").get("part-0.parquet") == b"data-0"
    arrow.delete("day=1/part-0.parquet")
    arrow.delete("day=1/never-there")
    with pytest.raises(ObjectNotFoundError, match=r"part-0\.parquet"):
        boto.get("day=1/part-0.parquet")
    with pytest.raises(ObjectNotFoundError, match=r"part-0\.parquet"):
        arrow.get("day=1/part-0.parquet")


def test_conditional_writes_are_refused_naming_the_fix(s3_bucket: S3Bucket) -> None:
    arrow = ArrowS3Store.from_uri(f"{s3_bucket.uri}/t", s3_bucket.storage_options)
    with pytest.raises(StorageConfigError, match=r"_delta_log/00000000000000000000.json.*"
                                                 r"needs boto3.*deltacommit\[s3\]"):
        arrow.put_if_absent("_delta_log/00000000000000000000.json", b"{}")
    assert not arrow.exists("_delta_log/00000000000000000000.json")
