"""The one ``commitInfo`` builder: a lone transaction's, a group's, a new table's.

What a retry's ``commitInfo`` says: ``timestamp`` is taken again on every attempt, so commit
times follow version order as closely as the clock allows (timestamp time travel relies on
that); ``isBlindAppend`` and ``isolationLevel`` come from the transaction's reads and actions.
``readVersion`` stays the version of the snapshot the transaction read, on every attempt, as
Spark and delta-rs write it: ``readVersion < version - 1`` records that the commit was rebased
over the versions in between (and that each of them passed the conflict checks).

A group's version (``coalesce.py``) has one ``commitInfo`` whose ``txnId`` is the group's own
id and whose ``deltacommit.memberTxnIds`` lists each member's ``txnId`` in serial order;
``readVersion`` is the oldest snapshot a member read, ``isBlindAppend`` holds if it holds for
every member, ``operationMetrics`` are the members' summed.  A group of one is written exactly
as the lone transaction would be.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.protocol.actions import Add, CommitInfo, Remove
from deltacommit.protocol.features.identity import SCHEMA_UPDATE_TAG, is_mark_update
from deltacommit.protocol.json_values import loads

ENGINE_INFO = "deltacommit/0.1.0"

#: ``commitInfo`` field listing the ``txnId`` of every transaction a group's version holds.
MEMBERS_KEY = "deltacommit.memberTxnIds"

#: ``commitInfo`` field holding the SHA-256 (hex) of the commit at the version before, as the
#: writer read it from the log or wrote it: another writer of the host that was handed that
#: commit with a host turn's record checks the bytes against this field of a commit it read
#: from the log, instead of reading them again (``TableLog.advance_to``).
PREVIOUS_COMMIT_KEY = "deltacommit.previousCommit"


def previous_commit(data: bytes) -> str | None:
    """``PREVIOUS_COMMIT_KEY`` of a commit file's ``commitInfo``, which this library writes as
    its first line; None where that line holds none (another writer's commit, a broken one)."""
    first = data.split(b"\n", 1)[0]
    if PREVIOUS_COMMIT_KEY.encode() not in first:
        return None
    try:
        info = loads(first).get("commitInfo")
    except (ValueError, AttributeError):
        return None
    value = info.get(PREVIOUS_COMMIT_KEY) if isinstance(info, dict) else None
    return value if isinstance(value, str) and len(value) == 64 else None


def committed_txn_ids(commit_info: Mapping[str, Any] | CommitInfo | None) -> tuple[str, ...]:
    """The ``txnId`` of every transaction a version holds, from its ``commitInfo``: one for an
    ordinary commit, each member's for a group's version."""
    if commit_info is None:
        return ()
    values = commit_info.values if isinstance(commit_info, CommitInfo) else commit_info
    members = values.get(MEMBERS_KEY)
    if isinstance(members, list):
        return tuple(m for m in members if isinstance(m, str))
    tid = values.get("txnId")
    return (tid,) if isinstance(tid, str) else ()


def json_text(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def render_parameters(parameters: Mapping[str, Any]) -> dict[str, str]:
    """``operationParameters`` as Delta writes them: every value a string."""
    return {k: v if isinstance(v, str) else json_text(v) for k, v in parameters.items()}


def action_metrics(given: Mapping[str, Any], adds: Sequence[Add],
                   removes: Sequence[Remove]) -> dict[str, Any]:
    """``operationMetrics``: what the caller gave, completed with counts of the actions."""
    metrics = dict(given)
    metrics.setdefault("numFiles", str(len(adds)))
    if removes:
        metrics.setdefault("numRemovedFiles", str(len(removes)))
    rows = sum((a.num_records() or 0) for a in adds)
    metrics.setdefault("numOutputRows", str(rows))
    metrics.setdefault("numOutputBytes", str(sum(a.size for a in adds)))
    return metrics


def sum_metrics(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics of several transactions: counts summed, anything else from the first member."""
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if k not in out:
                out[k] = v
                continue
            with contextlib.suppress(TypeError, ValueError):
                out[k] = str(int(out[k]) + int(v))
    return out


def build_commit_info(*, timestamp: int, operation: str, parameters: Mapping[str, str],
                      isolation_level: str, blind_append: bool, metrics: Mapping[str, Any],
                      txn_id: str, read_version: int | None = None,
                      member_txn_ids: Sequence[str] | None = None,
                      tags: Mapping[str, str] | None = None) -> CommitInfo:
    """Every ``commitInfo`` deltacommit writes, in the key order Spark writes."""
    values: dict[str, Any] = {
        "timestamp": timestamp,
        "operation": operation,
        "operationParameters": dict(parameters),
    }
    if read_version is not None:
        values["readVersion"] = read_version
    values.update({
        "isolationLevel": isolation_level,
        "isBlindAppend": blind_append,
        "operationMetrics": dict(metrics),
    })
    if tags:
        values["tags"] = dict(tags)
    values.update({
        "engineInfo": ENGINE_INFO,
        "txnId": txn_id,
    })
    if member_txn_ids is not None:
        values[MEMBERS_KEY] = list(member_txn_ids)
    return CommitInfo(values)


def version_commit_info(members: Sequence[StagedCommit], shared_adds: Sequence[Add],
                        timestamp: int, group_id: str) -> CommitInfo:
    """The ``commitInfo`` of a version holding ``members`` (and ``shared_adds``, files a group
    leader wrote for coalesced appends)."""
    tags = _identity_tags(members)
    if len(members) == 1:
        m = members[0]
        # A new table's version 0 read no version and, as Spark writes CREATE TABLE, counts
        # no files.
        new_table = m.read_version < 0 and not m.adds and not shared_adds
        return build_commit_info(
            timestamp=timestamp, operation=m.operation, parameters=m.parameters,
            read_version=None if m.read_version < 0 else m.read_version,
            isolation_level=m.summary.effective_isolation.value,
            blind_append=m.summary.is_blind_append,
            metrics=dict(m.metrics) if new_table else action_metrics(
                m.metrics, list(m.adds) + list(shared_adds), m.removes),
            txn_id=m.txn_id, tags=tags)
    first = members[0]
    metrics = sum_metrics([action_metrics(m.metrics, m.adds, m.removes) for m in members]
                          + [{"numFiles": str(len(shared_adds)),
                              "numOutputBytes": str(sum(a.size for a in shared_adds))}])
    return build_commit_info(
        timestamp=timestamp, operation=first.operation, parameters=first.parameters,
        read_version=min(m.read_version for m in members),
        isolation_level=first.summary.effective_isolation.value,
        blind_append=all(m.summary.is_blind_append for m in members),
        metrics=metrics, txn_id=group_id, member_txn_ids=[m.txn_id for m in members],
        tags=tags)


def _identity_tags(members: Sequence[StagedCommit]) -> dict[str, str] | None:
    """Spark's tag on a version whose only metadata change raises identity high-water marks,
    which lets concurrent writers that change no metadata commit after it."""
    changes = [m for m in members if m.metadata is not None]
    if changes and all(is_mark_update(m.summary.read_metadata, m.metadata) for m in changes):
        return {SCHEMA_UPDATE_TAG: "true"}
    return None
