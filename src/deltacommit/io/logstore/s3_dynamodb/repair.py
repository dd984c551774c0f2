"""Completing incomplete entries (on every listing and refresh, by the next writer, and by
``deltacommit dynamodb repair``), and the temp files' lifecycle.

Temp files: unlike Spark, a writer deletes its own ``T(N)`` right after N.json holds the commit,
sending the delete together with step 4 (one round trip for both, not one after the other).
delta-rs (deltalake up to 1.6.0, ``crates/aws/src/logstore/dynamodb_logstore.rs``
``repair_entry`` at python-v1.6.0) repairs an
incomplete entry by *moving* the temp file (``rename_if_not_exists``: copy if N.json is absent,
then delete) and reads an N.json that already exists as "version N already exists"; finding the
temp file gone (``NotFound``) it completes the entry as already moved.  So a kept temp file made
every delta-rs reader or writer that met our entry between copy and completion fail, and the
deletion makes them succeed.  Deleting it only after the completion (so that it could wait for
a batch, as lost claims' do) fails them: the repair retries its move up to three times without
reading the entry again, so the temp file's disappearance rescues a repair already under way
and the completion does not (``tests/compat/test_mixed_fleet_errors.py`` fails that way).  It
is safe for Spark: ``fixDeltaLog`` copies the temp file only
while N.json does not exist (``if (!copied && !fs.exists(targetPath))``, then the complete
``PutItem``; delta-io/delta ``storage/src/main/java/io/delta/storage/BaseExternalLogStore.java``
at bb1057f4367f555b01e299fd1690d85aafc0ac4c, used by ``storage-s3-dynamodb/src/main/java/io/
delta/storage/S3DynamoDBLogStore.java``), and since the temp file goes only once N.json exists,
a Spark repairer never needs it.  Our own repair of an entry whose temp file is gone and whose
N.json exists completes it.  Temp files of crashed writers, of lost claims a process did not
live to sweep, and all of Spark's remain under
``_delta_log/.tmp/``: ``cleanup`` deletes those older than the checkpoint it keeps, or expire
them with an S3 lifecycle rule.

The reverse: an entry of delta-rs's kind (``_commit_<uuid>.json.tmp``) is repaired by moving
too (its temp file is deleted once N.json holds it), and only after its writer had
``DELTACOMMIT_DYNAMO_REPAIR_GRACE_MS`` (measured by the injectable clock from when this log store
first saw the entry) to move it itself; creating N.json under a live delta-rs writer makes it
take its own commit for a lost race and commit the same actions again.  A writer catching up
after a lost race reads a fresh delta-rs entry's content from its temp file without copying it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from deltacommit.errors import LogStoreError, ObjectExistsError, ObjectNotFoundError
from deltacommit.io.logstore.s3_dynamodb.client import ConditionFailed
from deltacommit.io.logstore.s3_dynamodb.entry import (
    ATTR_COMPLETE,
    ATTR_EXPIRE_TIME,
    ATTR_FILE_NAME,
    ATTR_TEMP_PATH,
    CommitEntry,
    entry_key,
)
from deltacommit.io.logstore.s3_dynamodb.fleet import FleetMember
from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path

__all__ = ["TEMP_SWEEP_AGE_S", "TEMP_SWEEP_BATCH", "EntryRepairer", "RepairReport"]

log = logging.getLogger(__name__)

#: The temp files of lost claims are deleted this many at a time (one DeleteObjects request on
#: S3), or once the oldest has waited this long, at the next lost race.
TEMP_SWEEP_BATCH = 32
TEMP_SWEEP_AGE_S = 30.0


# How often a repairer waiting for a moving writer looks again.
_MOVER_POLL_S = 0.025


class _Unrecoverable(LogStoreError):
    """An incomplete entry whose temp file and commit file are both gone."""


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What ``repair`` found and did for one incomplete entry."""

    version: int
    temp_path: str
    action: str  # "copied and completed", "completed", "unrecoverable", "dropped"
    detail: str = ""


class EntryRepairer(FleetMember):
    """Steps 3 and 4 for any entry (a copy that never replaces a file, and the completion),
    the repair of incomplete entries, and the temp files."""

    def _create(self, path: str, data: bytes) -> None:
        """Create ``path`` unless it exists, with S3's conditional write where available.

        Without it (``DELTACOMMIT_S3_CONDITIONAL_WRITES=false``), check then write, as Spark's
        Hadoop ``create(overwrite=false)`` does: every copier copies the same ``T(N)``, so the
        race can only write identical bytes.
        """
        if self.store.supports_conditional_put:
            self.store.put_if_absent(path, data)
            return
        if self.store.exists(path):
            raise ObjectExistsError("copy-if-absent", f"{self.table_uri}/{path}", "object already exists")
        self.store.put(path, data)

    def _complete(self, entry: CommitEntry, *, quiet: bool) -> bool:
        """Step 4; whether the entry is complete now.  ``quiet``: log failures, don't raise."""
        expire = int(self._clock.time()) + self.ttl_seconds
        try:
            self._call("UpdateItem", Key=entry_key(entry.table_path, entry.file_name),
                       UpdateExpression=f"SET #c = :t, {ATTR_EXPIRE_TIME} = :e",
                       ConditionExpression="#c = :f",
                       ExpressionAttributeNames={"#c": ATTR_COMPLETE},
                       ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"},
                                                  ":e": {"N": str(expire)}})
        except ConditionFailed:
            return True  # completed by someone else (or removed by repair)
        except Exception as e:
            if not quiet:
                raise
            log.warning("marking entry %s of %s complete in DynamoDB table %s failed (%s); "
                        "the next reader or writer will complete it",
                        entry.file_name, self.table_path, self.table_name, e)
            return False
        return True

    def _refresh(self, *, catching_up: bool = False) -> tuple[int | None, tuple[int, bytes] | None]:
        """The latest version per DynamoDB (None if unknown), repairing the latest entry.

        Returns the repaired commit's content too, so a reader that needs it does not read it
        again.  An entry past its expiry is not trusted as the latest: TTL may already have
        removed newer ones.

        ``catching_up`` (a writer reading the commit that just beat it) leaves a delta-rs
        writer's incomplete entry to that writer, which is almost certainly still finishing it
        and fails if its N.json appears under it (see ``_repair``); the content is read from
        where it is.  Should that writer have died, the next writer's step 1 completes it.
        """
        since = self._now()
        entry = self.latest_entry()
        if entry is None:
            return None, None
        repaired = None
        if not entry.complete:
            if catching_up and _moved_by_writer(entry):
                data = self._read_temp(entry)
                repaired = (entry.version, data if data is not None else self._read_moved(entry))
            else:
                repaired = (entry.version, self._repair(entry))
        elif not self._trusted(entry):
            return None, None
        self._k.note_latest(entry.version, since)
        return entry.version, repaired

    def _repair(self, entry: CommitEntry) -> bytes:
        """Copy ``T(N)`` to N.json (never replacing it) and complete the entry; N's content.

        Every repairer copies the same ``T(N)``, so concurrent repairs (and the writer's own
        copy) are benign.  The temp file may be gone because delta-rs repairs by moving it;
        then N.json must exist.  If neither exists the commit cannot be recovered: reported,
        never marked complete (which would hide a missing version).

        A temp file delta-rs wrote is moved, not copied: deleted once N.json holds it.  delta-rs
        finishes its own commit by moving its temp file and treats an N.json that already
        exists as a lost race, committing the same actions again at a later version; finding
        the temp file gone instead, it completes the entry as a repair it was beaten to.
        """
        if _moved_by_writer(entry):
            entry = self._await_mover(entry)
            if entry.complete:
                self._k.note_good(entry.version)
                return self._read_moved(entry)
        version = entry.version
        target = commit_path(version)
        data = self._read_temp(entry)
        if data is None:
            data = self._read_moved(entry)
        else:
            try:
                self._create(target, data)
            except ObjectExistsError:
                data = self.store.get(target)
            # N.json holds the commit: the temp file goes before the entry is completed, for
            # every writer's entry.  delta-rs moves temp files and fails on one whose N.json
            # exists; Spark's repair copies only while N.json is absent, and Spark's writer
            # does not read its temp file after its own copy.
            self._delete_temp(entry)
            self._step("repair_after_copy", version)
        self._complete(entry, quiet=True)
        self._k.note_good(version)
        self._step("repair_after_complete", version)
        return data

    def _await_mover(self, entry: CommitEntry) -> CommitEntry:
        """Leave a moving writer's incomplete entry to it for ``repair_grace_ms`` from when this
        log store first saw it: until the entry is complete, its temp file is gone (moved), or
        the grace is over (the writer presumably died).  Returns the entry as last read.

        A delta-rs writer finishes its commit by copying its temp file to N.json and deleting
        it; should a repairer create N.json first, that writer takes its own commit for a lost
        race and commits the same actions again at N+1.
        """
        key = entry.temp_path
        with self._lock:
            first = self._k.first_seen.setdefault(key, self._clock.monotonic())
        settled = self._wait_for_mover(entry, first + self.repair_grace_ms / 1000)
        with self._lock:
            # Finished, moved, or about to be repaired by the caller: no longer waited for.
            # Forgetting it keeps a long-lived process beside delta-rs writers from keeping
            # one record per commit they ever left to finish.
            self._k.first_seen.pop(key, None)
        return settled

    def _wait_for_mover(self, entry: CommitEntry, deadline: float) -> CommitEntry:
        while True:
            if not self.store.exists(entry.temp_key):
                return entry
            now = self._clock.monotonic()
            if now >= deadline:
                log.info("repairing the incomplete entry of version %s of %s: its writer has not "
                         "moved %s within %d ms", entry.version, self.table_uri, entry.temp_path,
                         self.repair_grace_ms)
                return entry
            self._clock.sleep(min(_MOVER_POLL_S, deadline - now))
            current = self._get_entry(entry.version)
            if current is None:
                raise _Unrecoverable(self._unrecoverable_message(entry))
            if current.complete or current.temp_path != entry.temp_path:
                return current

    def _read_temp(self, entry: CommitEntry) -> bytes | None:
        try:
            return self.store.get(entry.temp_key)
        except ObjectNotFoundError:
            return None

    def _read_moved(self, entry: CommitEntry) -> bytes:
        """N.json of an entry whose temp file is gone (moved there by delta-rs, or removed)."""
        try:
            return self.store.get(commit_path(entry.version))
        except ObjectNotFoundError:
            raise _Unrecoverable(self._unrecoverable_message(entry)) from None

    def _unrecoverable_message(self, entry: CommitEntry) -> str:
        return (f"table {self.table_uri}: DynamoDB table {self.table_name} has an incomplete entry "
                f"for version {entry.version}, but neither its temp file {LOG_DIR}/{entry.temp_path} "
                f"nor {LOG_DIR}/{entry.file_name} exists, so the commit cannot be completed. "
                "Nothing was changed. If the table was deleted and re-created, or the temp file "
                "was removed by a lifecycle rule, drop the entry with `deltacommit dynamodb "
                f"repair {self.table_uri} --drop-unrecoverable` (the commit is lost either way)")

    def _spend_temp(self, key: str) -> None:
        """Queue the temp file of a lost claim for deletion with others (``_sweep_temps``).

        Nothing can ever read it, so it need not go at once; Spark's writer never deletes
        them, and deleting each at once would cost a request per lost race."""
        with self._lock:
            if not self._k.spent:
                self._k.spent_since = self._clock.monotonic()
            self._k.spent.append(key)
            due = (len(self._k.spent) >= TEMP_SWEEP_BATCH
                   or self._clock.monotonic() - self._k.spent_since >= TEMP_SWEEP_AGE_S)
        if due:
            self._sweep_temps()

    def _sweep_temps(self) -> None:
        """Delete the queued temp files of lost claims.  Best effort: those left behind (by a
        failure here, or fewer than a batch when the process ends) cost only storage, and log
        cleanup deletes them with the log they belong to, as it does Spark's, which are never
        deleted."""
        with self._lock:
            keys, self._k.spent = self._k.spent, []
        if not keys:
            return
        try:
            self.store.delete_many(keys)
        except Exception as e:
            log.warning("could not delete %d spent temp files of %s (%s); log cleanup will",
                        len(keys), self.table_uri, e)

    def _delete_temp(self, entry: CommitEntry) -> None:
        try:
            self.store.delete(entry.temp_key)
        except ObjectNotFoundError:
            pass  # moved by a delta-rs repairer
        except Exception as e:  # N.json is in place; a leftover temp file costs only storage
            log.warning("could not delete temp file %s/%s after copying it (%s)",
                        self.table_uri, entry.temp_key, e)

    def repair(self, *, drop_unrecoverable: bool = False) -> list[RepairReport]:
        """Complete every incomplete entry of this table (``deltacommit dynamodb repair``).

        Only the latest entry is normally incomplete; older ones (left by a writer that skipped
        step 1) are completed the same way, since copies never replace a file.  An entry whose
        commit is unrecoverable is reported, or with ``drop_unrecoverable`` deleted (only if it
        is still incomplete and unchanged).

        The entries are looked for where the fleet's are (``_find_entries``): an operator
        repairs by the URI a writer's error names, which may be ``s3://`` while Spark's
        writers key theirs ``s3a://``.
        """
        self._find_entries()
        out: list[RepairReport] = []
        for entry in self.entries(incomplete_only=True):
            existed = self.store.exists(commit_path(entry.version))
            try:
                self._repair(entry)
            except _Unrecoverable as e:
                if not drop_unrecoverable:
                    out.append(RepairReport(entry.version, entry.temp_path, "unrecoverable", str(e)))
                    continue
                self._drop(entry)
                out.append(RepairReport(entry.version, entry.temp_path, "dropped",
                                        "incomplete entry without temp file or commit file deleted"))
                continue
            out.append(RepairReport(entry.version, entry.temp_path,
                                    "completed" if existed else "copied and completed"))
        return out

    def _drop(self, entry: CommitEntry) -> None:
        try:
            self._call("DeleteItem", Key=entry_key(entry.table_path, entry.file_name),
                       ConditionExpression="#c = :f AND #t = :tp",
                       ExpressionAttributeNames={"#c": ATTR_COMPLETE, "#t": ATTR_TEMP_PATH},
                       ExpressionAttributeValues={":f": {"S": "false"}, ":tp": {"S": entry.temp_path}})
        except ConditionFailed:
            raise LogStoreError(f"entry {entry.file_name} of {self.table_path} changed while being "
                                "dropped; run the repair again") from None

    def _find_entries(self) -> None:
        """Act on the entries under the one ``tablePath`` spelling that has any, as a writer
        joins it; where several have entries (a split fleet, which writers refuse), on the
        configured one, whose incomplete entries still block its writers."""
        found = self.fleet_keys()
        if len(found) == 1:
            self.table_path = next(iter(found))

    def restore_newest_entry(self) -> tuple[int, bool]:
        """Write a complete entry for the newest commit if it has none; (version, written).

        For a DynamoDB table re-created empty, or entries deleted by hand, while the log went
        on: a commit younger than half the entries' TTL without an entry looks like another
        mechanism's, so every writer that has not itself seen the entries refuses to commit
        until it is that old (``_check_no_other_mechanism``, ``_check_explained``).  The
        operator running this vouches that the table's writers all commit through this
        DynamoDB table.  One entry is enough: writers check only the entry before the version
        they write, and join the spelling that has entries.  The put never replaces an entry,
        and a complete entry names a temp file no one reads (Spark and delta-rs leave complete
        entries alone).
        """
        self.join_fleet(check_mechanism=False)
        listed = [f.version for f in super().list_log(self._listing_start()) if f.kind == "commit"]
        if not listed:
            raise LogStoreError(f"table {self.table_uri} has no commit files: there is no entry "
                                "to restore")
        version = max(listed)
        if self._get_entry(version) is not None:
            return version, False
        name = commit_name(version)
        entry = CommitEntry(self.table_path, name, f".tmp/{name}.{self._random.uuid()}",
                            complete=True, expire_time=int(self._clock.time()) + self.ttl_seconds)
        try:
            self._call("PutItem", Item=entry.to_item(),
                       ConditionExpression=f"attribute_not_exists({ATTR_FILE_NAME})")
        except ConditionFailed:
            return version, False  # written meanwhile, by a writer or a repair
        self._k.note_good(version)
        return version, True

    def drop_stale_entries(self) -> int:
        """Delete every entry of this ``tablePath`` when the table has no commit files left.

        For a table deleted and re-created at the same location before TTL removed the old
        entries (which would otherwise make version 0 fail).  Refused while any commit exists.
        The entries are those under the fleet's ``tablePath``, as for ``repair``.

        Only complete entries are stale: an incomplete one is a creator between its claim and
        its copy (the table being re-created), which must keep version 0, or an unrecoverable
        one (``repair``'s ``drop_unrecoverable``).  The delete is conditional on ``complete``,
        so an entry a creator claims after the old one was read is not deleted either.
        """
        self._find_entries()
        listed = [f for f in super().list_log(0) if f.kind == "commit"]
        if listed:
            raise LogStoreError(
                f"table {self.table_uri} has {len(listed)} commit files (newest version "
                f"{max(f.version for f in listed)}); its DynamoDB entries are not stale and are kept")
        count = 0
        for entry in self.entries():
            if not entry.complete:
                continue
            try:
                self._call("DeleteItem", Key=entry_key(entry.table_path, entry.file_name),
                           ConditionExpression="#c = :t",
                           ExpressionAttributeNames={"#c": ATTR_COMPLETE},
                           ExpressionAttributeValues={":t": {"S": "true"}})
            except ConditionFailed:
                continue  # claimed again meanwhile (a creator), or already gone
            count += 1
        return count


def _moved_by_writer(entry: CommitEntry) -> bool:
    """Whether the entry's writer finishes by moving its temp file (delta-rs) rather than
    copying it (Spark, deltacommit): delta-rs keeps temp files beside the commits
    (``_commit_<uuid>.json.tmp``), the copying writers under ``.tmp/``."""
    return not entry.temp_path.startswith(".tmp/")
