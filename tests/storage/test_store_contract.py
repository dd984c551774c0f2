"""The ObjectStore contract, run against every store: local directory, memory and S3 (on moto
and on LocalStack's own S3 provider, two implementations of S3's conditional writes).

The layers above storage rely on these semantics and nothing else, so each store must pass the
same tests; above all, racing ``put_if_absent`` calls have exactly one winner on every store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deltacommit.errors import ObjectExistsError, ObjectNotFoundError, PreconditionFailedError
from deltacommit.io.aws.config import clear_client_cache
from deltacommit.io.aws.light.s3 import LightS3Client
from deltacommit.io.storage import LocalStore, MemoryStore, ObjectStore, PutMode
from deltacommit.io.storage.s3 import S3Store
from deltacommit.testing import race, s3_storage_options, unique_name

#: ``s3-moto-botocore``: the S3 store on botocore's client (the others use the light client).
STORES = ["local", "memory", "s3-moto", "s3-moto-botocore", "s3-localstack"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:
    kind = request.param
    if kind == "local":
        yield LocalStore(tmp_path / "table")
    elif kind == "memory":
        yield MemoryStore(unique_name("contract"), "table")
    else:
        server = kind.removeprefix("s3-").removesuffix("-botocore")
        endpoint = request.getfixturevalue(f"{server}_server").endpoint
        name = unique_name("contract")
        request.getfixturevalue(f"{server}_s3_client").create_bucket(Bucket=name)
        botocore = kind.endswith("-botocore")
        if botocore:
            monkeypatch.setenv("DELTACOMMIT_AWS_CLIENT", "botocore")
        clear_client_cache()
        s3 = S3Store.from_uri(f"s3://{name}/table", s3_storage_options(endpoint))
        assert isinstance(s3._client, LightS3Client) is not botocore \
            or os.environ.get("DELTACOMMIT_AWS_CLIENT") == "botocore"
        yield s3
        clear_client_cache()


def test_put_then_get_and_head(store: ObjectStore) -> None:
    meta = store.put("a/b.json", b"hello")
    assert meta.path == "a/b.json"
    assert meta.size == 5
    assert meta.etag
    assert store.get("a/b.json") == b"hello"
    head = store.head("a/b.json")
    assert (head.path, head.size, head.etag) == ("a/b.json", 5, meta.etag)
    assert head.last_modified_ms > 0


def test_missing_objects_are_not_found_and_named(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"get .*nope\.json"):
        store.get("nope.json")
    with pytest.raises(ObjectNotFoundError, match=r"head .*nope\.json"):
        store.head("nope.json")
    assert not store.exists("nope.json")


def test_put_replaces(store: ObjectStore) -> None:
    first = store.put("x", b"one")
    second = store.put("x", b"two!")
    assert store.get("x") == b"two!"
    assert second.size == 4
    assert second.etag != first.etag


def test_put_if_absent_creates_once(store: ObjectStore) -> None:
    created = store.put_if_absent("_delta_log/00000000000000000000.json", b"first")
    assert created.size == 5
    with pytest.raises(ObjectExistsError, match=r"00000000000000000000\.json"):
        store.put_if_absent("_delta_log/00000000000000000000.json", b"second")
    assert store.get("_delta_log/00000000000000000000.json") == b"first"
    assert store.head("_delta_log/00000000000000000000.json").etag == created.etag


def test_put_if_match_replaces_only_the_version_read(store: ObjectStore) -> None:
    v1 = store.put("_last_checkpoint", b"v1")
    v2 = store.put_if_match("_last_checkpoint", b"v2", v1.etag or "")
    assert store.get("_last_checkpoint") == b"v2"
    assert v2.etag and v2.etag != v1.etag
    with pytest.raises(PreconditionFailedError, match="_last_checkpoint"):
        store.put_if_match("_last_checkpoint", b"v3", v1.etag or "")
    assert store.get("_last_checkpoint") == b"v2"


def test_put_if_match_on_a_missing_object_fails_its_precondition(store: ObjectStore) -> None:
    with pytest.raises(PreconditionFailedError, match="missing"):
        store.put_if_match("missing", b"x", '"0123"')
    assert not store.exists("missing")


def test_put_modes_are_the_conditional_writes(store: ObjectStore) -> None:
    created = store.put("k", b"1", mode=PutMode.CREATE)
    with pytest.raises(ObjectExistsError, match=r"put-if-absent .*k"):
        store.put("k", b"2", mode=PutMode.CREATE)
    updated = store.put("k", b"3", mode=PutMode.update(created.etag or ""))
    with pytest.raises(PreconditionFailedError, match=r"put-if-match .*k"):
        store.put("k", b"4", mode=PutMode.update(created.etag or ""))
    assert store.get("k") == b"3"
    replaced = store.put("k", b"5", mode=PutMode.OVERWRITE)
    assert store.get("k") == b"5"
    assert len({created.etag, updated.etag, replaced.etag}) == 3


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("d", b"x")
    store.delete("d")
    store.delete("d")
    store.delete("never-existed")
    assert not store.exists("d")


def test_list_is_lexicographic_filtered_by_prefix_and_start_after(store: ObjectStore) -> None:
    names = ["_delta_log/00000000000000000002.json", "_delta_log/00000000000000000000.json",
             "_delta_log/00000000000000000010.checkpoint.parquet",
             "_delta_log/00000000000000000001.json", "_delta_log2/other.json",
             "part-0.parquet", "date=2026-11-22/part-1.parquet"]
    for name in names:
        store.put(name, name.encode())
    log = [m.path for m in store.list("_delta_log/")]
    assert log == sorted(n for n in names if n.startswith("_delta_log/"))
    after = [m.path for m in store.list("_delta_log/", start_after="_delta_log/00000000000000000001.json")]
    assert after == ["_delta_log/00000000000000000002.json",
                     "_delta_log/00000000000000000010.checkpoint.parquet"]
    everything = list(store.list(""))
    assert [m.path for m in everything] == sorted(names)
    assert {m.path: m.size for m in everything} == {n: len(n) for n in names}
    assert [m.path for m in store.list("_delta_log")] == sorted(
        n for n in names if n.startswith("_delta_log"))
    assert list(store.list("nothing/")) == []


def test_copy_and_copy_if_absent(store: ObjectStore) -> None:
    store.put("_delta_log/.tmp/1.json.abc", b"commit body")
    copied = store.copy("_delta_log/.tmp/1.json.abc", "copy.json")
    assert copied.size == len(b"commit body")
    assert store.get("copy.json") == b"commit body"
    created = store.copy_if_absent("_delta_log/.tmp/1.json.abc", "_delta_log/00000000000000000001.json")
    assert created.size == len(b"commit body")
    assert store.get("_delta_log/00000000000000000001.json") == b"commit body"
    store.put("_delta_log/.tmp/other", b"other body")
    with pytest.raises(ObjectExistsError):
        store.copy_if_absent("_delta_log/.tmp/other", "_delta_log/00000000000000000001.json")
    assert store.get("_delta_log/00000000000000000001.json") == b"commit body"
    with pytest.raises(ObjectNotFoundError):
        store.copy("no-such-source", "dst")
    with pytest.raises(ObjectNotFoundError):
        store.copy_if_absent("no-such-source", "dst2")


def test_open_input_is_seekable(store: ObjectStore) -> None:
    store.put("data.bin", bytes(range(256)))
    f = store.open_input("data.bin")
    f.seek(250)
    assert f.read() == bytes(range(250, 256))
    f.seek(0)
    assert f.read(3) == b"\x00\x01\x02"


def test_child_is_rooted_below(store: ObjectStore) -> None:
    child = store.child("sub/dir")
    child.put("x.json", b"1")
    assert store.get("sub/dir/x.json") == b"1"
    assert [m.path for m in child.list("")] == ["x.json"]
    assert child.uri == store.uri + "/sub/dir"


def test_racing_put_if_absent_has_exactly_one_winner_per_key(store: ObjectStore) -> None:
    bodies: dict[str, bytes] = {}
    lock = threading.Lock()

    def attempt(index: int, key: str) -> bool:
        body = f"writer {index} of {key}".encode()
        try:
            store.put_if_absent(key, body)
        except ObjectExistsError:
            return False
        with lock:
            bodies[key] = body
        return True

    keys = [f"_delta_log/{v:020d}.json" for v in range(50)]
    wins = race(keys, 8, attempt)
    assert {k: n for k, n in wins.items() if n != 1} == {}
    # The object holds the winner's bytes, whole.
    for key in keys:
        assert store.get(key) == bodies[key]


@pytest.mark.parametrize("mode", [PutMode.OVERWRITE, PutMode.CREATE])
def test_a_local_put_whose_object_another_writer_deletes_at_once_succeeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: PutMode) -> None:
    """The object is in place, then deleted by another writer before the put returns (a fleet
    record a round's committer lands and deletes): the put succeeded and says so, with the
    metadata of what it wrote, instead of failing as if nothing had been written."""
    from deltacommit.io.storage import local

    store = LocalStore(tmp_path / "table")
    store.put("f/old", b"old")
    real_replace, real_link = os.replace, os.link

    def replaced_then_deleted(src: str, dst: str) -> None:
        real_replace(src, dst)
        os.unlink(dst)

    def linked_then_deleted(src: str, dst: str) -> None:
        real_link(src, dst)
        os.unlink(dst)

    monkeypatch.setattr(local.os, "replace", replaced_then_deleted)
    monkeypatch.setattr(local.os, "link", linked_then_deleted)
    path = "f/old" if mode is PutMode.OVERWRITE else "f/new"
    meta = store.put(path, b"written", mode=mode)
    assert (meta.path, meta.size) == (path, len(b"written"))
    left = sorted(os.listdir(tmp_path / "table" / "f"))
    assert left == ([] if mode is PutMode.OVERWRITE else ["old"])  # no temp file left behind
