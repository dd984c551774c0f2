"""Fixtures of the fault tests: a table of each log store kind, and the fault proxy."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pytest

from deltacommit.io.logstore.dynamo_commit.leases import create_lease_table
from deltacommit.testing import FaultInjectingProxy, MotoServer, S3Bucket, unique_name

from ..s3.helpers import dynamo_options, dynamodb_client, new_log_table
from .harness import LEASE_TIMEOUT_MS, Rig


class MakeRig(Protocol):
    def __call__(self, kind: str, configuration: Mapping[str, str] | None = None) -> Rig: ...


@pytest.fixture
def make_rig(tmp_path: Path, request: pytest.FixtureRequest) -> MakeRig:
    """``make_rig(kind, configuration)``: a new table of that log store kind (version 0).

    Kinds: ``local`` and ``s3`` (conditional put), ``dynamodb`` / ``dynamodb-dynalite``
    (Spark's S3DynamoDBLogStore protocol, log table on moto or dynalite), ``dynamo-commit``
    (object_store's leases, lease table on moto).
    """

    def make(kind: str, configuration: Mapping[str, str] | None = None) -> Rig:
        if kind == "local":
            rig = Rig("local", str(tmp_path / "t"), {})
            rig.create(configuration)
            return rig
        moto: MotoServer = request.getfixturevalue("moto_server")
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        uri = f"{bucket.uri}/t"
        s3 = dict(bucket.storage_options)
        if kind == "s3":
            rig = Rig("s3", uri, s3, s3)
        elif kind in ("dynamodb", "dynamodb-dynalite"):
            endpoint = (moto.endpoint if kind == "dynamodb"
                        else request.getfixturevalue("dynalite_server").endpoint)
            table = new_log_table(endpoint)
            rig = Rig("dynamodb", uri, dynamo_options(bucket, endpoint, table), s3, endpoint)
        elif kind == "dynamo-commit":
            lease_table = unique_name("leases")
            create_lease_table(dynamodb_client(moto.endpoint), lease_table)
            options = {**s3, "conditional_put": f"dynamo:{lease_table}:{LEASE_TIMEOUT_MS}"}
            rig = Rig("dynamo-commit", uri, options, s3, moto.endpoint, lease_table)
        else:
            raise AssertionError(f"unknown log store kind {kind!r}")
        rig.create(configuration)
        return rig

    return make


@pytest.fixture
def proxy(moto_server: MotoServer) -> Iterator[FaultInjectingProxy]:
    """The fault proxy in front of the session's moto (S3 and DynamoDB)."""
    with FaultInjectingProxy(moto_server.endpoint) as p:
        yield p
