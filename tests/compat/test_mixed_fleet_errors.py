"""deltacommit beside deltalake 1.6.0 on Spark's DynamoDB protocol, called the usual way:
every peer error is counted, never retried away.

Three deltacommit and three deltalake writer processes append at once (deltalake through
``write_deltalake(uri, ...)``, a fresh load per call), while a deltalake reader loads the table
in a loop.  deltacommit's in-flight state must never look like a conflict to a peer: no
"version N already exists" on the deltalake side (it meant deltalake repaired an entry whose
N.json deltacommit had already copied), no error on the deltacommit side, and every
acknowledged row exactly once.  deltalake's own retry limit ("Failed to commit transaction:
15") is a matter of its contention policy, not of deltacommit: such a write committed nothing
and is re-submitted, and the count is reported beside the count of a deltalake-only fleet.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.testing import MotoServer, S3Bucket
from tests.s3.helpers import SCHEMA, DynamoSetup, batch, context, new_log_table

WRITERS = 3
APPENDS = 10


@pytest.fixture
def dynamo(s3_bucket: S3Bucket, moto_server: MotoServer) -> DynamoSetup:
    """A bucket and a new DynamoDB log table on the session's single-threaded moto."""
    return DynamoSetup(s3_bucket, "moto", moto_server.endpoint, new_log_table(moto_server.endpoint))


def _classify(message: str) -> str:
    if "already exists" in message:
        return "version-already-exists"
    if "Failed to commit transaction" in message:
        return "gave-up-after-retries"
    return "other: " + message[:200]


def _deltalake_writer(uri: str, options: Mapping[str, str], writer: int, appends: int,
                      start: Any, out: Any) -> None:
    from deltalake.exceptions import DeltaError

    errors: Counter[str] = Counter()
    acked = 0
    try:
        start.wait()
        for b in range(appends):
            for attempt in range(200):
                try:
                    deltalake.write_deltalake(uri, batch(writer, b), mode="append",
                                              storage_options=dict(options))
                    acked += 1
                    break
                except DeltaError as e:
                    errors[_classify(str(e))] += 1
                    time.sleep(0.005 * min(attempt + 1, 20))
        out.put((f"deltalake-{writer}", acked, dict(errors)))
    except BaseException as e:
        errors[f"crash: {type(e).__name__}: {e}"[:200]] += 1
        out.put((f"deltalake-{writer}", acked, dict(errors)))


def _deltacommit_writer(uri: str, options: Mapping[str, str], writer: int, appends: int,
                        start: Any, out: Any) -> None:
    errors: Counter[str] = Counter()
    acked = 0
    try:
        start.wait()
        for b in range(appends):
            dc.write(uri, batch(writer, b), storage_options=dict(options))
            acked += 1
    except BaseException as e:
        errors[f"{type(e).__name__}: {e}"[:300]] += 1
    out.put((f"deltacommit-{writer}", acked, dict(errors)))


def _deltalake_reader(uri: str, options: Mapping[str, str], writer: int, appends: int,
                      start: Any, out: Any) -> None:
    """Load the table in a loop until the writers are done (``appends`` is the version to
    reach), counting every failed load."""
    from deltalake.exceptions import DeltaError

    errors: Counter[str] = Counter()
    loads = 0
    start.wait()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            v = deltalake.DeltaTable(uri, storage_options=dict(options)).version()
            loads += 1
            if v >= appends:
                break
        except DeltaError as e:
            errors[_classify(str(e))] += 1
    out.put(("deltalake-reader", loads, dict(errors)))


def run_fleet(plan: list[tuple[Any, str, int, int]], options: Mapping[str, str]
              ) -> dict[str, tuple[int, dict[str, int]]]:
    """Start one process per ``(target, uri, writer id, appends)``, release them together with
    a barrier, and return each one's ``name -> (acknowledged, errors by class)``."""
    ctx = context("spawn")
    start = ctx.Barrier(len(plan))
    out = ctx.Queue()
    procs = [ctx.Process(target=t, args=(u, dict(options), w, n, start, out)) for t, u, w, n in plan]
    for p in procs:
        p.start()
    try:
        return {name: (n, errors) for name, n, errors in (out.get(timeout=600) for _ in procs)}
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def test_deltalake_writers_and_reader_see_no_error_beside_deltacommit(dynamo: DynamoSetup) -> None:
    uri = dynamo.uri()
    options = dict(dynamo.options)
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    plan: list[tuple[Any, str, int, int]] = [
        (_deltacommit_writer, uri, w, APPENDS) for w in range(WRITERS)]
    plan += [(_deltalake_writer, uri, WRITERS + w, APPENDS) for w in range(WRITERS)]
    plan.append((_deltalake_reader, uri, 99, 2 * WRITERS * APPENDS))
    results = run_fleet(plan, options)
    print(json.dumps({"fleet": "mixed", "backend": dynamo.backend, "results": results}))
    for name, (_, errors) in results.items():
        if name.startswith("deltacommit"):
            assert errors == {}, (name, errors)
        else:
            assert "version-already-exists" not in errors, (name, errors)
            assert not any(k.startswith(("other", "crash")) for k in errors), (name, errors)
    for w in range(2 * WRITERS):
        kind = "deltacommit" if w < WRITERS else "deltalake"
        assert results[f"{kind}-{w}"][0] == APPENDS
    data = dc.DeltaTable(uri, storage_options=options).to_arrow()
    pairs = Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True))
    assert pairs == Counter({(w, b): 1 for w in range(2 * WRITERS) for b in range(APPENDS)})
    theirs = deltalake.DeltaTable(uri, storage_options=options)
    assert theirs.version() == 2 * WRITERS * APPENDS
    assert theirs.to_pyarrow_table().num_rows == data.num_rows
    assert isinstance(data, pa.Table)


def test_a_fleet_on_s3a_keys_is_joined_by_a_writer_given_s3(dynamo: DynamoSetup) -> None:
    """deltalake writers given ``s3a://`` (as Spark spells tables) key their entries
    ``s3a://bkt/t``; deltacommit given ``s3://`` and default options joins that key instead of
    starting a second one that would not exclude them."""
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    options = dict(dynamo.options)
    s3a = f"s3a://{dynamo.bucket.name}/t"
    deltalake.write_deltalake(s3a, batch(0, 0), storage_options=options)
    deltalake.write_deltalake(s3a, batch(0, 1), mode="append", storage_options=options)
    ours = dc.DeltaTable(dynamo.uri(), storage_options=options)
    assert dc.write(ours, batch(1, 0)).version == 2
    ls = ours.log_store
    assert isinstance(ls, DynamoDBLogStore) and ls.table_path == s3a
    deltalake.write_deltalake(s3a, batch(0, 2), mode="append", storage_options=options)
    assert dc.write(ours, batch(1, 1)).version == 4
    assert [e.version for e in dynamo.entries(s3a)] == [0, 1, 2, 3, 4]
    assert dynamo.entries(dynamo.uri()) == []
    expected = Counter({(0, 0): 1, (0, 1): 1, (0, 2): 1, (1, 0): 1, (1, 1): 1})
    data = deltalake.DeltaTable(s3a, storage_options=options).to_pyarrow_table()
    assert Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True)) == expected


def test_entries_under_two_spellings_refuse_to_commit(dynamo: DynamoSetup) -> None:
    options = dict(dynamo.options)
    deltalake.write_deltalake(f"s3a://{dynamo.bucket.name}/t", batch(0, 0), storage_options=options)
    # A second fleet key: a deltalake writer given s3:// never saw the s3a:// entries.
    deltalake.write_deltalake(dynamo.uri(), batch(0, 1), mode="append", storage_options=options)
    with pytest.raises(dc.CoordinationMismatchError, match=r"several tablePath spellings: s3://"):
        dc.write(dynamo.uri(), batch(1, 0), storage_options=options)
    assert deltalake.DeltaTable(dynamo.uri(), storage_options=options).version() == 1
