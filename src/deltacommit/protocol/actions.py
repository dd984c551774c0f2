"""The Delta log actions and their JSON codec.  Pure: no I/O.

Each action is a small dataclass whose fields carry the protocol's camelCase names in
snake_case.  Fields a future protocol version or another writer adds are kept in ``extra`` and
written back unchanged, and action types this module does not model survive as
``UnknownAction``: a writer that rewrites or checkpoints a log must never drop what it did not
understand.  Whether an unknown action is acceptable is the replay's decision, not the codec's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.stats.compute import stats_num_records

JsonDict: TypeAlias = dict[str, Any]


def _opt_str(d: JsonDict, key: str) -> str | None:
    v = d.get(key)
    return None if v is None else str(v)


# Numbers in actions are Spark's Long and delta-rs's i64: a value outside that range is
# unreadable for every other engine (and for our checkpoints' int64 columns).
MIN_LONG, MAX_LONG = -(2**63), 2**63 - 1


def _long(v: Any, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"field {key!r} must be a number, got {v!r}")
    try:
        n = int(v)
    except (ValueError, OverflowError):
        raise ValueError(f"field {key!r} must be an integer, got {v!r}") from None
    if not MIN_LONG <= n <= MAX_LONG:
        raise ValueError(f"field {key!r} is {n}, outside the signed 64-bit range")
    return n


def _opt_int(d: JsonDict, key: str) -> int | None:
    v = d.get(key)
    return None if v is None else _long(v, key)


def _req_long(d: JsonDict, key: str, kind: str) -> int:
    return _long(_req(d, key, kind), key)


def _req(d: JsonDict, key: str, kind: str) -> Any:
    if key not in d or d[key] is None:
        raise ValueError(f"{kind} action lacks required field {key!r}")
    return d[key]


def _str_map(v: Any, key: str) -> dict[str, str | None]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"field {key!r} must be an object, got {type(v).__name__}")
    return {str(k): (None if x is None else str(x)) for k, x in v.items()}


def _rest(d: JsonDict, known: frozenset[str]) -> JsonDict:
    return {k: v for k, v in d.items() if k not in known}


def _put(out: JsonDict, key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


@dataclass(slots=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures"})

    @classmethod
    def from_json(cls, d: JsonDict) -> Protocol:
        rf = d.get("readerFeatures")
        wf = d.get("writerFeatures")
        return cls(
            min_reader_version=_req_long(d, "minReaderVersion", "protocol"),
            min_writer_version=_req_long(d, "minWriterVersion", "protocol"),
            reader_features=None if rf is None else [str(x) for x in rf],
            writer_features=None if wf is None else [str(x) for x in wf],
            extra=_rest(d, cls._KNOWN),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        _put(out, "readerFeatures", self.reader_features)
        _put(out, "writerFeatures", self.writer_features)
        out.update(self.extra)
        return out


@dataclass(slots=True)
class Format:
    provider: str = "parquet"
    options: dict[str, str | None] = field(default_factory=dict)


@dataclass(slots=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: list[str]
    configuration: dict[str, str | None] = field(default_factory=dict)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"id", "name", "description", "format", "schemaString", "partitionColumns",
                        "createdTime", "configuration"})

    @classmethod
    def from_json(cls, d: JsonDict) -> Metadata:
        fmt = d.get("format") or {}
        if not isinstance(fmt, dict):
            raise ValueError("metaData.format must be an object")
        pcs = d.get("partitionColumns")
        if pcs is None:
            pcs = []
        if not isinstance(pcs, list):
            raise ValueError("metaData.partitionColumns must be an array")
        return cls(
            id=str(_req(d, "id", "metaData")),
            schema_string=str(_req(d, "schemaString", "metaData")),
            partition_columns=[str(c) for c in pcs],
            configuration=_str_map(d.get("configuration"), "configuration"),
            format=Format(provider=str(fmt.get("provider", "parquet")),
                          options=_str_map(fmt.get("options"), "format.options")),
            name=_opt_str(d, "name"),
            description=_opt_str(d, "description"),
            created_time=_opt_int(d, "createdTime"),
            extra=_rest(d, cls._KNOWN),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"id": self.id}
        _put(out, "name", self.name)
        _put(out, "description", self.description)
        out["format"] = {"provider": self.format.provider, "options": dict(self.format.options)}
        out["schemaString"] = self.schema_string
        out["partitionColumns"] = list(self.partition_columns)
        out["configuration"] = dict(self.configuration)
        _put(out, "createdTime", self.created_time)
        out.update(self.extra)
        return out


@dataclass(slots=True)
class Add:
    path: str
    partition_values: dict[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: JsonDict | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"path", "partitionValues", "size", "modificationTime", "dataChange", "stats",
                        "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
                        "clusteringProvider"})

    @classmethod
    def from_json(cls, d: JsonDict) -> Add:
        tags = d.get("tags")
        dv = d.get("deletionVector")
        return cls(
            path=str(_req(d, "path", "add")),
            partition_values=_str_map(d.get("partitionValues"), "partitionValues"),
            size=_req_long(d, "size", "add"),
            modification_time=_opt_int(d, "modificationTime") or 0,
            data_change=bool(d.get("dataChange", True)),
            stats=_opt_str(d, "stats"),
            tags=None if tags is None else _str_map(tags, "tags"),
            deletion_vector=dv if isinstance(dv, dict) else None,
            base_row_id=_opt_int(d, "baseRowId"),
            default_row_commit_version=_opt_int(d, "defaultRowCommitVersion"),
            clustering_provider=_opt_str(d, "clusteringProvider"),
            extra=_rest(d, cls._KNOWN),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        _put(out, "stats", self.stats)
        _put(out, "tags", self.tags)
        _put(out, "deletionVector", self.deletion_vector)
        _put(out, "baseRowId", self.base_row_id)
        _put(out, "defaultRowCommitVersion", self.default_row_commit_version)
        _put(out, "clusteringProvider", self.clustering_provider)
        out.update(self.extra)
        return out

    def num_records(self) -> int | None:
        """``numRecords`` from the statistics, if the writer recorded them."""

        return stats_num_records(self.stats, self.path)

    def to_remove(self, deletion_timestamp: int, data_change: bool = True) -> Remove:
        return Remove(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=dict(self.partition_values),
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(slots=True)
class Remove:
    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: JsonDict | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"path", "deletionTimestamp", "dataChange", "extendedFileMetadata",
                        "partitionValues", "size", "stats", "tags", "deletionVector", "baseRowId",
                        "defaultRowCommitVersion"})

    @classmethod
    def from_json(cls, d: JsonDict) -> Remove:
        pv = d.get("partitionValues")
        tags = d.get("tags")
        dv = d.get("deletionVector")
        efm = d.get("extendedFileMetadata")
        return cls(
            path=str(_req(d, "path", "remove")),
            deletion_timestamp=_opt_int(d, "deletionTimestamp"),
            data_change=bool(d.get("dataChange", True)),
            extended_file_metadata=None if efm is None else bool(efm),
            partition_values=None if pv is None else _str_map(pv, "partitionValues"),
            size=_opt_int(d, "size"),
            stats=_opt_str(d, "stats"),
            tags=None if tags is None else _str_map(tags, "tags"),
            deletion_vector=dv if isinstance(dv, dict) else None,
            base_row_id=_opt_int(d, "baseRowId"),
            default_row_commit_version=_opt_int(d, "defaultRowCommitVersion"),
            extra=_rest(d, cls._KNOWN),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"path": self.path}
        _put(out, "deletionTimestamp", self.deletion_timestamp)
        out["dataChange"] = self.data_change
        _put(out, "extendedFileMetadata", self.extended_file_metadata)
        _put(out, "partitionValues", self.partition_values)
        _put(out, "size", self.size)
        _put(out, "stats", self.stats)
        _put(out, "tags", self.tags)
        _put(out, "deletionVector", self.deletion_vector)
        _put(out, "baseRowId", self.base_row_id)
        _put(out, "defaultRowCommitVersion", self.default_row_commit_version)
        out.update(self.extra)
        return out


@dataclass(slots=True)
class AddCDCFile:
    """A change data file (PROTOCOL.md "Add CDC File"): rows a version changed, each with its
    ``_change_type``.  A version holding any ``cdc`` action is read by change-data readers
    from its cdc files alone; its adds and removes then only say which files hold the table.

    Written by row-level operations; read back as an ``UnknownAction`` (the table's state
    does not depend on them, so a malformed one written by another engine never makes a
    table unreadable)."""

    path: str
    partition_values: dict[str, str | None]
    size: int
    #: Always false: a change data file adds no row to the table.
    data_change: bool = False
    tags: dict[str, str | None] | None = None
    extra: JsonDict = field(default_factory=dict)

    def to_json(self) -> JsonDict:
        out: JsonDict = {"path": self.path, "partitionValues": dict(self.partition_values),
                         "size": self.size, "dataChange": self.data_change}
        _put(out, "tags", self.tags)
        out.update(self.extra)
        return out


@dataclass(slots=True)
class Txn:
    app_id: str
    version: int
    last_updated: int | None = None
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"appId", "version", "lastUpdated"})

    @classmethod
    def from_json(cls, d: JsonDict) -> Txn:
        return cls(
            app_id=str(_req(d, "appId", "txn")),
            version=_req_long(d, "version", "txn"),
            last_updated=_opt_int(d, "lastUpdated"),
            extra=_rest(d, cls._KNOWN),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"appId": self.app_id, "version": self.version}
        _put(out, "lastUpdated", self.last_updated)
        out.update(self.extra)
        return out


@dataclass(slots=True)
class CommitInfo:
    """Free-form provenance; kept as the JSON object it is, with typed accessors."""

    values: JsonDict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: JsonDict) -> CommitInfo:
        return cls(values=dict(d))

    def to_json(self) -> JsonDict:
        return dict(self.values)

    @property
    def operation(self) -> str | None:
        op = self.values.get("operation")
        return None if op is None else str(op)

    @property
    def timestamp(self) -> int | None:
        ts = self.values.get("timestamp")
        return int(ts) if isinstance(ts, int | float) else None

    @property
    def is_blind_append(self) -> bool | None:
        v = self.values.get("isBlindAppend")
        return v if isinstance(v, bool) else None

    @property
    def in_commit_timestamp(self) -> int | None:
        """``inCommitTimestamp`` (PROTOCOL.md "In-Commit Timestamps"), if the commit has one."""
        v = self.values.get("inCommitTimestamp")
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def read_version(self) -> int | None:
        v = self.values.get("readVersion")
        return int(v) if isinstance(v, int) else None


@dataclass(slots=True)
class DomainMetadata:
    """Configuration of one named metadata domain (PROTOCOL.md "Domain Metadata").

    ``configuration`` is the domain's own string (JSON for the ``delta.*`` domains); a
    ``removed`` action is a tombstone that still carries the configuration it deletes.
    """

    domain: str
    configuration: str
    removed: bool = False
    extra: JsonDict = field(default_factory=dict)

    _KNOWN = frozenset({"domain", "configuration", "removed"})

    @classmethod
    def from_json(cls, d: JsonDict) -> DomainMetadata:
        config = d.get("configuration")
        if config is None:
            config = ""
        elif not isinstance(config, str):
            config = json.dumps(config, separators=(",", ":"))
        removed = d.get("removed", False)
        if not isinstance(removed, bool):
            raise ValueError(f"field 'removed' must be true or false, got {removed!r}")
        return cls(domain=str(_req(d, "domain", "domainMetadata")), configuration=config,
                   removed=removed, extra=_rest(d, cls._KNOWN))

    def to_json(self) -> JsonDict:
        out: JsonDict = {"domain": self.domain, "configuration": self.configuration,
                         "removed": self.removed}
        out.update(self.extra)
        return out


@dataclass(slots=True)
class UnknownAction:
    """An action type this codec does not decode (``cdc``, future ones)."""

    key: str
    value: Any

    def to_json(self) -> Any:
        return self.value


Action: TypeAlias = (Protocol | Metadata | Add | Remove | AddCDCFile | Txn | CommitInfo
                     | DomainMetadata | UnknownAction)

_DECODERS: dict[str, Any] = {
    "protocol": Protocol.from_json,
    "metaData": Metadata.from_json,
    "add": Add.from_json,
    "remove": Remove.from_json,
    "txn": Txn.from_json,
    "commitInfo": CommitInfo.from_json,
    "domainMetadata": DomainMetadata.from_json,
}

_KEYS: dict[type, str] = {
    Protocol: "protocol",
    Metadata: "metaData",
    Add: "add",
    Remove: "remove",
    AddCDCFile: "cdc",
    Txn: "txn",
    CommitInfo: "commitInfo",
    DomainMetadata: "domainMetadata",
}


def action_from_json(obj: Any) -> Action | None:
    """Decode one log line's object; raises ValueError with what was wrong.

    A line holds one action.  Keys beside it that this codec does not know are ignored, as
    PROTOCOL.md ("Protocol Evolution") asks of readers and as Spark reads them (Delta's own
    ``transaction_log_schema_evolvability`` table has such lines); a line of unknown keys
    only is an ``UnknownAction`` (the first of them), and an empty object holds no action
    (None).  Two actions this codec knows on one line are refused: readers disagree on them
    (Spark keeps one, the kernels apply both), so no answer would be right.
    """
    if not isinstance(obj, dict):
        raise ValueError("a log line must be a JSON object holding one action")
    known = [k for k in obj if k in _DECODERS]
    if len(known) > 1:
        raise ValueError(f"a log line holds one action, this one holds {len(known)}: {known}")
    if not known:
        if not obj:
            return None
        key = next(iter(obj))
        return UnknownAction(key, obj[key])
    key = known[0]
    value = obj[key]
    if not isinstance(value, dict):
        raise ValueError(f"action {key!r} must be a JSON object")
    result: Action = _DECODERS[key](value)
    return result


def action_to_json(action: Action) -> JsonDict:
    if isinstance(action, UnknownAction):
        return {action.key: action.value}
    return {_KEYS[type(action)]: action.to_json()}


def action_kind(action: Action) -> str:
    """The protocol's name of the action type (``add``, ``metaData``, ...)."""
    if isinstance(action, UnknownAction):
        return action.key
    return _KEYS[type(action)]


def parse_commit(data: bytes, source: str) -> list[Action]:
    """Decode a whole commit file; ``source`` names it in errors (file and line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptLogError(f"{source}: not valid UTF-8 at byte {e.start}") from None
    actions: list[Action] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            action = action_from_json(loads(line))
        except (ValueError, TypeError) as e:
            raise CorruptLogError(f"{source}: line {lineno}: {e}") from None
        if action is not None:
            actions.append(action)
    return actions


def serialize_commit(actions: list[Action]) -> bytes:
    """One action per line, newline-terminated, compact JSON (as Spark and delta-rs write)."""
    dumps = json.dumps
    return "".join(
        dumps(action_to_json(a), separators=(",", ":"), ensure_ascii=False) + "\n" for a in actions
    ).encode("utf-8")
