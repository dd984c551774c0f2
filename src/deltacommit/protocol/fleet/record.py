"""A published transaction of fleet-wide group commit (a "record"): its name and codec.  Pure.

A writer of a table with ``deltacommit.groupCommit.fleet=true`` publishes each transaction,
once its data files are stored, as one JSON object at ``_deltacommit_fleet/<txnId>.json``
under the table, for whichever writer claims the next version to commit it with its own
(``engine.group.fleet``).  The folder starts with ``_``, so no Delta reader lists it and
Spark's and delta-rs's VACUUM leave it alone (``engine.group.fleet.cleanup`` cites where).

The record is JSON, never pickle: anyone who can write the bucket can write a record, and a
record is only ever a hint that is checked against the log before a version is claimed on it.
It carries what the includer needs to commit the transaction exactly as its owner would:

* ``deltacommitFleet``: the format version (1);
* ``txnId``, ``owner`` (the publishing process, for diagnostics), ``tableId`` (the table's
  ``metaData.id``), ``readVersion`` r and ``readDigest`` (SHA-256 of the commit file at r as
  the owner read it: binds the record to this table's history, so a record copied from
  another table, or naming a version since rolled back and written again, is refused);
* ``bound`` B: the highest version that may carry it; ``deadlineMs``: a wall-clock time
  after which includers refuse it (a restriction only: refusing is always safe);
* ``operation``, ``parameters``, ``metrics``: what its ``commitInfo`` says;
* what conflict checks need of its reads (``isolationLevel``, ``partitionColumns``,
  ``partitionPhysicalNames``, ``readFiles``, ``readWholeTable``, ``readAppIds``,
  ``readProtocol``, ``readMetadata``); the rest of Spark's summary follows from its actions;
* ``actions``: its ``protocol``, ``metaData``, ``txn``, ``domainMetadata``, ``remove`` and
  ``add`` actions, as log lines hold them.

A transaction that read partition predicates is not published (its predicates have no stored
form here); it commits by itself, as any writer beside the fleet does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltacommit.protocol.actions import (
    Action,
    Add,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
    action_from_json,
    action_to_json,
)
from deltacommit.protocol.conflicts import TransactionSummary
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.log.replay import file_key
from deltacommit.protocol.table_config.properties import IsolationLevel

__all__ = ["FLEET_DIR", "FORMAT", "FleetRecord", "decode_record", "encode_record",
           "publishable", "record_path", "round_path", "txn_id_of", "version_of_round"]

#: The folder under the table holding published transactions and round keys.
FLEET_DIR = "_deltacommit_fleet"
#: The record format this library writes and reads.
FORMAT = 1
#: Longest txnId accepted in a record name (a UUID is 36).
_MAX_ID = 64
_ROUND_SUFFIX = ".round"
_RECORD_SUFFIX = ".json"


def record_path(txn_id: str) -> str:
    """The store path of the record of transaction ``txn_id``."""
    return f"{FLEET_DIR}/{txn_id}{_RECORD_SUFFIX}"


def round_path(version: int) -> str:
    """The store path of the round key of ``version`` (the conditional-put mechanism's)."""
    return f"{FLEET_DIR}/{version:020d}{_ROUND_SUFFIX}"


def _plain_id(text: str) -> bool:
    return 0 < len(text) <= _MAX_ID and all(c.isalnum() or c in "-_" for c in text) \
        and text.isascii()


def txn_id_of(path: str) -> str | None:
    """The txnId a record path names; None for any other name."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(_RECORD_SUFFIX):
        return None
    txn_id = name[:-len(_RECORD_SUFFIX)]
    return txn_id if _plain_id(txn_id) else None


def version_of_round(path: str) -> int | None:
    """The version a round key path names; None for any other name."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(_ROUND_SUFFIX):
        return None
    digits = name[:-len(_ROUND_SUFFIX)]
    return int(digits) if len(digits) == 20 and digits.isdigit() and digits.isascii() else None


@dataclass(frozen=True, slots=True)
class FleetRecord:
    """One published transaction, decoded (see the module docstring for each field)."""

    txn_id: str
    owner: str
    table_id: str
    read_version: int
    read_digest: str
    bound: int
    deadline_ms: int
    operation: str
    parameters: Mapping[str, str]
    metrics: Mapping[str, Any]
    summary: TransactionSummary
    adds: tuple[Add, ...] = ()
    removes: tuple[Remove, ...] = ()
    txns: tuple[Txn, ...] = ()
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    domains: tuple[DomainMetadata, ...] = ()
    app_ids: frozenset[str] = field(default=frozenset())


def publishable(summary: TransactionSummary) -> bool:
    """Whether a transaction's reads have a stored form: not if it read partition predicates."""
    return not summary.read_predicates


def encode_record(r: FleetRecord) -> bytes:
    """The record's bytes (compact JSON, UTF-8)."""
    s = r.summary
    if not publishable(s):
        raise ValueError("a transaction that read partition predicates cannot be published")
    actions: list[Action] = []
    if r.protocol is not None:
        actions.append(r.protocol)
    if r.metadata is not None:
        actions.append(r.metadata)
    actions.extend(r.txns)
    actions.extend(r.domains)
    actions.extend(r.removes)
    actions.extend(r.adds)
    obj: dict[str, Any] = {
        "deltacommitFleet": FORMAT,
        "txnId": r.txn_id,
        "owner": r.owner,
        "tableId": r.table_id,
        "readVersion": r.read_version,
        "readDigest": r.read_digest,
        "bound": r.bound,
        "deadlineMs": r.deadline_ms,
        "operation": r.operation,
        "parameters": dict(r.parameters),
        "metrics": dict(r.metrics),
        "appIds": sorted(r.app_ids),
        "isolationLevel": s.isolation_level.value,
        "partitionColumns": list(s.partition_columns),
        "partitionPhysicalNames": dict(s.partition_physical_names),
        "readFiles": sorted(s.read_files),
        "readWholeTable": s.read_whole_table,
        "readAppIds": sorted(s.read_app_ids),
        "readProtocol": None if s.read_protocol is None else s.read_protocol.to_json(),
        "readMetadata": None if s.read_metadata is None else s.read_metadata.to_json(),
        "actions": [action_to_json(a) for a in actions],
    }
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _get(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) and kind is int:
        raise ValueError(f"{key!r} must be an integer")
    if not isinstance(value, kind):
        raise ValueError(f"{key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _strings(obj: Mapping[str, Any], key: str) -> list[str]:
    value = _get(obj, key, list)
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key!r} must be a list of strings")
    return list(value)


def _str_map(obj: Mapping[str, Any], key: str) -> dict[str, str]:
    value = _get(obj, key, dict)
    if not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{key!r} must map names to strings")
    return dict(value)


def decode_record(data: bytes) -> FleetRecord:
    """The record in ``data``; ValueError saying what is wrong for anything else (a record is
    a hint: its reader skips a bad one and says so)."""
    try:
        obj = loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 at byte {e.start}") from None
    if not isinstance(obj, dict):
        raise ValueError("a record is a JSON object")
    if obj.get("deltacommitFleet") != FORMAT:
        raise ValueError(f"unknown record format {obj.get('deltacommitFleet')!r} (expected "
                         f"{FORMAT})")
    txn_id = _get(obj, "txnId", str)
    if not _plain_id(txn_id):
        raise ValueError(f"txnId {txn_id!r} is not an id")
    actions: list[Action] = []
    for line in _get(obj, "actions", list):
        try:
            a = action_from_json(line)
        except (TypeError, KeyError) as e:
            raise ValueError(f"bad action: {e}") from None
        if a is not None:
            actions.append(a)
    adds = tuple(a for a in actions if isinstance(a, Add))
    removes = tuple(a for a in actions if isinstance(a, Remove))
    txns = tuple(a for a in actions if isinstance(a, Txn))
    domains = tuple(a for a in actions if isinstance(a, DomainMetadata))
    metadatas = [a for a in actions if isinstance(a, Metadata)]
    protocols = [a for a in actions if isinstance(a, Protocol)]
    if len(adds) + len(removes) + len(txns) + len(domains) + len(metadatas) + len(protocols) \
            != len(actions) or len(metadatas) > 1 or len(protocols) > 1:
        raise ValueError("actions must be protocol, metaData (one each at most), txn, "
                         "domainMetadata, remove and add")
    isolation = _get(obj, "isolationLevel", str)
    try:
        level = IsolationLevel(isolation)
    except ValueError:
        raise ValueError(f"unknown isolationLevel {isolation!r}") from None
    read_protocol = obj.get("readProtocol")
    read_metadata = obj.get("readMetadata")
    if not isinstance(read_protocol, dict) or not isinstance(read_metadata, dict):
        raise ValueError("readProtocol and readMetadata must be objects")
    try:
        rp = Protocol.from_json(read_protocol)
        rm = Metadata.from_json(read_metadata)
    except (TypeError, KeyError) as e:
        raise ValueError(f"bad readProtocol or readMetadata: {e}") from None
    metadata = metadatas[0] if metadatas else None
    protocol = protocols[0] if protocols else None
    summary = TransactionSummary(
        operation=_get(obj, "operation", str),
        partition_columns=tuple(_strings(obj, "partitionColumns")),
        # Only partition predicates read partition types, and none are published.
        partition_types={},
        partition_physical_names=_str_map(obj, "partitionPhysicalNames"),
        isolation_level=level,
        read_files=frozenset(_strings(obj, "readFiles")),
        read_whole_table=_get(obj, "readWholeTable", bool),
        read_app_ids=frozenset(_strings(obj, "readAppIds")),
        added_files=adds,
        removed_files=frozenset(file_key(r.path) for r in removes),
        has_metadata=metadata is not None,
        has_protocol=protocol is not None,
        has_other_actions=bool(txns) or bool(domains),
        data_change=any(a.data_change for a in adds) or any(r.data_change for r in removes),
        read_protocol=rp,
        read_metadata=rm,
        domains=frozenset(d.domain for d in domains),
    )
    app_ids = frozenset(_strings(obj, "appIds"))
    if not {t.app_id for t in txns} <= app_ids:
        raise ValueError("appIds must name every txn action's appId")
    ints = {k: _get(obj, k, int) for k in ("readVersion", "bound", "deadlineMs")}
    if not 0 <= ints["readVersion"] <= ints["bound"] < 2 ** 63:
        raise ValueError("needs 0 <= readVersion <= bound < 2**63")
    return FleetRecord(
        txn_id=txn_id, owner=_get(obj, "owner", str), table_id=_get(obj, "tableId", str),
        read_version=ints["readVersion"], read_digest=_get(obj, "readDigest", str),
        bound=ints["bound"], deadline_ms=ints["deadlineMs"],
        operation=summary.operation, parameters=_str_map(obj, "parameters"),
        metrics=_get(obj, "metrics", dict), summary=summary, adds=adds, removes=removes,
        txns=txns, metadata=metadata, protocol=protocol, domains=domains, app_ids=app_ids)
