"""Fixtures shared by the whole suite.

Sections: the test environment (applied once, before any test), local servers (one per
session: starting moto costs about half a second), and per-test resources on those servers
(a fresh bucket or table each, so tests never see each other's objects).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from deltacommit.testing import (
    Dynalite,
    DynaliteNotInstalledError,
    MotoServer,
    S3Bucket,
    apply_test_aws_environment,
    s3_storage_options,
    unique_name,
)

# --------------------------------------------------------------------------- environment

# Dummy credentials, a fixed region, no instance-metadata lookups and no developer profile or
# endpoint from the shell: no test can reach a real AWS account.  Applied at import so it holds
# before any test module creates a client.
apply_test_aws_environment()

# Host turns (engine/commit/host_turn.py) of the suite's tables live in a folder of the test run's own,
# removed at its end, instead of the machine's turn folder: every table of every run would
# otherwise leave its turn files there.  Set at import, so writer processes inherit it.
_TURNS = tempfile.mkdtemp(prefix="deltacommit-test-turns-")
os.environ.setdefault("DELTACOMMIT_TURN_DIR", _TURNS)
atexit.register(shutil.rmtree, _TURNS, ignore_errors=True)


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto (S3 and DynamoDB on one port), single-threaded so conditional writes are atomic."""
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def dynalite_server() -> Iterator[Dynalite]:
    """dynalite, a second DynamoDB implementation (in memory)."""
    try:
        server = Dynalite()
    except DynaliteNotInstalledError as e:
        pytest.fail(f"{e}", pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def moto_s3_client(moto_server: MotoServer) -> Any:
    """A plain boto3 S3 client on the session's moto, for setting up and inspecting tests."""
    import boto3

    return boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")


# --------------------------------------------------------------------------- per-test resources


@pytest.fixture
def s3_bucket(moto_server: MotoServer, moto_s3_client: Any) -> S3Bucket:
    """A new, empty bucket on the session's moto, and the storage options that reach it."""
    name = unique_name("dc-test")
    moto_s3_client.create_bucket(Bucket=name)
    return S3Bucket(name, s3_storage_options(moto_server.endpoint))
