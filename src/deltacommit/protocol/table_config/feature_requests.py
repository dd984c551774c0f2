"""Table properties that ask for table features, and the protocol that grants them.  Pure.

Delta turns a feature on in two ways: a property that enables it (``delta.enableRowTracking``)
adds the features it needs to the protocol, and ``delta.feature.<name>=supported`` asks for
the feature by name.  The latter is a request, applied to the protocol and never stored in
the configuration, as Spark does; so are ``delta.minReaderVersion`` and
``delta.minWriterVersion``.

One table (``PROPERTY_FEATURES``) says which property asks for which features, and one table
(``FEATURES``) what each feature needs of the protocol.  A new table (``DeltaTable.create``)
and a property change (``DeltaTable.set_properties``) read both, so a property grants the same
features whichever way it is set: a table whose property says "deletion vectors" while its
protocol lacks the feature is refused by every writer that checks the protocol (Spark, ours).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.actions import Protocol
from deltacommit.protocol.table_config import properties as p
from deltacommit.protocol.table_config.properties import FEATURE_PREFIX

#: The protocol of a table that asks for nothing: writer 2 (appendOnly, invariants), as
#: Spark creates it.
DEFAULT_PROTOCOL = (1, 2)
MIN_READER_KEY = p.MIN_READER_VERSION
MIN_WRITER_KEY = p.MIN_WRITER_VERSION


@dataclass(frozen=True, slots=True)
class Feature:
    """What a table feature needs of the protocol."""

    #: Whether readers must know it too (a reader-writer feature, listed in both lists).
    reader: bool
    #: The legacy (reader, writer) versions that support it without table features, or None
    #: for a feature only a table-features protocol (writer 7) can name.
    legacy: tuple[int, int] | None
    #: Features it cannot be supported without.
    requires: tuple[str, ...] = ()


#: Every feature deltacommit can turn on, in the order it lists them in a new protocol.
FEATURES: dict[str, Feature] = {
    "timestampNtz": Feature(reader=True, legacy=None),
    "domainMetadata": Feature(reader=False, legacy=None),
    "inCommitTimestamp": Feature(reader=False, legacy=None),
    "rowTracking": Feature(reader=False, legacy=None, requires=("domainMetadata",)),
    "deletionVectors": Feature(reader=True, legacy=None),
    "appendOnly": Feature(reader=False, legacy=(1, 2)),
    "invariants": Feature(reader=False, legacy=(1, 2)),
    "checkConstraints": Feature(reader=False, legacy=(1, 3)),
    "changeDataFeed": Feature(reader=False, legacy=(1, 4)),
    "generatedColumns": Feature(reader=False, legacy=(1, 4)),
    "identityColumns": Feature(reader=False, legacy=(1, 6)),
    "v2Checkpoint": Feature(reader=True, legacy=None),
    "columnMapping": Feature(reader=True, legacy=(2, 5)),
    "vacuumProtocolCheck": Feature(reader=True, legacy=None),
    "typeWidening": Feature(reader=True, legacy=None),
}

#: Features a ``delta.feature.<name>`` request may turn on: those whose rules this library
#: follows whenever the protocol names them, whatever the table's properties.
REQUESTABLE = tuple(FEATURES)


@dataclass(frozen=True, slots=True)
class PropertyFeatures:
    """A property (or, ending in ``.``, every property under a prefix) that asks for features
    when it holds one of ``values`` (any non-empty value if None), compared without case."""

    key: str
    values: tuple[str, ...] | None
    features: tuple[str, ...]

    def asks(self, config: Mapping[str, str | None]) -> bool:
        for key, value in config.items():
            if not (key.lower().startswith(self.key.lower()) if self.key.endswith(".")
                    else key == self.key):
                continue
            v = (value or "").strip().lower()
            if v and (self.values is None or v in self.values):
                return True
        return False


#: Which property asks for which features (Spark's rules, PROTOCOL.md's "Table Features").
PROPERTY_FEATURES = (
    PropertyFeatures(p.ENABLE_DELETION_VECTORS, ("true",), ("deletionVectors",)),
    PropertyFeatures(p.ENABLE_ROW_TRACKING, ("true",), ("domainMetadata", "rowTracking")),
    PropertyFeatures(p.ENABLE_CHANGE_DATA_FEED, ("true",), ("changeDataFeed",)),
    PropertyFeatures(p.ENABLE_IN_COMMIT_TIMESTAMPS, ("true",), ("inCommitTimestamp",)),
    PropertyFeatures(p.COLUMN_MAPPING_MODE, ("name", "id"), ("columnMapping",)),
    PropertyFeatures(p.APPEND_ONLY, ("true",), ("appendOnly",)),
    PropertyFeatures(p.CONSTRAINT_PREFIX, None, ("checkConstraints",)),
    PropertyFeatures(p.CHECKPOINT_POLICY, ("v2",), ("v2Checkpoint",)),
    PropertyFeatures(p.ENABLE_TYPE_WIDENING, ("true",), ("typeWidening",)),
)


def _ordered(features: Iterable[str]) -> list[str]:
    """``features`` with what each requires, once each, in ``FEATURES`` order."""
    wanted = set(features)
    for name in list(wanted):
        wanted.update(FEATURES[name].requires if name in FEATURES else ())
    known = [f for f in FEATURES if f in wanted]
    return known + sorted(wanted - set(known))


def requested_features(config: Mapping[str, str | None]) -> list[str]:
    """The features ``config`` asks for, by property or by ``delta.feature.<name>`` request
    (with what they require), in ``FEATURES`` order."""
    wanted = {f for p in PROPERTY_FEATURES if p.asks(config) for f in p.features}
    wanted.update(k[len(FEATURE_PREFIX):] for k in config if k.startswith(FEATURE_PREFIX))
    return _ordered(wanted)


def take_feature_requests(config: dict[str, str | None], table: str) -> None:
    """Remove the ``delta.feature.*`` requests from ``config``, refusing any that deltacommit
    cannot grant."""
    for key in [k for k in config if k.startswith(FEATURE_PREFIX)]:
        name, value = key[len(FEATURE_PREFIX):], (config[key] or "").strip().lower()
        if name not in REQUESTABLE or value not in ("supported", "enabled"):
            raise InvalidArgumentError(
                f"table {table}: {key}={config[key]!r} is not supported; deltacommit turns on "
                f"{[FEATURE_PREFIX + f for f in REQUESTABLE]} with the value 'supported'")
        del config[key]


def supported_features(protocol: Protocol) -> frozenset[str]:
    """Features a protocol supports, implicitly (legacy versions) or by name (table features)."""
    return frozenset(_reader_features(protocol)) | frozenset(_writer_features(protocol))


def _reader_features(protocol: Protocol) -> list[str]:
    """The reader features ``protocol`` supports, by name or by its legacy reader version."""
    r = protocol.min_reader_version
    if r >= 3:
        return list(protocol.reader_features or [])
    return [f for f, spec in FEATURES.items()
            if spec.reader and spec.legacy is not None and r >= spec.legacy[0]]


def _writer_features(protocol: Protocol) -> list[str]:
    """The writer features ``protocol`` supports, by name or by its legacy writer version."""
    w = protocol.min_writer_version
    if w >= 7:
        return list(protocol.writer_features or [])
    return [f for f, spec in FEATURES.items()
            if spec.legacy is not None and w >= spec.legacy[1]]


def with_features(protocol: Protocol, features: Iterable[str], reader_version: int = 0,
                  writer_version: int = 0) -> Protocol:
    """``protocol`` supporting ``features`` too (with what they require) and at least the
    versions asked for, or ``protocol`` itself if it already does.

    A legacy protocol stays legacy while every feature has a legacy version (change data feed
    on writer 2 gives writer 4, as Spark does); otherwise it becomes a table-features
    protocol that lists by name every feature its legacy versions gave implicitly, so none is
    lost.  A reader feature raises the reader version to 3, where readers check the list.
    """
    have = supported_features(protocol)
    missing = [f for f in _ordered(features) if f not in have]
    r, w = protocol.min_reader_version, protocol.min_writer_version
    legacy = [FEATURES[f].legacy if f in FEATURES else None for f in missing]
    if w < 7 and writer_version < 7 and reader_version < 3 and all(
            v is not None for v in legacy):
        versions = [v for v in legacy if v is not None]
        new_r = max([r, reader_version, *(v[0] for v in versions)])
        new_w = max([w, writer_version, *(v[1] for v in versions)])
        if (new_r, new_w) == (r, w):
            return protocol
        return Protocol(new_r, new_w, None, None, dict(protocol.extra))
    if not missing and (r >= 3 or reader_version < 3) and w >= 7:
        return protocol
    writers = _writer_features(protocol)
    writers += [f for f in missing if f not in writers]
    new_readers = [f for f in missing if f in FEATURES and FEATURES[f].reader]
    if r >= 3 or reader_version >= 3 or new_readers:
        readers = _reader_features(protocol)
        readers += [f for f in new_readers if f not in readers]
        # A reader feature is a writer feature too.
        writers += [f for f in readers if f not in writers]
        return Protocol(3, 7, readers, writers, dict(protocol.extra))
    return Protocol(r, 7, None, writers, dict(protocol.extra))


#: The protocol versions deltacommit writes when asked for one by property: reader 2 and
#: writer 5 mean column mapping, which ``delta.columnMapping.mode`` asks for instead.
READER_VERSIONS = (1, 3)
WRITER_VERSIONS = (1, 2, 3, 4, 6, 7)


def take_version_requests(config: dict[str, str | None], table: str) -> tuple[int, int]:
    """Remove ``delta.minReaderVersion``/``delta.minWriterVersion`` from ``config`` (Delta
    applies them to the protocol and does not store them) and return them (0 if absent); a
    version whose features deltacommit cannot honour is refused, never ignored."""

    def version(key: str, allowed: tuple[int, ...]) -> int:
        value = config.pop(key, None)
        if value is None:
            return 0
        if not (value.isascii() and value.isdigit()):  # '²' is a digit int() refuses
            raise InvalidArgumentError(f"table {table}: {key} must be a protocol version number, "
                                       f"got {value!r}")
        v = int(value)
        if v not in allowed:
            raise InvalidArgumentError(
                f"table {table}: {key}={v} asks for a protocol deltacommit cannot write (it "
                f"writes {key.split('.')[-1]} in {list(allowed)}); reader version 2 and "
                "writer version 5 need column mapping")
        return v

    return version(MIN_READER_KEY, READER_VERSIONS), version(MIN_WRITER_KEY, WRITER_VERSIONS)


def initial_protocol(features: Iterable[str], reader_version: int, writer_version: int
                     ) -> Protocol:
    """The lowest protocol of a new table that supports ``features`` (those its properties
    ask for, and those its schema needs) at the versions asked for: legacy versions while
    they suffice (the oldest readers and writers can then use the table), table features
    listing exactly ``features`` otherwise."""
    needed = _ordered(features)
    if reader_version < 3 and writer_version < 7 and all(
            f in FEATURES and FEATURES[f].legacy is not None for f in needed):
        return with_features(Protocol(*DEFAULT_PROTOCOL), needed, reader_version,
                             writer_version)
    return with_features(Protocol(1, 7, None, []), needed, reader_version, 7)
