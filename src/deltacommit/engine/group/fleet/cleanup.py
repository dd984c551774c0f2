"""What in the fleet folder may be deleted, decided from one listing and the log.

Records are removed by the committer that landed them (one batched delete after its claim),
by their owner once it fails, and by any round's committer that lists the folder and finds a
record whose version bound exists (no includer may land it any more: every includer refuses
a version above the bound) or whose wall-clock deadline passed by the policy's margin, and
round keys of versions that exist (all but the newest ``KEEP_ROUNDS``).  So storage stays
bounded under kill -9: what a killed writer leaves is deleted by the next round's committer.
Data files of a transaction that never lands are left to VACUUM, as for any failed writer.

Readers and VACUUM of other engines never touch the folder: its name starts with ``_``, which
makes it hidden to both.  delta-rs: ``is_hidden_directory`` in
``crates/core/src/operations/vacuum.rs`` (delta-io/delta-rs at
6b53ac79451b3203506f281fafaa3e9f876f03a9) skips every path starting with ``.`` or ``_``
except ``_delta_index``, ``_change_data`` and names starting with a partition column's name;
Spark: ``DeltaTableUtils.isHiddenDirectory`` in
``spark/src/main/scala/org/apache/spark/sql/delta/DeltaTable.scala`` (delta-io/delta at
50ea73d711900087df4f794aebbc9c75ca15a9b8), which ``VacuumCommand`` uses, skips paths starting
with ``.`` or ``_`` except ``_delta_index``, ``_change_data`` and ``<partition column>=``.
(A partition column whose name begins ``_deltacommit_fleet`` would defeat delta-rs's rule.)
deltacommit's own VACUUM, log cleanup and ``verify`` skip it by name (``FLEET_DIR``).
"""

from __future__ import annotations

from collections.abc import Sequence

from deltacommit.io.storage.base import ObjectMeta
from deltacommit.protocol.fleet.record import FleetRecord, txn_id_of, version_of_round

#: Round keys of this many newest versions are kept: a writer that learned of the table a few
#: versions ago finds the key of a version that exists taken (and learns of the version at
#: once) instead of winning it again and listing, reading and claiming for a version that
#: exists, beside the round that commits the next.
KEEP_ROUNDS = 4


def stale_rounds(listed: Sequence[ObjectMeta], latest: int) -> list[str]:
    """Round keys of versions up to ``latest`` (which exist: their rounds are over), but the
    newest ``KEEP_ROUNDS`` of them: at most that many keys of rounds that are over stay."""
    out = []
    for meta in listed:
        v = version_of_round(meta.path)
        if v is not None and v <= latest - KEEP_ROUNDS:
            out.append(meta.path)
    return out


def record_paths(listed: Sequence[ObjectMeta]) -> list[tuple[str, str]]:
    """(txnId, path) of each record listed, in listing order."""
    out = []
    for meta in listed:
        t = txn_id_of(meta.path)
        if t is not None:
            out.append((t, meta.path))
    return out


def expired(record: FleetRecord, latest: int, now_ms: int, margin_ms: int) -> bool:
    """Whether no includer can land ``record`` any more and its owner, if alive, has stopped
    renewing it: its bound version exists, or its deadline passed by ``margin_ms``."""
    return record.bound <= latest or record.deadline_ms + margin_ms < now_ms
