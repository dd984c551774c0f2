"""The fleet key: the ``tablePath`` that makes writers exclude each other, and the signs that
another mechanism writes the table.

Writers whose ``tablePath`` differ do not exclude each other: Spark writes ``s3a://bkt/t``,
deltalake the URI it was given.  A log store joins the spelling in use on first use
(``join_fleet``), and refuses to commit when that is ambiguous or when recent commits have no
entry (their writers use another mechanism).  A table created through this protocol records
its DynamoDB table and ``tablePath`` (``TABLE_NAME_KEY``, ``TABLE_PATH_KEY``); the marker
``DYNAMODB_MARKER`` shows writers on S3 conditional writes that the table is coordinated
through DynamoDB.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import quote

from deltacommit.errors import CoordinationMismatchError, ObjectNotFoundError, StorageError
from deltacommit.io.aws.options import DYNAMO_TABLE_PATH_SCHEME as DYNAMO_TABLE_PATH_SCHEME_OPTION
from deltacommit.io.logstore.base import COORDINATION_KEY, DYNAMODB_MARKER
from deltacommit.io.logstore.s3_dynamodb.client import EntryClient
from deltacommit.io.logstore.s3_dynamodb.entry import ATTR_TABLE_PATH
from deltacommit.io.storage.base import ObjectMeta
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path

__all__ = ["TABLE_NAME_KEY", "TABLE_PATH_KEY", "FleetMember", "table_path_spellings"]

log = logging.getLogger(__name__)

#: Configuration keys a table created through this log store records, beside
#: ``deltacommit.coordination = dynamodb``: a writer whose DynamoDB table or ``tablePath``
#: differs would not be excluded by this one, so it refuses to commit.
TABLE_NAME_KEY = f"{COORDINATION_KEY}.dynamodbTable"
TABLE_PATH_KEY = f"{COORDINATION_KEY}.tablePath"


#: How long a reader's look under every spelling (``follow_fleet``) stands for the look the
#: first claim makes (``join_fleet``): the listing before a write and its claim, not a read
#: and a write an hour apart.
LOOK_KEPT_S = 1.0

#: The marker's lines naming the DynamoDB table and the tablePath its writer used.
_MARKER_TABLE = "dynamodbTable"
_MARKER_PATH = "tablePath"

_MARKER_TEXT = (b"This table is committed to through Spark's S3DynamoDBLogStore protocol; writers "
               b"using S3 conditional writes do not exclude its writers.\n")


#: What the Rust ``url`` crate leaves as it is in a URL's path: printable ASCII outside its
#: path percent-encode set (a ``%`` given stays as given).
_URL_PATH_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"#<>?`{}')


def table_path_spellings(table_path: str) -> list[str]:
    """Every ``tablePath`` a Spark, Hadoop or delta-rs writer may use for this location:
    the ``s3``, ``s3a`` and ``s3n`` schemes, and with a trailing slash for a bucket root;
    for a path with spaces or non-ASCII characters, also percent-encoded as delta-rs keys it
    (the URL it parsed: ``s3://bkt/caf%C3%A9``, while its objects are at ``café/``, as ours
    and Spark's are)."""
    scheme, sep, rest = table_path.partition("://")
    if not sep or scheme.lower() not in ("s3", "s3a", "s3n"):
        return [table_path]
    rest = rest.rstrip("/")
    bucket_root = "/" not in rest
    forms = list(dict.fromkeys((rest, quote(rest, safe=_URL_PATH_SAFE))))
    out = []
    for s in ("s3", "s3a", "s3n"):
        for form in forms:
            out.append(f"{s}://{form}")
            if bucket_root:
                out.append(f"{s}://{form}/")
    if table_path in out:
        out.remove(table_path)
    return [table_path, *out]


class FleetMember(EntryClient):
    """The ``tablePath`` this log store shares with the table's other writers, and the refusal
    of writers that share none (another mechanism, another DynamoDB table or spelling)."""

    def coordination_config(self, recorded: Mapping[str, str | None] | None = None
                            ) -> dict[str, str]:
        self.join_fleet(check_mechanism=False)
        if recorded:
            self.follow_recorded(recorded)
        return {COORDINATION_KEY: self.mechanism, TABLE_NAME_KEY: self.table_name,
                TABLE_PATH_KEY: self.table_path}

    def follow_recorded(self, recorded: Mapping[str, str | None]) -> None:
        """Use the ``tablePath`` the table records where no spelling has entries to join.

        Entries expire a day after their commit, so after a quiet day a writer configured
        with the URI's own spelling (``uri``, the default) finds none, and would key its
        entries apart from the fleet's and be refused by the table's record; the record names
        the fleet's spelling.  Followed only when it spells this location in this DynamoDB
        table and the scheme is not pinned (a pin is compared, and refused, as configured).
        """
        if not self._k.fleet_keys:
            self._take_spelling(recorded.get(TABLE_PATH_KEY), recorded.get(TABLE_NAME_KEY),
                                "the table records")

    def _take_spelling(self, path: str | None, table_name: str | None, named_by: str) -> None:
        """Key this log store's entries by ``path``, the tablePath that ``named_by`` names
        for DynamoDB table ``table_name``, where it spells this location, in this DynamoDB
        table, and the scheme is not pinned; else keep the one in use."""
        if (not path or path == self.table_path or table_name != self.table_name
                or self.config.dynamo_table_path_scheme != "uri"
                or path not in table_path_spellings(self.table_path)):
            return
        log.info("table %s: using the tablePath %s %s (configured %s)",
                 self.table_uri, path, named_by, self.table_path)
        self.table_path = path
        self._k.joined_path = path

    def _mark_fleet(self) -> None:
        """Write ``DYNAMODB_MARKER``, once per log store (before its first temp file)."""
        if not self._k.marked:
            # Temp files are deleted once their commit is in place, so they no longer show a
            # writer on S3 conditional writes that this table is coordinated through DynamoDB;
            # this marker does (``logstore.fleet_sign.dynamodb_fleet_sign``), once per log store.
            # It also names the tablePath this writer keys its entries by, for a writer that
            # finds no entry to join once they have expired (``_follow_marker``).
            self.store.put(DYNAMODB_MARKER, _MARKER_TEXT + (
                f"{_MARKER_TABLE} {self.table_name}\n{_MARKER_PATH} {self.table_path}\n"
            ).encode())
            self._k.marked = True

    def _follow_marker(self) -> None:
        """Use the ``tablePath`` ``DYNAMODB_MARKER`` names where no spelling has entries.

        Entries expire a day after their commit.  After a quiet day a writer configured with
        the URI's own spelling (the default) finds none to join; keying its entries by
        ``s3://`` while Spark's writers key theirs ``s3a://``, the two would not exclude each
        other, and Spark's copy (a check, then a plain PUT) can replace a commit this writer
        has made.  The marker names the spelling deltacommit's writers last keyed entries by
        in this DynamoDB table; followed where it spells this location and the scheme is not
        pinned.  One GET, only when no spelling has entries.
        """
        if self.config.dynamo_table_path_scheme != "uri":
            return
        try:
            text = self.store.get(DYNAMODB_MARKER).decode("utf-8", "replace")
        except StorageError:
            return  # no marker (no deltacommit writer yet), or unreadable: as configured
        fields = dict(line.split(" ", 1) for line in text.splitlines()
                      if line.startswith((f"{_MARKER_TABLE} ", f"{_MARKER_PATH} ")))
        self._take_spelling(fields.get(_MARKER_PATH), fields.get(_MARKER_TABLE),
                            "its writers last used")

    def fleet_keys(self) -> dict[str, int]:
        """Every spelling of this table's location that has entries, with its newest version
        (one consistent Query of one item per spelling)."""
        found: dict[str, int] = {}
        for spelling in table_path_spellings(self.table_path):
            response = self._call("Query", KeyConditionExpression="#p = :p",
                                  ExpressionAttributeNames={"#p": ATTR_TABLE_PATH},
                                  ExpressionAttributeValues={":p": {"S": spelling}},
                                  ConsistentRead=True, ScanIndexForward=False, Limit=1)
            items = response.get("Items", [])
            if items:
                version = self._parse(items[0]).version
                if self._another_locations(spelling, version):
                    continue
                found[spelling] = version
        return found

    def _another_locations(self, spelling: str, version: int) -> bool:
        """Whether the entries under ``spelling``, newest ``version``, are the table's at the
        location ``spelling`` names read as it is written, not this one's.

        A percent-encoded spelling is delta-rs's key for this location (``s3://bkt/a%20b``
        for the objects at ``a b/``), and also deltacommit's and Spark's for the objects at
        ``a%20b/``.  Where that other location's log holds the newest entry's commit (or the
        one before it, the newest being in flight) and this one holds none or another one there,
        the entries are that table's: joining them would claim its versions, and a repair
        would complete or drop its entries.  Two GETs, only for an encoded spelling that has
        entries; where the other location cannot be read, the entries count as before."""
        theirs = spelling.partition("://")[2].strip("/")
        if theirs == self.store.uri.partition("://")[2].strip("/"):
            return False
        from deltacommit.io.storage.s3 import S3Store
        from deltacommit.io.storage.s3_location import parse_s3_uri

        try:
            scheme, bucket, _ = parse_s3_uri(self.store.uri)
            _, other_bucket, prefix = parse_s3_uri(spelling)
        except StorageError:
            return False
        if other_bucket != bucket or not prefix:
            return False
        other = S3Store(bucket, prefix, config=self.config, scheme=scheme)
        for v in (version, version - 1) if version > 0 else (version,):
            try:
                held = other.get(commit_path(v))
            except StorageError:
                continue
            try:
                mine = self.store.get(commit_path(v))
            except ObjectNotFoundError:
                mine = None
            except StorageError:
                return False
            if mine == held:
                return False
            log.info("table %s: the entries under tablePath %s are the table's at %s (its log "
                     "holds version %d, this one does not); not joined", self.table_uri, spelling,
                     other.uri, v)
            return True
        return False

    def join_fleet(self, *, check_mechanism: bool = True) -> None:
        """Use the ``tablePath`` the table's other writers use; refuse when that is ambiguous.

        Writers whose ``tablePath`` differ do not exclude each other: Spark writes
        ``s3a://bkt/t`` (``s3a://bkt/`` for a bucket-root table), deltalake the URI it was
        given.  On first use this log store looks under every spelling and joins the one in
        use.  Refused: entries under more than one spelling (the fleet is already split), an
        explicitly configured spelling other than the one in use, and a log with recent
        commits but no entry under any spelling (its writers use another mechanism).
        """
        if self._k.fleet_keys is not None:
            if check_mechanism and not self._k.fleet_keys and not self._k.mechanism_checked:
                self._check_no_other_mechanism(self._pin_hint())
                self._k.mechanism_checked = True
            return
        with self._k.lock:
            looked, self._k.looked = self._k.looked, None
        if looked is not None and 0 <= self._clock.monotonic() - looked[1] <= LOOK_KEPT_S:
            found = looked[0]
        else:
            found = self.fleet_keys()
        pin = self._pin_hint()
        if len(found) > 1:
            keys = ", ".join(f"{k} (newest version {v})" for k, v in sorted(found.items()))
            raise CoordinationMismatchError(
                f"table {self.table_uri}: DynamoDB table {self.table_name} has entries under "
                f"several tablePath spellings: {keys}. Writers using different spellings do not "
                f"exclude each other, so nothing is committed; {pin}")
        if found:
            (key, _), = found.items()
            if key != self.table_path:
                if self.config.dynamo_table_path_scheme != "uri":
                    raise CoordinationMismatchError(
                        f"table {self.table_uri}: the fleet's entries use tablePath {key!r} but "
                        f"this writer is configured for {self.table_path!r}; they would not "
                        f"exclude each other. {pin}")
                log.info("table %s: joining the tablePath %s its other writers use (configured "
                         "%s)", self.table_uri, key, self.table_path)
                self.table_path = key
                self._k.joined_path = key
        else:
            self._follow_marker()
            if check_mechanism:
                self._check_no_other_mechanism(pin)
                self._k.mechanism_checked = True
        self._k.fleet_keys = found

    def follow_fleet(self) -> bool:
        """For a reader finding commits but no entry under its own spelling: join the one
        spelling that has entries, once per process and table; whether it joined.

        A Spark writer that stopped after its entry has made its commit, and readers repair
        it (Spark's ``listFrom``); a reader given ``s3://`` while Spark keys ``s3a://`` would
        otherwise show the table without it until the next write.  Never refuses: where
        writers would (a split fleet, a pin against the fleet's spelling), the reader reads
        as configured, and the writers' refusals say why.
        """
        with self._lock:
            if self._k.fleet_keys is not None or self._k.fleet_looked:
                return False
            self._k.fleet_looked = True
        at = self._clock.monotonic()
        found = self.fleet_keys()
        if len(found) != 1 or self.config.dynamo_table_path_scheme != "uri":
            with self._k.lock:
                self._k.looked = (found, at)
            return False
        (key, _), = found.items()
        self._k.fleet_keys = found
        if key == self.table_path:
            return False  # its own entries (expired ones, say): nothing else to read
        log.info("table %s: reading the entries under the tablePath %s its writers use "
                 "(configured %s)", self.table_uri, key, self.table_path)
        self.table_path = key
        self._k.joined_path = key
        return True

    def _pin_hint(self) -> str:
        return (f"pin one with the {DYNAMO_TABLE_PATH_SCHEME_OPTION} option (s3a, s3 or uri) on "
                "every writer, or move the table to one mechanism with `deltacommit coordination "
                "set`")

    def _check_no_other_mechanism(self, pin: str) -> None:
        """A log with a commit younger than the entries' TTL but no entry under any spelling
        is written by writers not on this protocol (S3 conditional put does not exclude it)."""
        newest = None
        for f in super().list_log(self._listing_start()):
            if f.kind == "commit" and (newest is None or f.version > newest.version):
                newest = f
        if newest is None or newest.last_modified_ms is None:
            return
        age_s = self._clock.time() - newest.last_modified_ms / 1000
        if age_s < self.ttl_seconds / 2 and not self._switched_here(newest.version):
            raise CoordinationMismatchError(
                f"table {self.table_uri}: version {newest.version} was committed {age_s:.0f} s ago "
                f"but DynamoDB table {self.table_name} has no entry for this table under any "
                f"tablePath spelling ({', '.join(table_path_spellings(self.table_path))}): its "
                "writers use another DynamoDB table (check DELTA_DYNAMO_TABLE_NAME, and the "
                f"region and endpoint: this writer's is {self.endpoint}) or another "
                "commit mechanism (S3 conditional writes?), neither of which excludes this "
                f"writer. Nothing was committed; {pin}. {self._restore_hint()}")

    def _check_explained(self, version: int, meta: ObjectMeta) -> None:
        """Refuse when ``version``'s commit file has no entry of this protocol but is younger
        than half the entries' TTL: no TTL can have removed its entry, so another mechanism
        (S3 conditional writes, another DynamoDB table or ``tablePath``) wrote it, and that
        mechanism does not exclude this one."""
        age_s = self._clock.time() - meta.last_modified_ms / 1000
        if age_s >= self.ttl_seconds / 2 or self._switched_here(version):
            return
        raise CoordinationMismatchError(
            f"table {self.table_uri}: {LOG_DIR}/{commit_name(version)} was written {age_s:.0f} s "
            f"ago but DynamoDB table {self.table_name} has no entry for it under tablePath "
            f"{self.table_path}: another mechanism is writing this table (S3 conditional "
            "writes, another DynamoDB table or tablePath), and it does not exclude this writer. "
            "This commit was not made; move every writer to one mechanism (`deltacommit "
            f"coordination set`) or pin the tablePath with {DYNAMO_TABLE_PATH_SCHEME_OPTION}. "
            + self._restore_hint())

    def _restore_hint(self) -> str:
        return (f"If every writer does commit through DynamoDB table {self.table_name} at "
                f"{self.endpoint} (that same table, not one of that name elsewhere) and its "
                "entries were lost (the DynamoDB table re-created or emptied, items deleted by "
                "hand), restore the newest one with `deltacommit dynamodb repair "
                f"{self.table_uri} --restore-entry`")

    def _switched_here(self, version: int) -> bool:
        """Whether ``version`` is the metaData commit that moved the table to this protocol
        (``deltacommit coordination set --to dynamodb``): the commits before it were made
        through the old mechanism, which its writers no longer use once they honour the pin."""
        try:
            data = self.store.get(commit_path(version))
        except ObjectNotFoundError:
            return False
        for line in data.splitlines():
            try:
                action = loads(line)
            except ValueError:
                continue
            meta = action.get("metaData") if isinstance(action, dict) else None
            if isinstance(meta, dict):
                conf = meta.get("configuration") or {}
                return bool(conf.get(COORDINATION_KEY) == self.mechanism
                            and conf.get(TABLE_NAME_KEY) == self.table_name)
        return False

    def _listing_start(self) -> int:
        try:
            hint = loads(self.store.get(f"{LOG_DIR}/_last_checkpoint"))
            return max(0, int(hint.get("version", 0)))
        except (ObjectNotFoundError, ValueError, TypeError, AttributeError):
            return 0
