"""A fleet keyed as Spark keys it: deltalake 1.6.0 writers and a reader given ``s3a://`` URIs
beside deltacommit writers given ``s3://`` and default options, all at once.

The table was made by deltalake on ``s3a://`` (entries under ``s3a://bkt/t``).  deltacommit joins
that key on first use, so every writer excludes every other: no error on either side (beyond
deltalake's own limit of lost races, which commits nothing and is re-submitted), every
acknowledged row exactly once, every entry under the one key.
"""

from __future__ import annotations

import json
from collections import Counter

import deltalake

import deltacommit as dc
from tests.compat.test_mixed_fleet_errors import (
    _deltacommit_writer,
    _deltalake_reader,
    _deltalake_writer,
    run_fleet,
)

from .helpers import DynamoSetup, batch

WRITERS = 2
APPENDS = 12


def test_deltalake_on_s3a_keys_beside_deltacommit_on_s3_lose_and_fail_nothing(
        dynamo: DynamoSetup) -> None:
    options = dict(dynamo.options)
    ours, theirs = dynamo.uri(), f"s3a://{dynamo.bucket.name}/t"
    deltalake.write_deltalake(theirs, batch(99, 0), storage_options=options)
    plan = [(_deltacommit_writer, ours, w, APPENDS) for w in range(WRITERS)]
    plan += [(_deltalake_writer, theirs, WRITERS + w, APPENDS) for w in range(WRITERS)]
    plan.append((_deltalake_reader, theirs, 99, 2 * WRITERS * APPENDS))
    results = run_fleet(plan, options)
    print(json.dumps({"fleet": "s3a-peers", "backend": dynamo.backend, "results": results}))
    for name, (acked, errors) in results.items():
        assert set(errors) <= {"gave-up-after-retries"}, (name, errors)
        if name != "deltalake-reader":
            assert acked == APPENDS, name
    data = deltalake.DeltaTable(theirs, storage_options=options).to_pyarrow_table()
    pairs = Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True))
    expected = Counter({(w, b): 1 for w in range(2 * WRITERS) for b in range(APPENDS)})
    expected[(99, 0)] = 1
    assert pairs == expected
    assert dc.DeltaTable(ours, storage_options=options).version == 2 * WRITERS * APPENDS
    assert [e.version for e in dynamo.entries(theirs)] == list(range(2 * WRITERS * APPENDS + 1))
    assert dynamo.entries(ours) == []
