"""The write protocol: steps 0 to 4 for version N (see the package docstring).

Requests per commit, uncontended writer that already knows the table (the usual case after its
first commit or a refresh): **5** — PUT ``T(N)``, conditional ``PutItem``, conditional PUT
``N.json`` (the bytes are in memory, so no GET of ``T(N)``), DELETE ``T(N)``, ``UpdateItem``.
The first commit of a process to a table adds the fleet-key Queries (one per ``tablePath``
spelling, see ``join_fleet``) and the PUT of ``DYNAMODB_MARKER``, never more: the log store
objects of one table in a process share what they establish (``logstore.knowledge``).  Spark makes about
9 (HEAD N, GetItem N-1, HEAD N-1, PUT T, PutItem, GET T, HEAD + PUT N, PutItem).  The checks of
steps 0 and 1 are skipped only when this process has already established them, from its own
requests (never on the word of another process, such as a host turn's record):

* Step 1 (``GetItem`` N-1, HEAD N-1.json) is skipped when this process saw entry N-1 complete
  and N-1.json present: it completed N-1 itself, or repaired it, or a consistent ``Query`` of
  the latest entry found it complete and the file was then read or listed.  Completion never
  reverts, so that knowledge does not age.  Where it runs, the HEAD is spared when this
  process has read N-1.json, and the consistent read of entry N-1 establishes what step 0
  needs (``_ensure_previous``): after another process's commit, a writer holding the host's
  turn checks both with a ``GetItem`` sent beside its temp file and the GET it read N-1 with.
* Step 0 (HEAD N.json) guards against an N.json whose entry TTL has already deleted.  It is
  skipped when this process established, less than half the entry TTL ago, that N-1 was the
  latest version (a listing, a read miss, a consistent Query of an unexpired latest entry, or
  its own successful ``PutItem`` of N-1, which proves N-1.json and so N.json absent at that
  moment, or an incomplete entry N-1 returned by its own failed claim of N-1: only the latest
  entry can be incomplete).  Any N.json created after that moment was created through an entry
  that lives at least the TTL past its creation, so the conditional ``PutItem`` still sees it.
  This assumes, as Spark's documentation does, that every writer uses the same (or a longer)
  TTL.  A *complete* entry N-1 returned by a failed claim shows less: its writer may have gone
  on to N, but no entry newer than N-1 can expire while N-1's is trusted, so the HEAD is skipped
  only within the expiry margin (``_within_margin``).  An N.json
  found with no entry for it, younger than half the TTL, was written by another mechanism:
  the write is refused (``_check_explained``) rather than retried as a lost race, because the
  catch-up follows the entries and would never reach that version.

A lost race costs the PUT of ``T(N)`` and the failed ``PutItem``; the commit loop then reads
the winners with one consistent ``Query`` (the latest entry, repaired if incomplete: its temp
file is read anyway, so repairing costs one PUT and one ``UpdateItem`` more) and one GET per
missed commit.  Repairing at once races the winner's own copy, but deletes the temp file of a
copied entry early, which rescues a delta-rs repair of it already under way (see below).
Leaving the entry to its writer instead (checked in step 1 of the retry) saved requests but,
in mixed-fleet torture runs beside Spark's writers (whose temp files are never deleted), gave
deltalake writers more "version already exists" failures.  The lost claim's temp file is named
by no entry: a writer deletes its own in batches (``TEMP_SWEEP_BATCH`` per DeleteObjects).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deltacommit.errors import (
    CoordinationMismatchError,
    CorruptLogError,
    LogStoreError,
    ObjectExistsError,
    ObjectNotFoundError,
    VersionExistsError,
)
from deltacommit.io.logstore.base import Baton, Moment
from deltacommit.io.logstore.s3_dynamodb.client import ConditionFailed
from deltacommit.io.logstore.s3_dynamodb.entry import ATTR_FILE_NAME, CommitEntry
from deltacommit.io.logstore.s3_dynamodb.repair import EntryRepairer
from deltacommit.io.storage import background
from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path

__all__ = ["EntryClaimer"]

log = logging.getLogger(__name__)

#: Entries of lost claims kept for the catch-up after each (one per thread racing normally).
_TAKEN_KEPT = 16


class EntryClaimer(EntryRepairer):
    """Writing a version: steps 0 to 4, with the checks of steps 0 and 1 skipped on what this
    process has established."""

    def write_commit(self, version: int, data: bytes) -> None:
        self.write_commit_when_ready(version, data, _nothing)

    def write_commit_when_ready(self, version: int, data: bytes,
                                ready: Callable[[], None], baton: Baton | None = None) -> None:
        """``_write_commit``, and a refused commit leaves no temp file: a writer that refuses
        (the fleet is split, another mechanism writes the table) is usually about to stop, so
        its temp file (and those of its lost claims) is deleted now, not queued for a sweep
        that would never come (``_spend_temp``)."""
        try:
            self._write_commit(version, data, ready, baton)
        except CoordinationMismatchError:
            self._sweep_temps()
            raise

    def _write_commit(self, version: int, data: bytes, ready: Callable[[], None],
                      baton: Baton | None) -> None:
        """The steps below; ``ready`` is awaited between the temp file and the entry, so the
        checks and the temp file's put overlap the uploads of the version's data files.

        With the host's turn (``baton``), steps 1 and 0 wait until just before the entry: the
        writer the turn came from is usually still marking entry N-1 complete, and says so in
        the turn's record; this writer's temp file goes out meanwhile.  Then step 1 checks
        entry N-1 itself (completing it, should that writer have died or taken longer than the
        turn's patience), whatever the record says: the word of another process is when to
        look, never what is there.  Step 1's consistent read of entry N-1 also serves step 0
        (``_ensure_previous``).  Both still come before the entry of N, so only the latest
        entry is ever incomplete."""
        if self._k.fleet_keys is None or not (self._k.fleet_keys or self._k.mechanism_checked):
            self.join_fleet()
        deferred = version > 0 and baton is not None and not self._k.knows_good(version - 1)
        if not deferred:
            self._check_before_claim(version)
        self._mark_fleet()
        # Step 2: temp file, then the entry: the linearisation point.
        file_name = commit_name(version)
        entry = CommitEntry(self.table_path, file_name,
                            f".tmp/{file_name}.{self._random.uuid()}", complete=False)
        self._write_temp(entry, data, ready, baton if deferred else None)
        self._claim(entry)
        # Steps 3 and 4: the commit has happened; failures here are repaired by others.
        if self._copy_own(entry, data):
            self._step("after_copy", version)
            self._complete_own(entry, baton)

    def _check_before_claim(self, version: int) -> None:
        """Steps 0 and 1, each unless this process has already established it."""
        # Step 0: an N.json whose entry TTL already removed.
        if not self._knows_absent(version):
            self._check_absent(version)
        # Step 1: the previous commit is complete and present; no stale entries at version 0.
        if version > 0:
            if not self._k.knows_good(version - 1):
                self._ensure_previous(version - 1)
        else:
            first = self._get_entry(0)
            if first is not None:
                if first.complete and not self.store.exists(commit_path(version)):
                    raise LogStoreError(self._stale_message(first))
                raise VersionExistsError(self.table_uri, version)

    def _write_temp(self, entry: CommitEntry, data: bytes, ready: Callable[[], None],
                    deferred: Baton | None) -> None:
        """Step 2's temp file, then ``ready``; ``deferred``: the host's turn, when steps 1 and 0
        wait until just before the entry.  Whatever fails here leaves the temp file, which no
        entry names, to the sweep."""
        version = entry.version
        # Deferred, entry N-1 is read while the temp file goes out: its writer sent its
        # completion when it handed the turn on, before this writer read N-1.json, so it is
        # usually complete by now; if not, it is waited for and read again below.
        early = (background.submit(lambda: self._read_entry(version - 1))
                 if deferred is not None else None)
        self.store.put(entry.temp_key, data)
        self._step("after_write_temp", version)
        try:
            ready()
            if deferred is not None:
                assert early is not None
                self._check_deferred(version, early.result(), deferred)
        except BaseException:
            self._spend_temp(entry.temp_key)  # never named by an entry
            raise

    def _check_deferred(self, version: int, seen: tuple[Moment, CommitEntry | None] | None,
                        baton: Baton) -> None:
        """Steps 1 and 0 under the host's turn: ``seen`` is entry N-1 as read beside the temp
        file; still incomplete, its writer is waited for (bounded by the turn's patience) and
        the entry read again."""
        if seen is not None and seen[1] is not None and not seen[1].complete:
            baton.await_previous(version - 1)
            seen = None
        if not self._k.knows_good(version - 1):
            self._ensure_previous(version - 1, seen)
        if not self._knows_absent(version):
            self._check_absent(version)

    def _claim(self, entry: CommitEntry) -> None:
        """Step 2's entry (``_put_entry``); a lost claim leaves the temp file to the sweep."""
        claimed_at = self._now()
        try:
            self._put_entry(entry)
        except VersionExistsError:
            self._spend_temp(entry.temp_key)  # another writer owns N: no entry names this file
            raise
        self._k.note_latest(entry.version, claimed_at)
        self._step("after_put_entry", entry.version)

    def _complete_own(self, entry: CommitEntry, baton: Baton | None) -> None:
        """Step 4 once N.json holds the commit, the temp file's deletion sent beside it and the
        host's turn (``baton``) handed on meanwhile."""
        version = entry.version
        # N.json holds the commit: the temp file goes as the entry is completed, both requests
        # at once.  A delta-rs reader or writer repairing the entry meanwhile moves the temp
        # file and takes an N.json that already exists as a lost race; finding the temp file
        # gone it completes the entry as moved.  Its repair retries the move a few times
        # without reading the entry again, so only the temp file's disappearance (not our
        # completion) rescues one that began before it: the delete is sent as soon as N.json
        # exists, whatever the completion does.  Spark's fixDeltaLog copies only while N.json
        # is absent.
        deleting = background.submit(lambda: self._delete_temp(entry))
        try:
            if baton is not None:
                # The host's next writer may claim N+1 while this one completes N (after the
                # delete is sent: the window a delta-rs repair fails in stays as short).
                baton.written(version)
                self._step("after_hand_on", version)
            completed = self._complete(entry, quiet=True)
        finally:
            deleting.result()
        if completed:
            self._k.note_good(version)
        self._step("after_complete", version)

    def _check_absent(self, version: int) -> None:
        """VersionExistsError if N.json exists.  Without an entry for it, a young N.json was
        written by another mechanism: refused (``_check_explained``), since the catch-up after
        a lost race follows the entries and would never reach it."""
        try:
            meta = self.store.head(commit_path(version))
        except ObjectNotFoundError:
            return
        if self._get_entry(version) is None:
            self._check_explained(version, meta)
        raise VersionExistsError(self.table_uri, version)

    def _put_entry(self, entry: CommitEntry) -> None:
        """Step 2's claim.  A lost claim keeps the entry that beat it (returned by the failed
        request) for ``read_after_loss``: the catch-up then needs no Query to find it."""
        since = self._now()
        try:
            self._call("PutItem", Item=entry.to_item(),
                       ConditionExpression=f"attribute_not_exists({ATTR_FILE_NAME})",
                       ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as failed:
            current: CommitEntry | None = None
            if failed.retried:
                # Our first attempt may have been the one that created the entry.
                current = self._get_entry(entry.version)
                if current is not None and current.temp_path == entry.temp_path:
                    return
            elif failed.item is not None:
                try:
                    current = self._parse(failed.item)
                except LogStoreError:
                    current = None  # read again, and reported, by the ordinary catch-up
            if current is not None:  # the item at the claim's key: the entry of this version
                with self._lock:
                    self._taken[entry.version] = (current, since)
                    while len(self._taken) > _TAKEN_KEPT:
                        del self._taken[min(self._taken)]
            raise VersionExistsError(self.table_uri, entry.version) from None

    def _copy_own(self, entry: CommitEntry, data: bytes) -> bool:
        """Step 3 with the bytes in memory; whether N.json now holds them.

        An existing N.json is never replaced.  It normally holds our bytes (a reader repaired
        our entry first).  Otherwise, with the entry now naming another temp file, ours was
        removed and the version claimed again: a lost race.  Anything else means the version
        existed while its entry had expired, so our entry is completed (N.json is in place)
        and the version is reported taken.
        """
        target = commit_path(entry.version)
        try:
            self._create(target, data)
            return True
        except ObjectExistsError:
            pass
        except Exception as e:  # the commit stands; readers copy T(N) later
            log.warning("commit %s of %s is claimed in DynamoDB table %s but copying it to "
                        "%s failed (%s); the next reader or writer will complete it",
                        entry.version, self.table_uri, self.table_name, target, e)
            return False
        try:
            existing = self.store.get(target)
        except Exception as e:
            log.warning("commit %s of %s: %s already exists and could not be read back (%s)",
                        entry.version, self.table_uri, target, e)
            return False
        if existing == data:
            return True
        current = self._get_entry(entry.version)
        if current is not None and current.temp_path != entry.temp_path:
            # Our entry was removed (by hand, or a repair's drop) and another writer claimed
            # the version since: our claim is void and nothing names our temp file, so this
            # is a lost race, not a version another mechanism wrote.
            log.warning("entry %s of %s was removed while its writer copied it, and the version "
                        "claimed again by another writer; this commit is retried at a later "
                        "version", entry.file_name, self.table_path)
            self._delete_temp(entry)
            raise VersionExistsError(self.table_uri, entry.version)
        try:
            self._check_explained(entry.version, self.store.head(target))
        except CoordinationMismatchError:
            # Our claim is void (N.json holds another writer's commit): withdrawn, so the
            # version stays unexplained and every writer of this protocol refuses after it.
            try:
                self._drop(entry)
            except LogStoreError as e:
                log.warning("could not withdraw entry %s of %s: %s", entry.file_name,
                            self.table_path, e)
            self._delete_temp(entry)
            raise
        except ObjectNotFoundError:  # pragma: no cover - it was just read
            pass
        self._complete(entry, quiet=True)  # N.json is in place: the entry must not block others
        log.warning("version %s of %s existed without a live DynamoDB entry (expired by TTL?); "
                    "this commit is retried at a later version", entry.version, self.table_uri)
        raise VersionExistsError(self.table_uri, entry.version)

    def _read_entry(self, version: int) -> tuple[Moment, CommitEntry | None]:
        """Entry ``version`` read consistently, and when the read was sent."""
        since = self._now()
        return since, self._get_entry(version)

    def _ensure_previous(self, version: int,
                         seen: tuple[Moment, CommitEntry | None] | None = None) -> None:
        """Step 1 for N = version + 1: entry ``version`` complete and its file present (the
        file known present where this process read it).  ``seen``: the entry as just read
        (``_read_entry``), else it is read here.

        The entry, read consistently, also shows what step 0 needs: incomplete, it is the
        latest (only the latest can be); complete and trusted, no newer entry can expire
        within the margin (``read_after_loss`` reasons alike)."""
        since, entry = seen if seen is not None else self._read_entry(version)
        if entry is not None and (not entry.complete or self._trusted(entry)):
            self._k.note_latest(version, since if not entry.complete else self._within_margin(since))
        if entry is not None and not entry.complete:
            self._repair(entry)
        elif entry is None:
            # One HEAD, as the existence check it replaces: the file's age tells an entry TTL
            # removed from one that never existed (another mechanism wrote the version).
            try:
                self._check_explained(version, self.store.head(commit_path(version)))
            except ObjectNotFoundError:
                raise CorruptLogError(
                    f"table {self.table_uri}: previous commit {LOG_DIR}/{commit_name(version)} "
                    f"does not exist in the object store and DynamoDB table {self.table_name} "
                    f"has no entry for it (expired?); version {version + 1} cannot be written "
                    "after a missing version") from None
        elif not self._k.was_read(version) and not self.store.exists(commit_path(version)):
            where = f"DynamoDB table {self.table_name} has a complete entry for it"
            raise CorruptLogError(
                f"table {self.table_uri}: previous commit {LOG_DIR}/{commit_name(version)} does not "
                f"exist in the object store but {where}; version {version + 1} cannot be written "
                "after a missing version. Restore that file if it was deleted by mistake; to "
                f"roll the table back to version {version - 1} on this mechanism, delete its "
                f"entry too (tablePath {self.table_path!r}, fileName "
                f"{commit_name(version)!r}), as Spark's S3DynamoDBLogStore reads the same entry")
        self._k.note_good(version)

    def _stale_message(self, entry: CommitEntry) -> str:
        return (f"old entries for table {self.table_path} still exist in DynamoDB table "
                f"{self.table_name} (version {entry.version} is complete but "
                f"{LOG_DIR}/{entry.file_name} does not exist): the table was deleted and is being "
                "re-created at the same location before the entries expired. Remove them with "
                f"`deltacommit dynamodb repair {self.table_uri} --drop-stale-entries` (or wait "
                "for TTL to delete them)")


def _nothing() -> None:
    """``write_commit``'s wait: a caller of it has nothing in flight."""
