"""The one path rule (``deltacommit.protocol.log.paths``): every spelling of a file inside the table
resolves to the same key, every spelling of a file outside it is outside."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove
from deltacommit.protocol.log.paths import (
    canonical_key,
    deletion_vector_path,
    is_plain_relative,
    locate_data_file,
    parse_location,
    resolve,
    z85_decode,
)
from deltacommit.protocol.replay import TableState

LOCAL = parse_location("file:///abs/T")
S3 = parse_location("s3://bkt/T")

INSIDE_LOCAL = [
    "x.parquet", "./x.parquet", "a/../x.parquet", "/abs/T/x.parquet", "file:/abs/T/x.parquet",
    "file:///abs/T/x.parquet", "file://localhost/abs/T/x.parquet", "FILE:///abs/T/x.parquet",
    "%78.parquet", ".//x.parquet", "/abs/T/./x.parquet", "/abs/T/sub/../x.parquet",
    "file:/abs/U/../T/x.parquet",
]
INSIDE_S3 = [
    "x.parquet", "./x.parquet", "s3://bkt/T/x.parquet", "s3a://bkt/T/x.parquet",
    "s3n://bkt/T/x.parquet", "S3A://bkt/T/x.parquet", "/T/x.parquet", "s3a://bkt/T//x.parquet",
]
OUTSIDE_LOCAL = [
    "../outside/x.parquet", "%2E%2E/outside/x.parquet", "%2e%2e%2foutside%2fx.parquet",
    "/etc/passwd", "/abs/Tx/x.parquet", "file:///etc/passwd", "file://otherhost/abs/T/x.parquet",
    "s3://bkt/T/x.parquet", "a/../../x.parquet", "./../T2/x", "hdfs://nn/abs/T/x.parquet",
    "/abs/T", "/abs/T/", ".", "..",
]
OUTSIDE_S3 = [
    "../x.parquet", "s3://other/T/x.parquet", "s3://bkt/T2/x.parquet", "/etc/passwd",
    "file:///abs/T/x.parquet", "%2E%2E%2FU/x.parquet", "s3://bkt/x.parquet",
]


@pytest.mark.parametrize("path", INSIDE_LOCAL)
def test_local_spellings_resolve_inside(path: str) -> None:
    assert resolve(LOCAL, path).relative == "x.parquet"


@pytest.mark.parametrize("path", INSIDE_S3)
def test_s3_spellings_resolve_inside(path: str) -> None:
    assert resolve(S3, path).relative == "x.parquet"


@pytest.mark.parametrize("path", OUTSIDE_LOCAL)
def test_local_outside_is_refused_for_reading(path: str) -> None:
    assert not resolve(LOCAL, path).inside
    with pytest.raises(CorruptLogError, match=r"outside the table location.*allow_external_paths"):
        locate_data_file(LOCAL, path, table="file:///abs/T")


@pytest.mark.parametrize("path", OUTSIDE_S3)
def test_s3_outside_is_refused_for_reading(path: str) -> None:
    assert not resolve(S3, path).inside
    with pytest.raises(CorruptLogError, match="outside"):
        locate_data_file(S3, path, table="s3://bkt/T")


def test_opting_in_reads_outside() -> None:
    r = locate_data_file(LOCAL, "../other/x.parquet", table="t", allow_external=True)
    assert r.relative is None and r.location.uri() == "file:///abs/other/x.parquet"


def test_bucket_root_table() -> None:
    root = parse_location("s3a://bkt/")
    assert resolve(root, "x.parquet").relative == "x.parquet"
    assert resolve(root, "s3://bkt/d=1/x.parquet").relative == "d=1/x.parquet"
    assert not resolve(root, "s3://bkt2/x.parquet").inside


@pytest.mark.parametrize("bad", ["", "a\x00b", "%00x", "%ff%fe", "x" * 20_000])
def test_malformed_paths_are_clear_errors(bad: str) -> None:
    with pytest.raises(CorruptLogError, match="table t"):
        resolve(LOCAL, bad, table="t")


def test_canonical_key_folds_absolute_spellings() -> None:
    # delta-kernel-rs canonicalized-paths golden tables: add "/some/path", remove
    # "file:/some/path" leaves no live file.
    keys = {canonical_key(p) for p in ("/some/path", "file:/some/path", "file:///some/path",
                                       "file://localhost/some/path")}
    assert len(keys) == 1
    assert canonical_key("./x") == canonical_key("x") == canonical_key("%78") == "x"
    assert canonical_key("s3a://b/k") == canonical_key("s3://b/k")
    assert canonical_key("../x") != canonical_key("x")


def test_replay_treats_spellings_of_one_file_as_one() -> None:
    state = TableState()
    state.apply(0, [Protocol(1, 2), Metadata("id", "{}", []),
                    Add("/some/path", {}, 1, 0, True)])
    state.apply(1, [Remove("file:/some/path", 1, True)])
    assert not state.files


def test_deletion_vector_paths() -> None:
    # PROTOCOL.md's example: prefix "ab^-aqEH.-t@S}K{vb[*k^" -> "ab/deletion_vector_<uuid>.bin"
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
          "sizeInBytes": 40, "cardinality": 6}
    assert deletion_vector_path(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert deletion_vector_path({"storageType": "i", "pathOrInlineDv": "abc"}) is None
    assert deletion_vector_path({"storageType": "p", "pathOrInlineDv": "s3://b/x.bin"}) == "s3://b/x.bin"
    with pytest.raises(CorruptLogError, match="storageType"):
        deletion_vector_path({"storageType": "q", "pathOrInlineDv": "x"})
    assert z85_decode("HelloWorld") == bytes.fromhex("864fd26fb559f75b")


# --------------------------------------------------------------------------- generated spellings

_segment = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"],
                                          blacklist_characters="/%\\"),
                   min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


def _spell(rel: list[str], style: int, root_path: str, scheme: str, bucket: str) -> str:
    encoded = "/".join(quote(s, safe="=") for s in rel)
    if style == 0:
        return encoded
    if style == 1:
        return "./" + encoded
    if style == 2:
        return "zz/../" + encoded
    if style == 3:
        return f"{root_path}/{encoded}" if scheme == "file" else f"/{root_path.strip('/')}/{encoded}"
    if style == 4:
        return (f"file:{root_path}/{encoded}" if scheme == "file"
                else f"s3a://{bucket}{root_path}/{encoded}")
    if style == 5:
        return (f"file://localhost{root_path}/{encoded}" if scheme == "file"
                else f"s3n://{bucket}{root_path}//{encoded}")
    return "/".join(quote(s, safe="") for s in rel).replace("%", "%25", 0)


@settings(max_examples=400, deadline=None)
@given(rel=st.lists(_segment, min_size=1, max_size=4), style=st.integers(0, 6),
       s3=st.booleans())
def test_generated_inside_spellings_resolve_to_the_file(rel: list[str], style: int, s3: bool) -> None:
    root_path = "/abs/T"
    scheme, bucket = ("s3", "bkt") if s3 else ("file", "")
    root = parse_location(f"s3://bkt{root_path}" if s3 else f"file://{root_path}")
    spelled = _spell(rel, style, root_path, scheme, bucket)
    assert resolve(root, spelled).relative == "/".join(rel)


@settings(max_examples=300, deadline=None)
@given(rel=st.lists(_segment, min_size=1, max_size=3), ups=st.integers(1, 4),
       encode_dots=st.sampled_from(["..", "%2E%2E", "%2e%2e", ".%2E"]),
       encode_slash=st.booleans())
def test_generated_escapes_are_outside(rel: list[str], ups: int, encode_dots: str,
                                       encode_slash: bool) -> None:
    # Climbing above /abs/T (two levels below /) leaves the table, unless the path then
    # descends into it again (``../../../abs/T/x`` is /abs/T/x, inside).
    assume(rel[:2] != ["abs", "T"])
    sep = "%2F" if encode_slash else "/"
    spelled = sep.join([encode_dots] * (ups + 2)) + sep + "/".join(quote(s) for s in rel)
    assert not resolve(LOCAL, spelled).inside


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_text_resolves_or_is_a_clear_error(text: str) -> None:
    try:
        r = resolve(LOCAL, text, table="t")
    except CorruptLogError:
        return
    assert r.location.path.startswith("/")
    if r.inside:
        assert r.relative and not r.relative.startswith("/") and ".." not in r.relative.split("/")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab/.%2Ef", max_size=12))
def test_plain_relative_paths_are_their_own_key(text: str) -> None:
    if is_plain_relative(text):
        assert canonical_key(text) == text
        assert resolve(LOCAL, text).relative == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
               max_size=16),
       st.sampled_from(["file:///abs/T", "file:///", "s3://bkt/T", "s3://bkt", "s3a://bkt/a/b/"]))
def test_a_plain_relative_path_resolves_as_its_spelling_through_dot_slash(text: str,
                                                                          root_uri: str) -> None:
    """The shortcut for a path already canonical (``is_plain_relative``, what writers write)
    names the same location and key as the full resolution of ``./`` + that path."""
    assume(is_plain_relative(text))
    root = parse_location(root_uri)
    assert resolve(root, text) == resolve(root, "./" + text)
