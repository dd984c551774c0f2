"""Table properties that ask for table features, and the protocol that grants them.  Pure.

Delta turns a feature on in two ways: a property that enables it (``delta.enableRowTracking``)
adds the features it needs to the protocol, and ``delta.feature.<name>=supported`` asks for
the feature by name.  The latter is a request, applied to the protocol and never stored in
the configuration, as Spark does.
"""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.errors import InvalidArgumentError
from deltacommit.log.actions import Protocol

FEATURE_PREFIX = "delta.feature."

#: Features deltacommit turns on when asked, and the properties that ask for them.
SETTABLE = ("domainMetadata", "inCommitTimestamp", "rowTracking")
_ENABLING = (("delta.enableInCommitTimestamps", ("inCommitTimestamp",)),
             ("delta.enableRowTracking", ("domainMetadata", "rowTracking")))

# Writer features a legacy protocol (before table features) has implicitly, by version.
_LEGACY_WRITER = ((2, ("appendOnly", "invariants")), (3, ("checkConstraints",)))


def requested_features(config: Mapping[str, str | None]) -> list[str]:
    """The writer features ``config`` asks for (with what they require), in protocol order."""
    wanted: set[str] = set()
    for key, names in _ENABLING:
        if (config.get(key) or "").strip().lower() == "true":
            wanted.update(names)
    wanted.update(k[len(FEATURE_PREFIX):] for k in config if k.startswith(FEATURE_PREFIX))
    if "rowTracking" in wanted:
        wanted.add("domainMetadata")
    return [f for f in SETTABLE if f in wanted]


def take_feature_requests(config: dict[str, str | None], table: str) -> None:
    """Remove the ``delta.feature.*`` requests from ``config``, refusing any that deltacommit
    cannot grant."""
    for key in [k for k in config if k.startswith(FEATURE_PREFIX)]:
        name, value = key[len(FEATURE_PREFIX):], (config[key] or "").strip().lower()
        if name not in SETTABLE or value not in ("supported", "enabled"):
            raise InvalidArgumentError(
                f"table {table}: {key}={config[key]!r} is not supported; deltacommit turns on "
                f"{[FEATURE_PREFIX + f for f in SETTABLE]} with the value 'supported'")
        del config[key]


def with_writer_features(protocol: Protocol, features: list[str]) -> Protocol:
    """``protocol`` supporting ``features`` too (writer version 7; a legacy writer version's
    implicit features listed by name), or ``protocol`` itself if it already does."""
    if protocol.min_writer_version >= 7:
        have = list(protocol.writer_features or [])
    else:
        have = [f for v, names in _LEGACY_WRITER if protocol.min_writer_version >= v
                for f in names]
    missing = [f for f in features if f not in have]
    if not missing and protocol.min_writer_version >= 7:
        return protocol
    return Protocol(protocol.min_reader_version, 7, protocol.reader_features,
                    have + missing, dict(protocol.extra))
