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
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from deltacommit.testing import (
    DELTALAKE_LATEST_INSTALL_HINT,
    Dynalite,
    DynaliteNotInstalledError,
    LocalStackS3,
    LocalStackUnavailableError,
    MotoServer,
    S3Bucket,
    S3Implementation,
    apply_test_aws_environment,
    find_deltalake_latest,
    s3_storage_options,
    unique_name,
)
from tests.other_user import remove_copy

# --------------------------------------------------------------------------- environment

# Property tests judge answers, never time: no per-example deadline and no health check on
# slow data generation, either of which fails a correct test on a loaded 2-core machine.
# A test's own ``@settings`` still sets its example count.
settings.register_profile("deltacommit", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("deltacommit")

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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The copy of this environment a second user's commands ran from, where the session made
    one (tests/other_user.py: the repository's folder was private), goes with the session."""
    remove_copy()


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
def localstack_server() -> Iterator[LocalStackS3]:
    """LocalStack's own S3 provider, a second S3 implementation (started once per worker).

    Where Python 3.13 is missing, every test using it is skipped with that reason (``-ra``
    prints it at the end of the run); where it is present but LocalStack is not installed, the
    tests fail and say how to install it, as a missing dynalite does."""
    try:
        server = LocalStackS3()
    except LocalStackUnavailableError as e:
        if e.installable:
            pytest.fail(f"{e}", pytrace=False)
        pytest.skip(f"{e}")
    with server:
        yield server


@pytest.fixture(scope="session")
def deltalake_latest() -> Path:
    """The Python of the venv holding the newest deltalake (a peer run in subprocesses)."""
    python = find_deltalake_latest()
    if python is None:
        pytest.fail(DELTALAKE_LATEST_INSTALL_HINT, pytrace=False)
    return python


@pytest.fixture(scope="session")
def moto_s3_client(moto_server: MotoServer) -> Any:
    """A plain boto3 S3 client on the session's moto, for setting up and inspecting tests."""
    import boto3

    return boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")


#: The S3 implementations the conformance and mixed-fleet tests run on.  moto also serves
#: DynamoDB, and the rest of the suite runs on it alone.
S3_SERVERS = ["moto", "localstack"]


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> S3Implementation:
    """Each S3 implementation in turn: a test using it runs once on moto, once on LocalStack."""
    if request.param == "moto":
        server: MotoServer | LocalStackS3 = request.getfixturevalue("moto_server")
        client = request.getfixturevalue("moto_s3_client")
    else:
        server = request.getfixturevalue("localstack_server")
        client = request.getfixturevalue("localstack_s3_client")
    return S3Implementation(request.param, server.endpoint, client)


@pytest.fixture(scope="session")
def localstack_s3_client(localstack_server: LocalStackS3) -> Any:
    """A plain boto3 S3 client on the session's LocalStack."""
    import boto3

    return boto3.client("s3", endpoint_url=localstack_server.endpoint, region_name="us-east-1")


@pytest.fixture
def aws_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The AWS client a test's S3 and DynamoDB stores use: ``light`` (the suite's own, for the
    static keys of its servers) or ``botocore`` (DELTACOMMIT_AWS_CLIENT=botocore, which the
    processes the test starts inherit), chosen with ``indirect=True`` parametrization
    (``tests/s3/helpers.EACH_AWS_CLIENT``).  Production writers with role or profile
    credentials go through botocore, so the store contract, the conditional-write races and
    the DynamoDB log store's commit tests run on both.  A botocore run that made no botocore
    client in this process, or made a light one, fails: it would not have tested botocore."""
    from deltacommit.io.aws.config import _CLIENTS, clear_client_cache

    name = getattr(request, "param", "light")
    if name == "botocore":
        monkeypatch.setenv("DELTACOMMIT_AWS_CLIENT", "botocore")
    clear_client_cache()
    yield name
    made = [type(c).__module__ for c in _CLIENTS.values()]
    clear_client_cache()
    if name == "botocore":
        assert made and not any(m.startswith("deltacommit.io.aws.light") for m in made), made


# --------------------------------------------------------------------------- per-test resources


@pytest.fixture
def s3_bucket(moto_server: MotoServer, moto_s3_client: Any) -> S3Bucket:
    """A new, empty bucket on the session's moto, and the storage options that reach it."""
    name = unique_name("dc-test")
    moto_s3_client.create_bucket(Bucket=name)
    return S3Bucket(name, s3_storage_options(moto_server.endpoint))


@pytest.fixture
def any_s3_bucket(s3_server: S3Implementation) -> S3Bucket:
    """A new, empty bucket on each S3 implementation in turn (see ``s3_server``)."""
    name = unique_name("dc-test")
    s3_server.client.create_bucket(Bucket=name)
    return S3Bucket(name, s3_storage_options(s3_server.endpoint))
