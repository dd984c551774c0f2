"""A test emulator of Spark's S3DynamoDBLogStore, for mixed fleets where Spark's jars cannot run
(tests and ``deltacommit stress --peer spark-emulator``); not a writer to use in production.

Ported step by step from delta-io/delta at commit bb1057f4367f555b01e299fd1690d85aafc0ac4c:
``storage-s3-dynamodb/src/main/java/io/delta/storage/BaseExternalLogStore.java`` (``write``,
``fixDeltaLog``, ``copyFile``, ``listFrom``) and ``S3DynamoDBLogStore.java`` (the items and
requests).  What it reproduces, because each matters to a peer sharing the table:

* ``tablePath`` is the Hadoop-qualified table root, ``s3a://bucket/path``;
* step 0 fails if N.json exists; step 1 repairs an incomplete N-1 entry or requires N-1.json;
* the temp file ``.tmp/<N>.json.<uuid>`` is written, then ``PutItem`` with the legacy
  ``Expected: {fileName: {Exists: false}}`` condition (a failed condition is Spark's
  ``FileAlreadyExistsException``: a lost race);
* the copy is Hadoop's ``create(dst, overwrite=false)`` on S3A: an existence check, then a plain
  PUT (not atomic), and the temp file is kept;
* once the entry exists every failure of the copy or the completion is swallowed and the
  commit reported as made (``"ignoring recoverable error"``), including an N.json that appeared
  meanwhile (``FileAlreadyExistsException`` from the copy);
* completion is an unconditional ``PutItem`` of the whole item with ``expireTime`` = now + 1 day;
* ``fixDeltaLog`` copies only while N.json is absent, then completes, with up to 3 retries;
* ``listFrom`` repairs the latest entry if it is incomplete, then lists.

Above it, ``SparkEmulatorWriter.append`` is what a blind append of Delta's
``OptimisticTransaction`` does with that log store: read the latest version, write a data file,
commit at the next version, and on ``FileAlreadyExistsException`` retry at the version after.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import ClientError

EXPIRATION_DELAY_SECONDS = 86_400


class FileAlreadyExists(Exception):
    """java.nio.file.FileAlreadyExistsException."""


class SparkS3DynamoDBLogStore:
    def __init__(self, bucket: str, key: str, endpoint: str, table_name: str) -> None:
        self.bucket = bucket
        self.key = key.strip("/")
        self.table_path = f"s3a://{bucket}/{self.key}"
        self.table_name = table_name
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")

    # ---- paths
    def _log(self, name: str) -> str:
        return f"{self.key}/_delta_log/{name}"

    def _exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    # ---- S3DynamoDBLogStore: items
    def _item(self, file_name: str, temp_path: str, complete: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"tablePath": {"S": self.table_path}, "fileName": {"S": file_name},
                                "tempPath": {"S": temp_path},
                                "complete": {"S": "true" if complete else "false"}}
        if complete:
            item["expireTime"] = {"N": str(int(time.time()) + EXPIRATION_DELAY_SECONDS)}
        return item

    def _put_external_entry(self, file_name: str, temp_path: str, complete: bool,
                            overwrite: bool) -> None:
        args: dict[str, Any] = {"TableName": self.table_name,
                                "Item": self._item(file_name, temp_path, complete)}
        if not overwrite:
            args["Expected"] = {"fileName": {"Exists": False}}
        try:
            self.ddb.put_item(**args)
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise FileAlreadyExists(self._log(file_name)) from None
            raise

    def _get_external_entry(self, file_name: str) -> dict[str, Any] | None:
        r = self.ddb.get_item(TableName=self.table_name, ConsistentRead=True,
                              Key={"tablePath": {"S": self.table_path}, "fileName": {"S": file_name}})
        item: dict[str, Any] | None = r.get("Item")
        return item

    def _get_latest_external_entry(self) -> dict[str, Any] | None:
        r = self.ddb.query(TableName=self.table_name, ConsistentRead=True, ScanIndexForward=False,
                           Limit=1, KeyConditions={"tablePath": {
                               "ComparisonOperator": "EQ",
                               "AttributeValueList": [{"S": self.table_path}]}})
        items: list[dict[str, Any]] = r.get("Items", [])
        return items[0] if items else None

    # ---- BaseExternalLogStore
    def _copy_file(self, src: str, dst: str) -> None:
        """copyFile: Hadoop's create(dst, overwrite=false) on S3A checks, then writes."""
        body = self.s3.get_object(Bucket=self.bucket, Key=src)["Body"].read()
        if self._exists(dst):
            raise FileAlreadyExists(dst)
        self.s3.put_object(Bucket=self.bucket, Key=dst, Body=body)

    def fix_delta_log(self, item: dict[str, Any]) -> None:
        if item["complete"]["S"] == "true":
            return
        file_name = item["fileName"]["S"]
        temp_path = item["tempPath"]["S"]
        target = self._log(file_name)
        retry = 0
        copied = False
        while True:
            try:
                if not copied and not self._exists(target):
                    self._copy_file(self._log(temp_path), target)
                    copied = True
                self._put_external_entry(file_name, temp_path, True, overwrite=True)
                return
            except FileAlreadyExists:
                copied = True
            except Exception:
                if retry >= 3:
                    raise
            retry += 1

    def list_from_fix(self) -> None:
        """listFrom's repair of the latest entry (the listing itself is the caller's)."""
        item = self._get_latest_external_entry()
        if item is not None and item["complete"]["S"] != "true":
            self.fix_delta_log(item)

    def write(self, version: int, data: bytes) -> None:
        file_name = f"{version:020d}.json"
        path = self._log(file_name)
        if self._exists(path):                                   # step 0
            raise FileAlreadyExists(path)
        if version > 0:                                          # step 1
            prev_name = f"{version - 1:020d}.json"
            prev = self._get_external_entry(prev_name)
            if prev is not None and prev["complete"]["S"] != "true":
                self.fix_delta_log(prev)
            elif not self._exists(self._log(prev_name)):
                raise OSError(f"previous commit {prev_name} doesn't exist on the file system but "
                              "does in the external log store")
        else:
            first = self._get_external_entry(file_name)
            if first is not None and first["complete"]["S"] == "true" and not self._exists(path):
                raise OSError(f"Old entries for table {self.table_path} still exist in the "
                              "external log store")
        temp_path = f".tmp/{file_name}.{uuid.uuid4()}"            # step 2
        self.s3.put_object(Bucket=self.bucket, Key=self._log(temp_path), Body=data)
        self._put_external_entry(file_name, temp_path, False, overwrite=False)
        try:                                                     # steps 3 and 4
            self._copy_file(self._log(temp_path), path)
            self._put_external_entry(file_name, temp_path, True, overwrite=True)
        except Exception:
            pass

    def latest_version(self) -> int:
        """listFrom(0): repair, then list the commit files."""
        self.list_from_fix()
        best = -1
        start = ""
        try:
            hint = json.loads(self.s3.get_object(Bucket=self.bucket,
                                                 Key=self._log("_last_checkpoint"))["Body"].read())
            start = self._log(f"{int(hint['version']):020d}")
        except (ClientError, ValueError, KeyError, TypeError):
            pass
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._log(""), StartAfter=start):
            for obj in page.get("Contents", []):
                name = obj["Key"].rsplit("/", 1)[1]
                if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
                    best = max(best, int(name[:20]))
        return best


class SparkEmulatorWriter:
    """Blind appends as Delta's OptimisticTransaction makes them through the log store."""

    def __init__(self, log_store: SparkS3DynamoDBLogStore) -> None:
        self.ls = log_store

    def create(self, schema_string: str) -> None:
        actions = [{"commitInfo": self._info("CREATE TABLE")},
                   {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                   {"metaData": {"id": str(uuid.uuid4()),
                                 "format": {"provider": "parquet", "options": {}},
                                 "schemaString": schema_string, "partitionColumns": [],
                                 "configuration": {}, "createdTime": int(time.time() * 1000)}}]
        self.ls.write(0, _lines(actions))

    def append(self, data: pa.Table, max_attempts: int = 1000) -> int:
        """The version the append committed at."""
        buf = io.BytesIO()
        pq.write_table(data, buf)
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self.ls.s3.put_object(Bucket=self.ls.bucket, Key=f"{self.ls.key}/{name}", Body=buf.getvalue())
        add = {"add": {"path": name, "partitionValues": {}, "size": buf.tell(),
                       "modificationTime": int(time.time() * 1000), "dataChange": True,
                       "stats": json.dumps({"numRecords": data.num_rows})}}
        version = self.ls.latest_version() + 1
        for _ in range(max_attempts):
            try:
                self.ls.write(version, _lines([{"commitInfo": self._info("WRITE")}, add]))
                return version
            except FileAlreadyExists:
                # A blind append conflicts with nothing a concurrent append does: retry next.
                version = max(version + 1, self.ls.latest_version() + 1)
        raise RuntimeError("the emulated Spark writer could not commit")

    @staticmethod
    def _info(operation: str) -> dict[str, Any]:
        return {"timestamp": int(time.time() * 1000), "operation": operation,
                "operationParameters": {"mode": "Append"}, "isBlindAppend": True,
                "engineInfo": "Apache-Spark (emulated) Delta-Lake/S3DynamoDBLogStore"}


def _lines(actions: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()
