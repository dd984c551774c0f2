"""Fixtures for S3 tables: a DynamoDB log table on moto or on dynalite (every DynamoDB test runs
against both), beside a fresh bucket on the session's single-threaded moto."""

from __future__ import annotations

import pytest

from deltacommit.testing import Dynalite, MotoServer, S3Bucket

from .helpers import DynamoSetup, new_log_table


@pytest.fixture(params=["moto", "dynalite"])
def dynamo(request: pytest.FixtureRequest, s3_bucket: S3Bucket, moto_server: MotoServer) -> DynamoSetup:
    """A bucket, and a new log table on moto or dynalite, with options reaching both."""
    if request.param == "moto":
        endpoint = moto_server.endpoint
    else:
        server: Dynalite = request.getfixturevalue("dynalite_server")
        endpoint = server.endpoint
    return DynamoSetup(s3_bucket, request.param, endpoint, new_log_table(endpoint))
