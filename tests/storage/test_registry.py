"""The registries: object stores by URI scheme, log stores by commit mechanism, and overrides."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from deltacommit.errors import StorageConfigError
from deltacommit.io.logstore import (
    DEFAULT_MECHANISM,
    ConditionalPutLogStore,
    LogStore,
    open_log_store,
    register_log_store,
    registered_mechanisms,
    unregister_log_store,
)
from deltacommit.io.storage import (
    LocalStore,
    MemoryStore,
    ObjectStore,
    open_store,
    register_store,
    registered_schemes,
    unregister_store,
)
from deltacommit.ops.coordination import MECHANISMS
from deltacommit.testing import unique_name


@pytest.fixture
def scheme() -> Iterator[str]:
    name = f"t{unique_name('scheme').replace('-', '').replace('_', '').lower()}"
    yield name
    unregister_store(name)


def test_the_built_in_schemes_and_mechanisms() -> None:
    assert registered_schemes()[:5] == ("file", "memory", "s3", "s3a", "s3n")
    assert MECHANISMS == registered_mechanisms() == ("conditional", "dynamo-commit", "dynamodb")
    assert DEFAULT_MECHANISM == "conditional"


def test_a_registered_scheme_opens_its_store_and_is_listed_when_a_location_is_refused(
        scheme: str) -> None:
    seen: list[tuple[str, Mapping[str, str] | None]] = []

    def factory(uri: str, options: Mapping[str, str] | None) -> ObjectStore:
        seen.append((uri, options))
        return MemoryStore(scheme, uri.split("://", 1)[1])

    assert register_store(scheme, factory) is None
    store = open_store(f"{scheme.upper()}://bucket/t", {"k": "v"})
    assert isinstance(store, MemoryStore)
    assert seen == [(f"{scheme.upper()}://bucket/t", {"k": "v"})]
    with pytest.raises(StorageConfigError, match=rf"abfss://.*s3n://, {scheme}://"):
        open_store("abfss://x/y")
    assert unregister_store(scheme) is factory
    with pytest.raises(StorageConfigError, match="unsupported location"):
        open_store(f"{scheme}://bucket/t")


def test_a_built_in_scheme_can_be_overridden_and_restored() -> None:
    def in_memory(uri: str, options: Mapping[str, str] | None) -> ObjectStore:
        return MemoryStore(unique_name("s3-in-memory"))

    previous = register_store("s3", in_memory)
    try:
        assert isinstance(open_store("s3://bucket/t"), MemoryStore)
        assert isinstance(open_log_store("s3://bucket/t"), ConditionalPutLogStore)
    finally:
        assert previous is not None
        register_store("s3", previous)
    assert registered_schemes()[:5] == ("file", "memory", "s3", "s3a", "s3n")


def test_plain_paths_open_the_file_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    with pytest.raises(ValueError, match="scheme"):
        register_store("s3://", lambda uri, options: LocalStore(uri))


class _Marked(ConditionalPutLogStore):
    mechanism = "marked"


def test_a_registered_mechanism_is_selected_by_its_selector_and_recorded() -> None:
    chosen = unique_name("chosen")

    def selects(store: ObjectStore) -> bool:
        return isinstance(store, MemoryStore) and store.name == chosen

    register_log_store("marked", _Marked, selects=selects)
    try:
        assert registered_mechanisms()[-1] == "marked"
        marked = open_log_store(f"memory://{chosen}/t")
        assert isinstance(marked, _Marked)
        assert marked.coordination_config() == {"deltacommit.coordination": "marked"}
        other = open_log_store(f"memory://{unique_name('other')}/t")
        assert type(other) is ConditionalPutLogStore
    finally:
        assert unregister_log_store("marked") is _Marked
    assert "marked" not in registered_mechanisms()


def test_the_default_mechanism_can_be_overridden_in_place() -> None:
    built: list[LogStore] = []

    def counting(store: ObjectStore) -> LogStore:
        log_store = ConditionalPutLogStore(store)
        built.append(log_store)
        return log_store

    previous = register_log_store(DEFAULT_MECHANISM, counting)
    try:
        assert open_log_store(f"memory://{unique_name('default')}/t") is built[0]
        assert registered_mechanisms()[0] == DEFAULT_MECHANISM  # kept its place
    finally:
        assert previous is not None
        register_log_store(DEFAULT_MECHANISM, previous)


def test_local_use_imports_no_aws_package(tmp_path: Path) -> None:
    code = ("import sys, deltacommit\n"
            "from deltacommit.io.logstore import open_log_store\n"
            "from deltacommit.ops.coordination import MECHANISMS\n"
            "from deltacommit.io.aws import AwsConfig, resolve_aws_config\n"
            f"open_log_store({str(tmp_path)!r}); resolve_aws_config(None)\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore'))\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
