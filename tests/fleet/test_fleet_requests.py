"""What a fleet writer does not read, and the hints that let it skip the read, poisoned.

On S3 (single-threaded moto), by URI as a Lambda function writes (``dc.write`` takes the
table's state from the process's cache).  Each test counts what it names: the reads of the
cached commit that prove the table's identity, and the rows landed exactly once."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import PREVIOUS_COMMIT_KEY, previous_commit
from deltacommit.engine.group.fleet import records
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.logstore.registry import open_log_store
from deltacommit.protocol.fleet.record import FLEET_DIR
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import S3Bucket

from .helpers import FLEET, SCHEMA, rows


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    state_cache.clear()
    yield
    state_cache.clear()


@pytest.fixture
def proofs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions whose cached commit was read back to prove a table's identity."""
    read: list[int] = []
    holds = state_cache._anchor_holds

    def counted(log_store: Any, anchor: Any) -> bool:
        read.append(anchor.version)
        return holds(log_store, anchor)

    monkeypatch.setattr(state_cache, "_anchor_holds", counted)
    return read


def _in_another_process(code: str, uri: str, options: dict[str, str]) -> None:
    """``code`` in a process of its own (its commits do not move this process's cache)."""
    program = ("import json, sys, deltacommit as dc, pyarrow as pa\n"
               "from tests.fleet.helpers import rows\n"
               "uri, options = sys.argv[1], json.loads(sys.argv[2])\n" + code)
    subprocess.run([sys.executable, "-c", program, uri, json.dumps(options)], check=True)


def _counts(uri: str, options: dict[str, str]) -> Counter[tuple[int, int]]:
    state_cache.clear()
    t = dc.DeltaTable(uri, storage_options=options)
    return Counter((r["writer"], r["batch"]) for r in t.to_arrow().to_pylist())


def _fleet_records(uri: str, options: dict[str, str]) -> list[str]:
    assert records.settle()
    store = dc.DeltaTable(uri, storage_options=options).store
    return [m.path for m in store.list(f"{FLEET_DIR}/") if not m.path.endswith(".round")]


def _cached_at_1(s3_bucket: S3Bucket, name: str = "t") -> tuple[str, dict[str, str]]:
    """A fleet table with versions 0 and 1, this process's cached state at version 1."""
    uri, options = f"{s3_bucket.uri}/{name}", dict(s3_bucket.storage_options)
    dc.DeltaTable.create(uri, SCHEMA, configuration=FLEET, storage_options=options)
    dc.write(uri, rows(1, 0), storage_options=options)
    return uri, options


def test_the_next_fleet_version_proves_a_cached_state_without_reading_it_back(
        s3_bucket: S3Bucket, proofs: list[int]) -> None:
    uri, options = _cached_at_1(s3_bucket)
    # Another host lands version 2 through the fleet: it names version 1 as built on.
    _in_another_process("dc.write(uri, rows(2, 0), storage_options=options)", uri, options)
    proofs.clear()
    r = dc.write(uri, rows(1, 1), storage_options=options)
    assert r.version == 3
    assert proofs == []  # version 2 vouched for the cached commit at 1: not read back
    assert _counts(uri, options) == {(1, 0): 1, (2, 0): 1, (1, 1): 1}
    assert _fleet_records(uri, options) == []


@pytest.mark.parametrize("previous", ["forged", "absent"])
def test_a_next_version_not_naming_the_cached_commit_makes_the_writer_read_it_back(
        s3_bucket: S3Bucket, proofs: list[int], previous: str) -> None:
    """A version 2 naming another digest (forged), or none (another engine's commit): the
    cached commit at 1 is read back before anything is decided on version 2."""
    uri, options = _cached_at_1(s3_bucket)
    store = dc.DeltaTable(uri, storage_options=options).store
    state_cache.clear()
    dc.write(uri, rows(1, 1), storage_options=options)  # cached at 2, one round key taken
    info: dict[str, Any] = {"timestamp": 1, "operation": "WRITE",
                            "operationParameters": {"mode": "Append"}}
    if previous == "forged":
        info[PREVIOUS_COMMIT_KEY] = "0" * 64
    store.put_if_absent(commit_path(3), (json.dumps({"commitInfo": info}) + "\n").encode())
    # The round key of 3 is taken, as when another host won the round that made it.
    store.put_if_absent(f"{FLEET_DIR}/00000000000000000003.round", b"")
    proofs.clear()
    r = dc.write(uri, rows(1, 2), storage_options=options)
    assert r.version == 4
    assert proofs == [2]
    assert _counts(uri, options) == {(1, 0): 1, (1, 1): 1, (1, 2): 1}
    assert _fleet_records(uri, options) == []


@pytest.mark.parametrize("round_key", ["taken", "free"])
def test_a_table_swapped_in_under_a_cached_state_is_caught_before_anything_is_decided(
        s3_bucket: S3Bucket, proofs: list[int], round_key: str) -> None:
    """Another fleet table's objects copied over the cached one's (in another process, so
    this one's cache still holds the old table at version 1).  "taken": the other table has
    version 2 and round 2's key, so the writer waits for version 2, which vouches for the
    other table's version 1, not the cached one.  "free": the other table has versions 0 and
    1 only and no fleet folder, so the writer wins round 2 and claims version 2 itself.
    Either way the cached commit is read back before anything is decided or claimed, the
    table is found replaced, and the write is made again on a fresh read of the new table."""
    uri, options = _cached_at_1(s3_bucket)
    appends = 2 if round_key == "taken" else 1
    skip = "'_deltacommit_fleet/'" if round_key == "free" else "'-'"
    _in_another_process(
        "from deltacommit.io.logstore.registry import open_log_store\n"
        "from tests.fleet.helpers import SCHEMA, FLEET\n"
        "other = uri + '-other'\n"
        "dc.DeltaTable.create(other, SCHEMA, configuration=FLEET, storage_options=options)\n"
        f"for b in range({appends}): dc.write(other, rows(7, b), storage_options=options)\n"
        "target = open_log_store(uri, options).store\n"
        "source = open_log_store(other, options).store\n"
        "for m in list(target.list('')): target.delete(m.path)\n"
        f"for m in [m for m in source.list('') if not m.path.startswith({skip})]:\n"
        "    target.put(m.path, source.get(m.path))\n",
        uri, options)
    proofs.clear()
    r = dc.write(uri, rows(1, 1), storage_options=options)
    assert r.version == appends + 1
    assert proofs[:1] == [1]  # the commit the cache held at 1 was read back, and differed
    assert _counts(uri, options) == {**{(7, b): 1 for b in range(appends)}, (1, 1): 1}
    # Built on the new table's commit before it, not on the cached state of the old one.
    store = open_log_store(uri, options).store
    assert previous_commit(store.get(commit_path(r.version))) == \
        hashlib.sha256(store.get(commit_path(r.version - 1))).hexdigest()
    assert _fleet_records(uri, options) == []
