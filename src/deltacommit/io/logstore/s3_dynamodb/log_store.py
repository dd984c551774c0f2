"""The log store of Spark's S3DynamoDBLogStore protocol (the package docstring describes it):
the layers ``client``, ``fleet``, ``repair`` and ``claim`` composed, and the log read through
them, repairing the latest entry as Spark's ``listFrom`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from deltacommit.errors import CorruptLogError, ObjectNotFoundError
from deltacommit.io.aws.config import AwsConfig
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.logstore.s3_dynamodb.claim import EntryClaimer
from deltacommit.io.logstore.s3_dynamodb.client import FaultHook
from deltacommit.io.storage import background, open_store
from deltacommit.protocol.log.names import LOG_DIR, LogFile, commit_name, commit_path
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

__all__ = ["STEPS", "DynamoDBLogStore"]

#: Named points of the commit and repair paths where ``hook`` is called, in order
#: (``after_hand_on`` only when the commit loop holds the host's turn, ``engine.host_turn``).
#: A hook that raises (or ends the process) there models a writer stopped at that point.
STEPS = ("after_write_temp", "after_put_entry", "after_copy", "after_hand_on", "after_complete",
         "repair_after_copy", "repair_after_complete")


class DynamoDBLogStore(EntryClaimer):
    """Commits through a DynamoDB table shared with Spark's S3DynamoDBLogStore and delta-rs.

    ``hook(step, version)`` is called at each name in ``STEPS``; tests use it to stop a writer
    between two steps.  ``client`` replaces the shared DynamoDB client of ``config``.
    """

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, str] | None = None, *,
             hook: FaultHook | None = None, clock: Clock = SYSTEM_CLOCK,
             random: RandomSource = DEFAULT_RANDOM) -> DynamoDBLogStore:
        """The log store of an S3 table URI, whatever ``AWS_S3_LOCKING_PROVIDER`` says."""

        store = open_store(uri, storage_options)
        config = getattr(store, "config", None)
        if not isinstance(config, AwsConfig):
            config = resolve_aws_config(storage_options)
        return cls(store, config, hook=hook, clock=clock, random=random)

    def __repr__(self) -> str:
        return f"DynamoDBLogStore({self.table_path!r}, table={self.table_name!r})"

    def describe(self) -> Iterator[tuple[str, str]]:
        yield from super().describe()
        yield "dynamodb table", self.table_name
        yield "dynamodb endpoint", self.endpoint
        yield "tablePath", self.table_path

    def read_commit(self, version: int) -> bytes:
        """N.json; if absent but claimed by an incomplete entry, repaired first."""
        target = commit_path(version)
        try:
            data = self.store.get(target)
        except ObjectNotFoundError:
            pass
        else:
            self._k.note_read(version)
            return data
        entry = self._get_entry(version)
        if entry is None:
            raise ObjectNotFoundError("get", f"{self.table_uri}/{target}", "no such object")
        if not entry.complete:
            return self._repair(entry)
        try:
            # Completed between our GET and GetItem by a repairer that had just copied it.
            return self.store.get(target)
        except ObjectNotFoundError:
            raise CorruptLogError(
                f"table {self.table_uri}: DynamoDB table {self.table_name} has a complete entry "
                f"for version {version} but {LOG_DIR}/{commit_name(version)} does not exist") from None

    def look_for_commit(self, version: int) -> bytes:
        """N.json only: an entry whose writer is between its claim and its copy is left to
        it (``LogStore.look_for_commit``), so a look costs one GET and no ``GetItem``."""
        data = self.store.get(commit_path(version))
        self._k.note_read(version)
        return data

    def list_log(self, from_version: int = 0) -> list[LogFile]:
        """Repair the latest entry (as Spark's ``listFrom`` does), then list.

        Commits listed without any entry under this log store's spelling: the entries may
        be under another (``follow_fleet``), whose latest is then repaired and the log listed
        again.  A table with no commits yet costs no look."""
        since = self._now()
        latest, _ = self._refresh()
        files = super().list_log(from_version)
        if latest is None and any(f.kind == "commit" for f in files) and self.follow_fleet():
            latest, _ = self._refresh()
            files = super().list_log(from_version)
        commits = [f.version for f in files if f.kind == "commit"]
        if not files and from_version <= 0:
            self._k.note_latest(-1, since)  # no version exists yet: version 0 needs no HEAD
        if commits:
            newest = max(commits)
            self._k.note_latest(newest, since)
            if latest is not None and latest == newest:
                self._k.note_good(newest)
        return files

    def latest_version_hint(self) -> int | None:
        return self._refresh()[0]

    def read_commits_after(self, version: int) -> list[tuple[int, bytes]]:
        """One consistent Query finds the latest version; then one GET per newer commit."""
        since = self._now()
        latest, repaired = self._refresh(catching_up=True)
        if latest is None:
            # No trustworthy entry (none yet, or expired): the listing says what exists.
            listed = [f.version for f in super().list_log(version + 1) if f.kind == "commit"]
            out = self.read_range(version + 1, max(listed)) if listed else []
            self._k.note_latest(out[-1][0] if out else version, since)
            return out
        if latest <= version:
            return []
        if repaired is not None:
            out = self.read_range(version + 1, latest - 1) + [repaired]
        else:
            out = self.read_range(version + 1, latest)
            self._k.note_good(latest)
        return out

    def read_after_loss(self, version: int) -> list[tuple[int, bytes]]:
        """Version ``version`` by the entry our failed claim returned, without the Query that
        finds the latest entry: the next claim finds any newer one.

        The entry is usually incomplete (its writer had claimed the version a moment before
        us), so it is read again while N.json is read: complete by then, the next claim's
        step 1 has nothing left to ensure.  Otherwise step 1 completes it, repairing it if its
        writer died.  With N.json absent the writer is between its claim and its copy: the
        content is read from the temp file the entry names, which is left to that writer, as
        ``_refresh`` does when catching up.  Without a usable entry (an emulator that does not
        return it, or one TTL may soon remove), the ordinary catch-up reads.
        """
        with self._lock:
            found = self._taken.pop(version, None)
        if found is None or (found[0].complete and not self._trusted(found[0])):
            return self.read_commits_after(version - 1)
        entry, since = found
        again = None if entry.complete else background.submit(
            lambda: self._get_entry(version))
        try:
            data: bytes | None = self.store.get(commit_path(version))
        except ObjectNotFoundError:
            data = None
        current = entry if again is None else again.result()
        if current is None:
            return self.read_commits_after(version - 1)  # removed meanwhile (repair, TTL)
        if data is None:
            data = None if current.complete else self._read_temp(current)
            if data is None:  # copied or moved meanwhile
                return self.read_commits_after(version - 1)
        elif current.complete:
            self._k.note_good(version)
        self._k.note_latest(version, since if not entry.complete else self._within_margin(since))
        return [(version, data)]
