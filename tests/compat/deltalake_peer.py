"""A deltalake writer process for peer tests, run by another deltalake's interpreter.

The test extras pin deltalake 1.6.0 (the last release with the DynamoDB log store); newer
releases live in venvs of their own (``deltacommit.testing.find_deltalake_latest``) and cannot
be imported beside it, so tests start this script with that venv's Python.  It imports only the
standard library, pyarrow and deltalake.

    python deltalake_peer.py '{"uri": ..., "options": {...}, "writer": 3, "appends": 10}'

prints ``ready`` once the table is open, waits for a line on stdin (the start signal shared by
every writer of a fleet), appends ``appends`` one-row batches (``writer``, ``batch``) with one
table object kept open (with ``"mode": "merge"``, MERGEs each inserting its batch's key where
it is absent), and prints one JSON line: the batches acknowledged, the errors met by
class, and deltalake's version.  A write that fails because deltalake gave up after its own
retries ("Failed to commit transaction") committed nothing and is submitted again, as its users
must; every other error ends the writer and is reported.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

#: How often one batch is submitted again after deltalake gave up on it.
RESUBMITS = 200
#: deltalake's own retries of one commit (its default is 15).  A fleet of four on a loaded
#: two-core machine can take a peer past 15 lost races; a user with that many writers raises
#: the limit the same way (``CommitProperties(max_commit_retries=...)``), and a give-up then
#: means deltalake's retry loop, not the contention of the test machine, failed.
MAX_COMMIT_RETRIES = 100


#: What a writer submits again: a give-up after deltalake's own retries, and a MERGE's conflict.
RESUBMITTED = ("gave-up-after-retries",)


def classify(message: str) -> str:
    # A MERGE's conflict by deltalake's rules ("Failed to commit transaction: Commit failed: a
    # concurrent transaction ..."): its retries cannot help, a resubmission on a fresh state can.
    if "concurrent transaction" in message.lower():
        return "conflict: " + message[:120]
    if "Failed to commit transaction" in message:
        return "gave-up-after-retries"
    if "already exists" in message:
        return "version-already-exists"
    return "other: " + message[:300]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import deltalake
    import pyarrow as pa
    from deltalake.exceptions import DeltaError

    options = dict(spec["options"])
    writer = int(spec["writer"])
    table = deltalake.DeltaTable(spec["uri"], storage_options=options)
    print("ready", flush=True)
    sys.stdin.readline()
    errors: Counter[str] = Counter()
    acked: list[int] = []
    fatal = None
    merges = spec.get("mode") == "merge"
    for b in range(int(spec["appends"])):
        data = pa.table({"writer": pa.array([writer], pa.int64()), "batch": pa.array([b], pa.int64())})
        for attempt in range(1, RESUBMITS + 1):
            try:
                properties = deltalake.CommitProperties(max_commit_retries=MAX_COMMIT_RETRIES)
                if merges:  # an insert of the key where it is absent: submitting it again is safe
                    (table.merge(data, "t.writer = s.writer AND t.batch = s.batch",
                                 source_alias="s", target_alias="t",
                                 commit_properties=properties)
                     .when_not_matched_insert_all().execute())
                else:
                    deltalake.write_deltalake(table, data, mode="append",
                                              commit_properties=properties)
                acked.append(b)
                break
            except DeltaError as e:
                kind = classify(str(e))
                errors[kind] += 1
                if kind not in RESUBMITTED and not kind.startswith("conflict: "):
                    fatal = kind
                    break
                # A kept table object stays at the version it read: a resubmission reads the
                # versions since, or a MERGE would conflict with the same commit every time.
                table.update_incremental()
                time.sleep(0.01 * min(attempt, 20))
        if fatal is not None:
            break
    return {"writer": writer, "acked": acked, "errors": dict(errors),
            "deltalake": deltalake.__version__}


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        report = run(spec)
    except BaseException as e:  # reported, so that the test names it
        report = {"writer": spec.get("writer"), "acked": [], "deltalake": None,
                  "errors": {f"crash: {type(e).__name__}: {e}"[:300]: 1}}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
