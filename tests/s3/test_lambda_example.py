"""examples/lambda_handler.py, run as Lambda runs it: each execution environment a fresh process
that imports the module once and serves several invocations, the table on moto's S3 (conditional
put) and its options in the environment only.  Deliveries repeat and arrive in two
environments at once; every batch must be in the table exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import deltacommit as dc
from deltacommit.testing import S3Bucket

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lambda_handler.py"

#: One execution environment: imports the handler module once, then handles each event of the
#: JSON list it is given, printing the handler's answers as one JSON list.
ENVIRONMENT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("lambda_handler", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
tables = []
answers = []
for event in json.loads(sys.argv[2]):
    answers.append(module.handler(event, None))
    tables.append(id(module._table))
print(json.dumps({"answers": answers, "tables": tables}))
"""


def _event(producer: str, batch: int) -> dict[str, Any]:
    return {"producer": producer, "batch": batch,
            "rows": [{"producer": producer, "batch": batch, "n": n} for n in range(3)]}


def _environment(uri: str, bucket: S3Bucket, events: list[dict[str, Any]]
                 ) -> subprocess.Popen[str]:
    env = dict(os.environ, DELTA_TABLE_URI=uri, **bucket.storage_options)
    return subprocess.Popen([sys.executable, "-c", ENVIRONMENT, str(EXAMPLE), json.dumps(events)],
                            env=env, stdout=subprocess.PIPE, text=True)


def _answers(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    return json.loads(out)  # type: ignore[no-any-return]


def test_the_lambda_example_appends_every_batch_exactly_once(s3_bucket: S3Bucket) -> None:
    uri = f"{s3_bucket.uri}/events"
    # The first environment creates the table, and keeps its table object for later events;
    # a retried delivery of batch 1 is skipped.
    first = _answers(_environment(uri, s3_bucket, [_event("a", 1), _event("a", 1),
                                                   _event("a", 2)]))
    assert [a["skipped"] for a in first["answers"]] == [False, True, False]
    assert len(set(first["tables"])) == 1  # one table object for every invocation
    # Two environments at once, each delivering the other's batches too (a redelivery after a
    # timeout): producers a and b, batches 3 and 1..2.
    both = [_environment(uri, s3_bucket, [_event("a", 3), _event("b", 1), _event("b", 2)]),
            _environment(uri, s3_bucket, [_event("b", 1), _event("a", 3), _event("b", 2)])]
    answers = [a for p in both for a in _answers(p)["answers"]]
    assert sum(not a["skipped"] for a in answers) == 3  # a3, b1, b2 once each
    table = dc.DeltaTable(uri, storage_options=s3_bucket.storage_options)
    data = table.to_arrow(columns=["producer", "batch"])
    seen = Counter(zip(data.column("producer").to_pylist(), data.column("batch").to_pylist(),
                       strict=True))
    assert seen == {("a", 1): 3, ("a", 2): 3, ("a", 3): 3, ("b", 1): 3, ("b", 2): 3}
    assert table.app_version("lambda:a") == 3 and table.app_version("lambda:b") == 2
