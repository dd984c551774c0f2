"""Peer writers for ``deltacommit stress --peer``: other engines appending beside deltacommit.

A mixed fleet is where deltacommit's bugs hurt others: a peer that fails, or that commits a
write twice, because of deltacommit's in-flight state.  Each peer writer process appends rows
of the stress schema through its own engine's API (deltalake 1.6.0's ``write_deltalake``, or
the Spark S3DynamoDBLogStore emulator in ``deltacommit.testing.spark_emulator``), journals a
write only once that API returned, and logs every error it met by class.  After the run,
``check_peers`` reads the table back: every acknowledged peer row exactly once, and no row of
anyone twice.  deltalake is a test dependency of deltacommit, not a runtime one: a run asking
for it without it installed is refused up front.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.schema.arrow import schema_to_json
from deltacommit.table import DeltaTable

PEER_KINDS = ("deltalake", "spark-emulator")


@dataclass
class PeerReport:
    """Per kind of writer: acknowledged writes, rows lost or duplicated, errors by class."""

    acknowledged: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    errors: dict[str, Counter[str]] = field(default_factory=dict)
    duplicated_rows: int = 0

    @property
    def ok(self) -> bool:
        return not self.lost and not self.duplicated_rows

    def to_json(self) -> dict[str, Any]:
        return {"acknowledged": dict(self.acknowledged), "lost_rows": dict(self.lost),
                "duplicated_rows": self.duplicated_rows,
                "errors": {k: dict(v) for k, v in self.errors.items()}}


def check_kinds(peers: Sequence[str], uri: str) -> None:
    for kind in peers:
        if kind not in PEER_KINDS:
            raise InvalidArgumentError(
                f"stress on {uri}: unknown --peer {kind!r}; choose from {list(PEER_KINDS)}")
        if kind == "deltalake":
            try:
                import deltalake  # noqa: F401
            except ImportError:
                raise InvalidArgumentError(
                    f"stress on {uri}: --peer deltalake needs the deltalake package (pip install "
                    "'deltalake==1.6.0', the last release with the DynamoDB log store)") from None
        if kind == "spark-emulator" and not uri.startswith(("s3://", "s3a://", "s3n://")):
            raise InvalidArgumentError(
                f"stress on {uri}: --peer spark-emulator emulates Spark's S3DynamoDBLogStore and "
                "needs an s3:// table with AWS_S3_LOCKING_PROVIDER=dynamodb")


def spark_key_uri(uri: str) -> str:
    """The table as Spark spells it (``s3a://``), so every peer shares Spark's fleet key."""
    return "s3a://" + uri.split("://", 1)[1].rstrip("/")


def classify(message: str) -> str:
    if "already exists" in message:
        return "version-already-exists"
    if "Failed to commit transaction" in message:
        return "gave-up-after-retries"
    return "other"


def _emulator(uri: str, options: Mapping[str, str]) -> Any:
    from deltacommit.testing.spark_emulator import SparkEmulatorWriter, SparkS3DynamoDBLogStore

    bucket, _, key = uri.split("://", 1)[1].partition("/")
    endpoint = (options.get("AWS_ENDPOINT_URL_DYNAMODB") or options.get("AWS_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("AWS_ENDPOINT_URL"))
    if not endpoint:
        raise InvalidArgumentError("--peer spark-emulator needs AWS_ENDPOINT_URL(_DYNAMODB)")
    table = options.get("DELTA_DYNAMO_TABLE_NAME") or "delta_log"
    return SparkEmulatorWriter(SparkS3DynamoDBLogStore(bucket, key, endpoint, table))


def create_through_spark(uri: str, options: Mapping[str, str], schema: pa.Schema) -> None:
    """Create the table as a Spark fleet would (its entries keyed ``s3a://``)."""

    _emulator(uri, options).create(schema_to_json(schema))


class StopOnSigterm:
    """Set by SIGTERM: a writer process finishes the write it is in, then exits."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()


def peer_worker(kind: str, uri: str, name: str, incarnation: int, journal_path: str, rows: int,
                seed: int, schema: pa.Schema, options: Mapping[str, str]) -> int:
    """Append until SIGTERM through ``kind``'s own API; journal each write it acknowledged."""
    stop = StopOnSigterm()
    signal.signal(signal.SIGTERM, stop)
    rng = random.Random(seed)
    who = f"{name}#{incarnation}"
    emulator = _emulator(uri, options) if kind == "spark-emulator" else None
    seq = 0
    fd = os.open(journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while not stop.event.is_set():
            data = pa.table({
                "writer": [name] * rows, "incarnation": [incarnation] * rows,
                "seq": list(range(seq * rows, (seq + 1) * rows)),
                "payload": [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(rows)],
            }, schema=schema)
            try:
                if emulator is not None:
                    emulator.append(data)
                else:
                    import deltalake

                    deltalake.write_deltalake(uri, data, mode="append",
                                              storage_options=dict(options))
            except Exception as e:  # the peer's own failure: its outcome is unknown
                print(f"{who} peer error [{classify(str(e))}]: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
                seq += 1
                continue
            line = json.dumps({"writer": name, "incarnation": incarnation,
                               "seq0": seq * rows, "rows": rows}) + "\n"
            os.write(fd, line.encode())
            os.fsync(fd)
            seq += 1
    finally:
        os.close(fd)
    return 0


def check_peers(uri: str, options: Mapping[str, str], jdir: Path, kinds: Mapping[str, str]
                ) -> PeerReport:
    """Read the table back against the peers' journals; ``kinds`` maps writer name to kind."""

    report = PeerReport()
    data = DeltaTable(uri, storage_options=options).to_arrow(columns=["writer", "incarnation", "seq"])
    rows = Counter(zip(data["writer"].to_pylist(), data["incarnation"].to_pylist(),
                       data["seq"].to_pylist(), strict=True))
    report.duplicated_rows = sum(n - 1 for n in rows.values() if n > 1)
    for path in sorted(jdir.glob("peer-*.acks")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            j = json.loads(line)
            kind = kinds.get(j["writer"], "?")
            report.acknowledged[kind] += 1
            for s in range(j["seq0"], j["seq0"] + j["rows"]):
                if rows.get((j["writer"], j["incarnation"], s), 0) != 1:
                    report.lost[kind] += 1
    for log in sorted(jdir.glob("*.log")):
        name = log.name.split("-")[0] if not log.name.startswith("peer-") else \
            log.name[len("peer-"):].rsplit("-", 1)[0]
        kind = kinds.get(name, "deltacommit")
        for line in log.read_text(errors="replace").splitlines():
            if " peer error [" in line:
                cls = line.split(" peer error [", 1)[1].split("]", 1)[0]
                report.errors.setdefault(kind, Counter())[cls] += 1
    return report
