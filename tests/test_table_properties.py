"""A property that asks for a table feature grants it the same way whether the table is created
with it or it is set later (``DeltaTable.set_properties``): one property-to-feature table
(``log.feature_requests``) serves both.  Each property is set on tables of each protocol form
and the features the protocol supports afterwards are compared with those of a table created
with the property."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.actions import Protocol
from deltacommit.protocol.table_config.feature_requests import (
    FEATURES,
    PROPERTY_FEATURES,
    REQUESTABLE,
    supported_features,
    with_features,
)
from tests.delta_tables import peer_read

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])

#: Every property that asks for a feature, with a value that asks for it.
FEATURE_PROPERTIES: list[tuple[str, str]] = [
    ("delta.enableDeletionVectors", "true"),
    ("delta.enableRowTracking", "true"),
    ("delta.enableChangeDataFeed", "true"),
    ("delta.enableInCommitTimestamps", "true"),
    ("delta.columnMapping.mode", "name"),
    ("delta.appendOnly", "true"),
    ("delta.constraints.positive", "id > 0"),
    ("delta.checkpointPolicy", "v2"),
    ("delta.enableTypeWidening", "true"),
    *((f"delta.feature.{name}", "supported") for name in REQUESTABLE),
    ("delta.minWriterVersion", "3"),
    ("delta.minWriterVersion", "4"),
    ("delta.minWriterVersion", "6"),
    ("delta.minWriterVersion", "7"),
    ("delta.minReaderVersion", "3"),
]

#: Tables of each protocol form a property may be set on: legacy writer 2 (a plain new
#: table), legacy writer 4 (change data feed), table features without and with reader
#: features.
BASES: dict[str, dict[str, str]] = {
    "legacy 1/2": {},
    "legacy 1/4": {"delta.enableChangeDataFeed": "true"},
    "features 1/7": {"delta.feature.domainMetadata": "supported"},
    "features 3/7": {"delta.checkpointPolicy": "v2"},
}


def _create(path: Path, configuration: dict[str, str]) -> dc.DeltaTable:
    t = dc.DeltaTable.create(str(path), SCHEMA, configuration=configuration)
    dc.write(t, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA))
    return dc.DeltaTable(str(path))


def test_every_property_that_asks_for_a_feature_is_tested() -> None:
    tested = {key for key, _ in FEATURE_PROPERTIES}
    for p in PROPERTY_FEATURES:
        assert any(k == p.key or (p.key.endswith(".") and k.startswith(p.key)) for k in tested)


@pytest.mark.parametrize("base", list(BASES))
@pytest.mark.parametrize(("key", "value"), FEATURE_PROPERTIES)
def test_set_properties_grants_the_features_create_grants(
        key: str, value: str, base: str, tmp_path: Path) -> None:
    created = dc.DeltaTable.create(str(tmp_path / "created"), SCHEMA,
                                   configuration={**BASES[base], key: value}).protocol
    table = _create(tmp_path / "t", BASES[base])
    before = table.protocol
    table.set_properties({key: value})
    after = dc.DeltaTable(str(tmp_path / "t")).protocol
    assert supported_features(after) == supported_features(created) | supported_features(before)
    # The same versions where the created table needs them.
    assert after.min_reader_version == max(created.min_reader_version, before.min_reader_version)
    assert after.min_writer_version == max(created.min_writer_version, before.min_writer_version)
    # A reader feature is listed for readers too, and every writer feature is known.
    if after.min_reader_version >= 3:
        assert set(after.reader_features or ()) <= set(after.writer_features or ())
    # Requests change the protocol; they are not stored as properties.
    stored = dc.DeltaTable(str(tmp_path / "t")).configuration
    if key.startswith("delta.feature.") or key.startswith("delta.min"):
        assert key not in stored
    else:
        assert stored[key] == value
    # deltalake, which checks the protocol against the properties, reads the table (where
    # it reads the features; 1.6.0 reads no typeWidening table).
    if not {"v2Checkpoint", "vacuumProtocolCheck", "typeWidening"} & supported_features(after):
        assert sorted(peer_read(str(tmp_path / "t")).column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("base", list(BASES))
def test_a_property_that_asks_for_nothing_leaves_the_protocol_alone(
        base: str, tmp_path: Path) -> None:
    table = _create(tmp_path / "t", BASES[base])
    before = table.protocol
    table.set_properties({"delta.enableDeletionVectors": "false",
                          "delta.checkpointInterval": "20"})
    assert dc.DeltaTable(str(tmp_path / "t")).protocol == before


def test_deletion_vectors_turned_on_later_let_delete_write_them(tmp_path: Path) -> None:
    table = _create(tmp_path / "t", {})
    table.set_properties({"delta.enableDeletionVectors": "true"})
    table = dc.DeltaTable(str(tmp_path / "t"))
    assert "deletionVectors" in (table.protocol.reader_features or [])
    assert "deletionVectors" in (table.protocol.writer_features or [])
    [before] = table.files()
    table.delete("id = 2")
    [after] = dc.DeltaTable(str(tmp_path / "t")).files()
    assert after.path == before.path and after.deletion_vector is not None  # a DV, no rewrite
    assert sorted(dc.DeltaTable(str(tmp_path / "t")).to_arrow().column("id").to_pylist()) == [1, 3]
    assert sorted(peer_read(str(tmp_path / "t")).column("id").to_pylist()) == [1, 3]


def test_column_mapping_turned_on_by_property_names_the_fields(tmp_path: Path) -> None:
    table = _create(tmp_path / "t", {})
    table.set_properties({"delta.columnMapping.mode": "name"})
    table = dc.DeltaTable(str(tmp_path / "t"))
    assert (table.protocol.min_reader_version, table.protocol.min_writer_version) == (2, 5)
    assert table.configuration["delta.columnMapping.maxColumnId"] == "2"
    table.rename_column("v", "renamed")
    got = dc.DeltaTable(str(tmp_path / "t")).to_arrow()
    assert got.column_names == ["id", "renamed"]
    assert sorted(got.column("renamed").to_pylist()) == ["a", "b", "c"]
    with pytest.raises(InvalidArgumentError, match="mode 'name' only"):
        _create(tmp_path / "o", {}).set_properties({"delta.columnMapping.mode": "id"})
    with pytest.raises(InvalidArgumentError, match="already uses column mapping"):
        dc.DeltaTable(str(tmp_path / "t")).set_properties({"delta.columnMapping.mode": "none"})


def test_a_version_or_feature_deltacommit_cannot_honour_is_refused(tmp_path: Path) -> None:
    table = _create(tmp_path / "t", {})
    for key, value in [("delta.minWriterVersion", "5"), ("delta.minReaderVersion", "2"),
                       ("delta.minWriterVersion", "8"), ("delta.feature.variantType", "supported")]:
        with pytest.raises(InvalidArgumentError, match=key.replace(".", r"\.")):
            table.set_properties({key: value})
    assert dc.DeltaTable(str(tmp_path / "t")).version == table.version


# --------------------------------------------------------------------------- pure

LEGACY = [Protocol(1, 1), Protocol(1, 2), Protocol(1, 3), Protocol(1, 4), Protocol(2, 5),
          Protocol(1, 6), Protocol(2, 6), Protocol(1, 7, None, ["appendOnly"]),
          Protocol(3, 7, ["deletionVectors"], ["deletionVectors", "invariants"])]


@given(st.sampled_from(LEGACY), st.lists(st.sampled_from(list(FEATURES)), max_size=4),
       st.sampled_from([0, 1, 3]), st.sampled_from([0, 2, 3, 4, 6, 7]))
def test_with_features_only_adds(protocol: Protocol, features: list[str], reader: int,
                                 writer: int) -> None:
    out = with_features(protocol, features, reader, writer)
    assert supported_features(out) >= supported_features(protocol) | set(features)
    if "rowTracking" in features:
        assert "domainMetadata" in supported_features(out)
    assert out.min_reader_version >= max(protocol.min_reader_version, reader)
    assert out.min_writer_version >= max(protocol.min_writer_version, writer)
    if out.min_reader_version >= 3:
        assert set(out.reader_features or ()) <= set(out.writer_features or ())
    if out.min_writer_version >= 7:
        assert out.writer_features is not None
    # Asking again changes nothing.
    assert with_features(out, features, reader, writer) is out
