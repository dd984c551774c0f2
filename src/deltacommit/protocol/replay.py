"""Log replay: folding commits into the state of a table at one version.  Pure: no I/O.

Reconciliation follows PROTOCOL.md: the newest protocol and metaData win, the newest ``txn`` per
application id wins, and a file (keyed by its decoded path and deletion-vector id) is live if its
newest action is an ``add``.  Removes are kept as tombstones so that checkpoints can carry them
and vacuum can respect their retention.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.actions import (
    Action,
    Add,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
    UnknownAction,
)
from deltacommit.protocol.files.lazy_files import discard
from deltacommit.protocol.log.paths import file_key

__all__ = ["TableState", "check_protocol_shape", "file_key", "replay"]


def check_protocol_shape(p: Protocol, source: str) -> None:
    """CorruptLogError for a protocol action no reader can interpret (PROTOCOL.md "Table
    Features"): reader version 3 lists its reader features, writer version 7 its writer
    features, and a reader-features protocol needs writer version 7."""
    if p.min_reader_version < 1 or p.min_writer_version < 1:
        raise CorruptLogError(f"{source}: protocol versions must be at least 1, got reader "
                              f"{p.min_reader_version} / writer {p.min_writer_version}")
    if p.min_reader_version > 3:
        return  # a future protocol: refused as unsupported where the snapshot is checked
    if p.min_reader_version == 3 and p.reader_features is None:
        raise CorruptLogError(f"{source}: protocol has minReaderVersion {p.min_reader_version} "
                              "but no readerFeatures list")
    if p.min_writer_version == 7 and p.writer_features is None:
        raise CorruptLogError(f"{source}: protocol has minWriterVersion {p.min_writer_version} "
                              "but no writerFeatures list")
    if p.min_reader_version == 3 and p.min_writer_version < 7:
        raise CorruptLogError(f"{source}: protocol has minReaderVersion {p.min_reader_version} "
                              f"(table features) but minWriterVersion {p.min_writer_version}; "
                              "table features need writer version 7")


@dataclass(slots=True)
class TableState:
    """What a snapshot knows after replaying versions ``0..version``."""

    version: int = -1
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    files: dict[str, Add] = field(default_factory=dict)
    tombstones: dict[str, Remove] = field(default_factory=dict)
    app_txns: dict[str, Txn] = field(default_factory=dict)
    domains: dict[str, dict[str, object]] = field(default_factory=dict)
    #: ``inCommitTimestamp`` of the commit at ``version``, if replay read that commit and it
    #: has one (a state loaded from a checkpoint alone does not know it).
    in_commit_timestamp: int | None = None

    def copy(self) -> TableState:
        """An independent state; file maps still backed by checkpoint rows stay unread.

        ``copy()`` of a ``files.lazy_files.LazyActionMap`` shares its checkpoint rows and copies
        only the overlay, so copying a state costs the changes since its checkpoint.
        """
        return TableState(
            version=self.version,
            protocol=self.protocol,
            metadata=self.metadata,
            files=self.files.copy(),
            tombstones=self.tombstones.copy(),
            app_txns=dict(self.app_txns),
            domains=dict(self.domains),
            in_commit_timestamp=self.in_commit_timestamp,
        )

    def apply(self, version: int, actions: Iterable[Action], source: str = "") -> None:
        """Fold one commit into the state, in place.

        ``version`` must follow the current one; a gap means the log is missing a commit and
        the result would silently lack its changes.
        """
        if self.version >= 0 and version != self.version + 1:
            raise CorruptLogError(
                f"{source or 'log'}: version {version} does not follow version {self.version}")
        files = self.files
        tombstones = self.tombstones
        seen_protocol = seen_metadata = False
        ict: int | None = None
        for a in actions:
            if isinstance(a, Add):
                k = file_key(a.path, a.deletion_vector)
                files[k] = a
                discard(tombstones, k)
            elif isinstance(a, Remove):
                k = file_key(a.path, a.deletion_vector)
                discard(files, k)
                tombstones[k] = a
            elif isinstance(a, Metadata):
                if seen_metadata:
                    raise CorruptLogError(f"{source or f'version {version}'}: two metaData "
                                          "actions in one commit; PROTOCOL.md allows at most one")
                seen_metadata = True
                self.metadata = a
            elif isinstance(a, Protocol):
                if seen_protocol:
                    raise CorruptLogError(f"{source or f'version {version}'}: two protocol "
                                          "actions in one commit; PROTOCOL.md allows at most one")
                seen_protocol = True
                check_protocol_shape(a, source or f"version {version}")
                self.protocol = a
            elif isinstance(a, Txn):
                self.app_txns[a.app_id] = a
            elif isinstance(a, CommitInfo):
                ict = a.in_commit_timestamp
            elif isinstance(a, DomainMetadata):
                # The newest action per domain wins; a tombstone deletes the domain.
                if a.removed:
                    self.domains.pop(a.domain, None)
                else:
                    self.domains[a.domain] = a.to_json()
            elif (isinstance(a, UnknownAction) and a.key == "domainMetadata"
                  and isinstance(a.value, dict)):
                domain = str(a.value.get("domain", ""))
                if a.value.get("removed"):
                    self.domains.pop(domain, None)
                else:
                    self.domains[domain] = dict(a.value)
            # Any other action type is ignored, as PROTOCOL.md asks of readers: features that
            # change what files mean are gated by the protocol, not by action names.
        self.version = version
        self.in_commit_timestamp = ict

    def validate(self, source: str) -> None:
        """A table state is usable only with both a protocol and a metadata action."""
        if self.protocol is None:
            raise CorruptLogError(f"{source}: no protocol action in versions 0..{self.version}")
        if self.metadata is None:
            raise CorruptLogError(f"{source}: no metaData action in versions 0..{self.version}")


def replay(commits: Iterable[tuple[int, Sequence[Action]]], base: TableState | None = None,
           source: Callable[[int], str] | None = None) -> TableState:
    """Apply commits (ascending versions) to a copy of ``base`` (or to an empty state).

    ``base`` itself is left as it is, so states shared by snapshots stay as they were;
    ``source`` names a version's commit file for the errors an unusable commit raises.
    """
    state = base.copy() if base is not None else TableState()
    for version, actions in commits:
        state.apply(version, actions, source(version) if source is not None else "")
    return state
