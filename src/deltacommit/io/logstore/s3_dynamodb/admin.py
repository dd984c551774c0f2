"""Creating and describing the protocol's table: ``deltacommit dynamodb create-table`` and the
schema check every log store makes once (``client``), with the requests both DynamoDB protocols
share in ``io.aws.dynamodb_admin``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltacommit.errors import LogStoreError
from deltacommit.io.aws.dynamodb_admin import (
    admin_error,
    create_table,
    endpoint_of,
    key_schema,
    keyed_by,
    wait_until_active,
)
from deltacommit.io.aws.errors import client_errors, error_code, error_message
from deltacommit.io.logstore.s3_dynamodb.entry import ATTR_EXPIRE_TIME, ATTR_FILE_NAME, ATTR_TABLE_PATH
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["TableSetup", "check_key_schema", "create_log_table", "create_table_hint", "ttl_status"]

def create_table_hint(table_name: str) -> str:
    return (f"create it with `deltacommit dynamodb create-table --table-name {table_name}` "
            "(PAY_PER_REQUEST, TTL on expireTime), or as Spark's documentation describes: "
            f"aws dynamodb create-table --table-name {table_name} --attribute-definitions "
            "AttributeName=tablePath,AttributeType=S AttributeName=fileName,AttributeType=S "
            "--key-schema AttributeName=tablePath,KeyType=HASH AttributeName=fileName,KeyType=RANGE "
            "--billing-mode PAY_PER_REQUEST")


def check_key_schema(description: Mapping[str, Any], table_name: str, endpoint: str) -> None:
    """LogStoreError unless the table is keyed (tablePath S HASH, fileName S RANGE)."""
    if not keyed_by(description, ATTR_TABLE_PATH, ATTR_FILE_NAME):
        keys, types = key_schema(description)
        found = ", ".join(f"{name} {types.get(name, '?')} {kind}" for name, kind in keys.items())
        raise LogStoreError(
            f"DynamoDB table {table_name} at {endpoint} has the key schema ({found}), but Spark's "
            f"S3DynamoDBLogStore protocol needs ({ATTR_TABLE_PATH} S HASH, {ATTR_FILE_NAME} S RANGE); "
            "point DELTA_DYNAMO_TABLE_NAME at a table made for it, or "
            + create_table_hint("<new name>"))


@dataclass(frozen=True, slots=True)
class TableSetup:
    """What ``create_log_table`` did."""

    created: bool
    status: str
    ttl: str
    endpoint: str
    ttl_warning: str = ""


def create_log_table(client: DynamoDBClient, table_name: str, *,
                     billing_mode: str = "PAY_PER_REQUEST", timeout: float = 60.0,
                     clock: Clock = SYSTEM_CLOCK) -> TableSetup:
    """Create the protocol's table (or accept an existing one keyed right), wait until ACTIVE,
    and enable TTL on ``expireTime`` so completed entries are removed after their delay.

    Without TTL, complete entries pile up forever (Spark's store does not enable it either);
    an endpoint without TTL support (dynalite) is reported in ``ttl_warning``, not refused.
    """
    endpoint = endpoint_of(client)
    what = f"DynamoDB table {table_name} at {endpoint}"
    created = create_table(client, table_name, hash_key=ATTR_TABLE_PATH, range_key=ATTR_FILE_NAME,
                           billing_mode=billing_mode, what=what)
    table = wait_until_active(client, table_name, what=what, clock=clock, timeout=timeout, poll=0.05)
    check_key_schema(table, table_name, endpoint)
    warning = ""
    try:
        client.update_time_to_live(TableName=table_name, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": ATTR_EXPIRE_TIME})
    except client_errors() as e:
        code, message = error_code(e), error_message(e)
        if code == "ValidationException" and "already enabled" in message.lower():
            pass
        elif code in ("UnknownOperationException", "UnrecognizedClientException",
                      "ValidationException", "AccessDeniedException"):
            warning = (f"TTL could not be enabled on {ATTR_EXPIRE_TIME} ({code}: {message}); "
                       "completed entries will not expire: enable it with aws dynamodb "
                       f"update-time-to-live --table-name {table_name} --time-to-live-specification "
                       f"Enabled=true,AttributeName={ATTR_EXPIRE_TIME}")
        else:
            raise admin_error("UpdateTimeToLive", what, e) from e
    return TableSetup(created, "ACTIVE", ttl_status(client, table_name), endpoint, warning)


def ttl_status(client: DynamoDBClient, table_name: str) -> str:
    """``enabled on expireTime``, ``disabled``, ... or why it cannot be known."""
    try:
        description = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    except client_errors() as e:
        return f"unknown ({error_code(e)}: the endpoint does not report TTL)"
    status = str(description.get("TimeToLiveStatus", "DISABLED")).lower()
    attribute = description.get("AttributeName")
    if attribute and status in ("enabled", "enabling"):
        text = f"{status} on {attribute}"
        if attribute != ATTR_EXPIRE_TIME:
            text += f" (the protocol's entries expire by {ATTR_EXPIRE_TIME}: they will never expire)"
        return text
    return f"{status} (completed entries never expire)"
