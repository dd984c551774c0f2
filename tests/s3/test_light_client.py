"""Which client a fresh process uses, seen from inside it: with static keys a write by URI
(conditional put and the DynamoDB log store) never imports botocore; each configuration the
light client does not serve writes through botocore's clients, and the write succeeds either way.
Either way the appends load none of the modules only other verbs need (``tests/cold_modules.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deltacommit.testing import S3Bucket
from tests.cold_modules import NOT_LOADED_BY_APPENDS

from .helpers import DynamoSetup

CHILD = r"""
import json, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.io.aws.config import _CLIENTS
uri, options, deferred = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
for n in range(2):
    dc.write(uri, pa.table({"n": [n]}), storage_options=options, mode="append")
loaded = sorted(m for m in deferred if m in sys.modules)
rows = dc.DeltaTable(uri, storage_options=options).to_arrow().num_rows
print(json.dumps({"botocore": "botocore" in sys.modules, "rows": rows, "loaded": loaded,
                  "clients": sorted(type(c).__name__ for c in _CLIENTS.values())}), flush=True)
# What is measured is printed; interpreter teardown is not what this test is about.  A process
# that wrote and read an S3 table aborts in it now and then (3 of 120 runs, light client and
# botocore alike, none of 60 on a local table): "terminate called without an active exception"
# (SIGABRT, exit -6) after every Python thread has ended, so from a native (Arrow) thread at
# interpreter shutdown; pyarrow's apache/arrow#34314 reports the same.  Not yet pinned down.
import os
os._exit(0)
"""

KEY_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _run(uri: str, options: dict[str, str], env: dict[str, str | None]) -> dict[str, Any]:
    child_env = dict(os.environ)
    for name, value in env.items():
        if value is None:
            child_env.pop(name, None)
        else:
            child_env[name] = value
    done = subprocess.run([sys.executable, "-c", CHILD, uri, json.dumps(options),
                           json.dumps(NOT_LOADED_BY_APPENDS)],
                          capture_output=True, text=True, env=child_env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("loaded") == [], "appends loaded modules only other verbs need"
    return out


def _without_keys(options: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in options.items() if k not in KEY_NAMES}


def test_static_keys_write_without_botocore(s3_bucket: S3Bucket) -> None:
    out = _run(f"{s3_bucket.uri}/t", s3_bucket.storage_options, {})
    assert out == {"botocore": False, "rows": 2, "clients": ["LightS3Client"]}


def test_keys_from_the_environment_write_without_botocore(s3_bucket: S3Bucket) -> None:
    """Lambda's case: the keys and the token in the environment, not in the options."""
    env: dict[str, str | None] = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                  "AWS_SESSION_TOKEN": "session-token"}
    out = _run(f"{s3_bucket.uri}/t", _without_keys(s3_bucket.storage_options), env)
    assert out == {"botocore": False, "rows": 2, "clients": ["LightS3Client"]}


def test_the_dynamodb_log_store_writes_without_botocore(dynamo: DynamoSetup) -> None:
    out = _run(dynamo.uri(), dynamo.options, {})
    assert out["botocore"] is False and out["rows"] == 2
    assert out["clients"] == ["LightDynamoDBClient", "LightS3Client"]


def _credentials_file(tmp_path: Path) -> str:
    path = tmp_path / "credentials"
    path.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
                    "[dev]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    return str(path)


@pytest.mark.parametrize("case", ["switch", "credentials-file", "profile", "config-file"])
def test_what_the_light_client_does_not_serve_goes_through_botocore(
        s3_bucket: S3Bucket, tmp_path: Path, case: str) -> None:
    options = dict(s3_bucket.storage_options)
    env: dict[str, str | None] = {}
    if case == "switch":
        env["DELTACOMMIT_AWS_CLIENT"] = "botocore"
    elif case == "credentials-file":   # botocore's credential chain finds the keys
        options = _without_keys(options)
        env.update({k: None for k in KEY_NAMES})
        env["AWS_SHARED_CREDENTIALS_FILE"] = _credentials_file(tmp_path)
    elif case == "profile":
        options = _without_keys(options)
        env.update({k: None for k in KEY_NAMES})
        env["AWS_SHARED_CREDENTIALS_FILE"] = _credentials_file(tmp_path)
        env["AWS_PROFILE"] = "dev"
    else:                              # a config file may set anything: botocore reads it
        config = tmp_path / "config"
        config.write_text("[default]\nregion = us-east-1\n")
        env["AWS_CONFIG_FILE"] = str(config)
    out = _run(f"{s3_bucket.uri}/t", options, env)
    assert out == {"botocore": True, "rows": 2, "clients": ["S3"]}


def test_the_dynamodb_log_store_falls_back_with_the_switch(dynamo: DynamoSetup) -> None:
    out = _run(dynamo.uri(), dynamo.options, {"DELTACOMMIT_AWS_CLIENT": "botocore"})
    assert out == {"botocore": True, "rows": 2, "clients": ["DynamoDB", "S3"]}


def test_the_suites_s3_stores_use_the_light_client(any_s3_bucket: S3Bucket,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The store contract and the conditional-write races run on the light client (moto and
    LocalStack alike), unless DELTACOMMIT_AWS_CLIENT=botocore asks for botocore's."""
    from deltacommit.io.aws.config import clear_client_cache
    from deltacommit.io.aws.light.s3 import LightS3Client
    from deltacommit.io.storage.s3 import S3Store

    store = S3Store.from_uri(f"{any_s3_bucket.uri}/t", any_s3_bucket.storage_options)
    if os.environ.get("DELTACOMMIT_AWS_CLIENT") == "botocore":
        assert not isinstance(store._client, LightS3Client)
        return
    assert isinstance(store._client, LightS3Client)
    store.put("x", b"1")
    assert store.get("x") == b"1"
    monkeypatch.setenv("DELTACOMMIT_AWS_CLIENT", "botocore")
    clear_client_cache()
    try:
        botocore_store = S3Store.from_uri(f"{any_s3_bucket.uri}/t", any_s3_bucket.storage_options)
        assert not isinstance(botocore_store._client, LightS3Client)
        assert botocore_store.get("x") == b"1"
    finally:
        monkeypatch.delenv("DELTACOMMIT_AWS_CLIENT")
        clear_client_cache()
