"""The public API: every name of ``deltacommit.__all__`` importable from the package, the
extension points among them, and ``import deltacommit`` loading nothing a call has not asked
for (names load their module on first use)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

import pyarrow as pa

import deltacommit as dc
from deltacommit.io.logstore import ConditionalPutLogStore
from deltacommit.io.logstore import registry as log_store_registry
from deltacommit.io.storage import MemoryStore
from deltacommit.io.storage import registry as store_registry
from deltacommit.testing import unique_name

#: What a bare ``import deltacommit`` must not load: the AWS SDK, Spark, pyarrow's heavier
#: modules and the package's own table facade (each loads with the first call that needs it).
NOT_LOADED_BY_IMPORT = ("boto3", "botocore", "pyspark", "pyarrow.dataset", "pyarrow.parquet",
                        "pyarrow.compute", "deltacommit.table", "deltacommit.engine",
                        "deltacommit.protocol.expressions")


def test_every_public_name_is_importable_from_the_package() -> None:
    for name in dc.__all__:
        assert getattr(dc, name) is not None, name
    assert set(dc.__all__) <= set(dir(dc))


def test_the_extension_points_are_the_registries() -> None:
    assert dc.register_store is store_registry.register_store
    assert dc.unregister_store is store_registry.unregister_store
    assert dc.register_log_store is log_store_registry.register_log_store
    assert dc.unregister_log_store is log_store_registry.unregister_log_store


class _Recorded(ConditionalPutLogStore):
    """A commit mechanism of a user's own: conditional put, under its own name."""

    mechanism = "recorded"


def test_a_store_and_a_log_store_registered_through_the_public_api_serve_a_table() -> None:
    scheme = f"t{unique_name('api').replace('-', '')}"
    bucket = unique_name("bucket")

    def factory(uri: str, options: Mapping[str, str] | None) -> dc.ObjectStore:
        return MemoryStore(bucket, uri.split("://", 1)[1])

    dc.register_store(scheme, factory)
    dc.register_log_store("recorded", _Recorded,
                          selects=lambda store: isinstance(store, MemoryStore)
                          and store.name == bucket)
    try:
        uri = f"{scheme}://b/t"
        dc.write(uri, pa.table({"x": [1, 2]}))
        dc.write(uri, pa.table({"x": [3]}))
        table = dc.DeltaTable(uri)
        assert isinstance(table.log_store, _Recorded)
        assert table.configuration["deltacommit.coordination"] == "recorded"
        assert sorted(table.to_arrow().column("x").to_pylist()) == [1, 2, 3]
    finally:
        assert dc.unregister_log_store("recorded") is _Recorded
        assert dc.unregister_store(scheme) is factory


def test_import_deltacommit_loads_only_the_exceptions() -> None:
    probe = ("import json, sys\nimport deltacommit\n"
             "print(json.dumps(sorted(m for m in sys.modules)))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], check=True,
                                           capture_output=True, text=True).stdout))
    assert [m for m in NOT_LOADED_BY_IMPORT if m in loaded] == []
    assert {m for m in loaded if m.startswith("deltacommit")} == {"deltacommit",
                                                                  "deltacommit.errors"}
