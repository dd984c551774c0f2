"""The protocol's DynamoDB item, Spark's ``ExternalCommitEntry``, and its codec.

=============  ====  =========================================================================
``tablePath``  S     HASH key: the table URI without a trailing slash (``s3a://`` when shared
                     with Spark, see ``DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME``)
``fileName``   S     RANGE key: ``<20-digit version>.json``
``tempPath``   S     ``.tmp/<fileName>.<uuid>``, relative to ``_delta_log``
``complete``   S     the strings ``"true"`` / ``"false"``
``expireTime`` N     epoch seconds, only on complete entries (TTL attribute; default now + 1 day)
=============  ====  =========================================================================

Only temp names the protocol's writers create are ever acted on: ``.tmp/<N>.json.<uuid>`` for
entry N (Spark, deltacommit) and ``_commit_<uuid>.json.tmp`` (delta-rs).  An incomplete entry
naming anything else (a commit file, ``_last_checkpoint``, a checkpoint, another version's temp
file) is corrupt: reported with an error, never copied, never deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltacommit.errors import LogStoreError
from deltacommit.protocol.log.names import LOG_DIR

__all__ = ["ATTR_COMPLETE", "ATTR_EXPIRE_TIME", "ATTR_FILE_NAME", "ATTR_TABLE_PATH", "ATTR_TEMP_PATH",
           "CommitEntry", "entry_key"]

ATTR_TABLE_PATH = "tablePath"
ATTR_FILE_NAME = "fileName"
ATTR_TEMP_PATH = "tempPath"
ATTR_COMPLETE = "complete"
ATTR_EXPIRE_TIME = "expireTime"


_COMMIT_NAME = re.compile(r"^\d{20}\.json$")
_TOKEN = r"[0-9A-Za-z][0-9A-Za-z\-]*"
_DELTA_RS_TEMP = re.compile(rf"_commit_{_TOKEN}\.json\.tmp")


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """One item of the protocol (Spark's ``ExternalCommitEntry``)."""

    table_path: str
    file_name: str
    temp_path: str
    complete: bool
    expire_time: int | None = None

    @property
    def version(self) -> int:
        return int(self.file_name.split(".", 1)[0])

    @property
    def temp_key(self) -> str:
        """The temp file's path relative to the table root."""
        return f"{LOG_DIR}/{self.temp_path}"

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            ATTR_TABLE_PATH: {"S": self.table_path},
            ATTR_FILE_NAME: {"S": self.file_name},
            ATTR_TEMP_PATH: {"S": self.temp_path},
            ATTR_COMPLETE: {"S": "true" if self.complete else "false"},
        }
        if self.expire_time is not None:
            item[ATTR_EXPIRE_TIME] = {"N": str(self.expire_time)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any], where: str) -> CommitEntry:
        """Parse an item; LogStoreError naming it if it is not a protocol entry."""
        try:
            table_path = item[ATTR_TABLE_PATH]["S"]
            file_name = item[ATTR_FILE_NAME]["S"]
            temp_path = item[ATTR_TEMP_PATH]["S"]
            complete = item[ATTR_COMPLETE]["S"]
            expire = item.get(ATTR_EXPIRE_TIME)
            expire_time = None if expire is None else int(float(expire["N"]))
        except (KeyError, TypeError, ValueError) as e:
            raise LogStoreError(
                f"{where}: item {_short_item(item)} is not an S3DynamoDBLogStore entry "
                f"(expected string attributes {ATTR_TABLE_PATH}, {ATTR_FILE_NAME}, "
                f"{ATTR_TEMP_PATH}, {ATTR_COMPLETE} and a number {ATTR_EXPIRE_TIME}; {e!r})") from None
        if not _COMMIT_NAME.match(file_name):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} does not name a "
                                "commit file (expected <20-digit version>.json)")
        if complete not in ("true", "false"):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} has "
                                f"{ATTR_COMPLETE}={complete!r}; expected the string true or false")
        if temp_path.startswith("/") or "://" in temp_path or ".." in temp_path.split("/"):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} has {ATTR_TEMP_PATH}="
                                f"{temp_path!r}; expected a path relative to _delta_log")
        if complete == "false" and not _is_temp_name(temp_path, file_name):
            # Repair copies the temp file to N.json and, for delta-rs's names, deletes it: a
            # tempPath naming anything else (a commit, _last_checkpoint, a checkpoint) would
            # copy or delete a committed file.  Never acted on; reported instead.
            raise LogStoreError(
                f"{where}: incomplete entry {table_path} / {file_name} has {ATTR_TEMP_PATH}="
                f"{temp_path!r}, which is not a temp file name Spark (.tmp/{file_name}.<uuid>) "
                "or delta-rs (_commit_<uuid>.json.tmp) writes; the entry is corrupt and nothing "
                "was copied or deleted. Inspect it, then delete the item if the commit is not "
                "needed")
        return cls(table_path, file_name, temp_path, complete == "true", expire_time)


def _short_item(item: Mapping[str, Any]) -> str:
    text = repr(dict(item))
    return text if len(text) <= 300 else text[:300] + "…"


def entry_key(table_path: str, file_name: str) -> dict[str, Any]:
    """The item key of entry ``file_name`` of ``table_path``."""
    return {ATTR_TABLE_PATH: {"S": table_path}, ATTR_FILE_NAME: {"S": file_name}}


def _is_temp_name(temp_path: str, file_name: str) -> bool:
    """Whether ``temp_path`` is a temp file name one of the protocol's writers creates for
    ``file_name``: Spark's and ours ``.tmp/<N>.json.<uuid>``, delta-rs's
    ``_commit_<uuid>.json.tmp``."""
    prefix = f".tmp/{file_name}."
    if temp_path.startswith(prefix):
        return re.fullmatch(_TOKEN, temp_path[len(prefix):]) is not None
    return _DELTA_RS_TEMP.fullmatch(temp_path) is not None
