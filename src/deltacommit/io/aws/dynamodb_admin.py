"""Administration of the DynamoDB tables the commit protocols use: create, describe, wait.

Both DynamoDB protocols (Spark's S3DynamoDBLogStore entries, object_store's DynamoCommit leases)
need a table keyed by two strings, created once by an operator or a test before the first
commit, and ACTIVE before that commit is attempted.  Which keys and what TTL attribute is the
protocol's business (``logstore.s3_dynamodb.admin.create_log_table``,
``logstore.dynamo_commit.leases.create_lease_table``); creating, waiting and reading the key
schema are the same for both and live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deltacommit.errors import LogStoreError
from deltacommit.io.aws.errors import TABLE_EXISTS, TABLE_MISSING, client_errors, error_code, error_message
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: Capacity of a PROVISIONED table created here (Spark's defaults when it creates its own).
PROVISIONED_CAPACITY = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
DEFAULT_WAIT_SECONDS = 60.0
DEFAULT_POLL_SECONDS = 0.1


def endpoint_of(client: Any) -> str:
    """Where a client sends its requests, for messages (``AWS`` for the default endpoints)."""
    return str(getattr(getattr(client, "meta", None), "endpoint_url", "") or "AWS")


def admin_error(api: str, what: str, e: Exception) -> LogStoreError:
    """``<api> of <what> failed: <code>: <message>``."""
    return LogStoreError(f"{api} of {what} failed: {error_code(e) or 'error'}: {error_message(e)}")


def create_table(client: DynamoDBClient, name: str, *, hash_key: str, range_key: str,
                 billing_mode: str = "PAY_PER_REQUEST", what: str | None = None) -> bool:
    """Create a table keyed (``hash_key`` S HASH, ``range_key`` S RANGE); False if a table of
    that name already exists (whatever its keys: check them with ``key_schema``)."""
    args: dict[str, Any] = {
        "TableName": name,
        "AttributeDefinitions": [{"AttributeName": hash_key, "AttributeType": "S"},
                                 {"AttributeName": range_key, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": hash_key, "KeyType": "HASH"},
                      {"AttributeName": range_key, "KeyType": "RANGE"}],
    }
    if billing_mode.upper() == "PROVISIONED":
        args["BillingMode"] = "PROVISIONED"
        args["ProvisionedThroughput"] = dict(PROVISIONED_CAPACITY)
    else:
        args["BillingMode"] = "PAY_PER_REQUEST"
    try:
        client.create_table(**args)
    except client_errors() as e:
        if error_code(e) != TABLE_EXISTS:
            raise admin_error("CreateTable", what or f"DynamoDB table {name}", e) from e
        return False
    return True


def wait_until_active(client: DynamoDBClient, name: str, *, what: str | None = None,
                      clock: Clock = SYSTEM_CLOCK, timeout: float = DEFAULT_WAIT_SECONDS,
                      poll: float = DEFAULT_POLL_SECONDS) -> Mapping[str, Any]:
    """The table's description once it is ACTIVE; LogStoreError after ``timeout`` seconds.

    A table not found yet counts as not yet active (a table just created may take a moment to
    be described); a description without a status (some emulators) as active.
    """
    what = what or f"DynamoDB table {name}"
    deadline = clock.monotonic() + timeout
    while True:
        try:
            table: Mapping[str, Any] = client.describe_table(TableName=name)["Table"]
            status: str | None = str(table.get("TableStatus", "ACTIVE"))
        except client_errors() as e:
            if error_code(e) != TABLE_MISSING:
                raise admin_error("DescribeTable", what, e) from e
            table, status = {}, None
        if status == "ACTIVE":
            return table
        if clock.monotonic() > deadline:
            raise LogStoreError(f"{what} is still {status or 'not found'} after {timeout:.0f} s")
        clock.sleep(poll)


def key_schema(description: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """``({attribute: HASH | RANGE}, {attribute: S | N | B})`` of a table's description."""
    keys = {k["AttributeName"]: k["KeyType"] for k in description.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"]
             for a in description.get("AttributeDefinitions", [])}
    return keys, types


def keyed_by(description: Mapping[str, Any], hash_key: str, range_key: str) -> bool:
    """Whether the table is keyed (``hash_key`` S HASH, ``range_key`` S RANGE)."""
    keys, types = key_schema(description)
    return (keys == {hash_key: "HASH", range_key: "RANGE"}
            and types.get(hash_key) == "S" and types.get(range_key) == "S")
