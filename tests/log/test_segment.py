"""Choosing a log segment from a listing: the newest whole usable checkpoint and every commit
after it, gaps reported with the errors readers see.  Pure, so checked against a model over
arbitrary listings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import MissingVersionError, TableNotFoundError
from deltacommit.protocol.log.names import LogFile, parse_log_name
from deltacommit.protocol.log.segment import (
    LogListing,
    LogSegment,
    checkpoint_candidates,
    format_versions,
)

URI = "file:///t"


def commit(v: int) -> LogFile:
    f = parse_log_name(f"{v:020d}.json")
    assert f is not None
    return f


def classic(v: int) -> LogFile:
    f = parse_log_name(f"{v:020d}.checkpoint.parquet")
    assert f is not None
    return f


def part(v: int, i: int, n: int) -> LogFile:
    f = parse_log_name(f"{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet")
    assert f is not None
    return f


def listing_of(*files: LogFile) -> LogListing:
    return LogListing.of(files)


# --------------------------------------------------------------------------- examples


def test_newest_checkpoint_and_the_commits_after_it() -> None:
    files = [commit(v) for v in range(8)] + [classic(3), classic(6)]
    seg = listing_of(*files).segment(7)
    assert seg.checkpoint is not None and seg.checkpoint.version == 6
    assert seg.start == 7 and seg.commits == (7,) and seg.gaps == []
    seg.check(URI)


def test_a_checkpoint_at_the_target_leaves_nothing_to_replay() -> None:
    seg = listing_of(*[commit(v) for v in range(4)], classic(3)).segment(3)
    assert seg.start == 4 and seg.commits == () and seg.gaps == []


def test_an_incomplete_multi_part_set_is_passed_over() -> None:
    files = [commit(v) for v in range(6)] + [classic(2), part(4, 1, 2)]
    seg = listing_of(*files).segment(5)
    assert seg.checkpoint is not None and seg.checkpoint.version == 2
    whole = listing_of(*files, part(4, 2, 2)).segment(5)
    assert whole.checkpoint is not None and whole.checkpoint.kind == "checkpoint_part"
    assert [f.part for f in whole.checkpoint.files] == [1, 2]


def test_unusable_checkpoints_are_skipped_by_name() -> None:
    listing = listing_of(*[commit(v) for v in range(6)], classic(2), classic(4))
    seg = listing.segment(5, {classic(4).name})
    assert seg.checkpoint is not None and seg.checkpoint.version == 2
    seg = listing.segment(5, {classic(4).name, classic(2).name})
    assert seg.checkpoint is None and seg.start == 0 and seg.skipped_checkpoints == (2, 4)


def test_checkpoints_newer_than_every_commit_are_stray() -> None:
    listing = listing_of(*[commit(v) for v in range(3)], classic(2), classic(10**9))
    assert listing.stray == (10**9,)
    assert listing.checkpoints == (2,)
    assert listing.target(None, URI) == 2
    # Without commits nothing is stray: a listing from a checkpoint whose commit was cleaned up.
    assert listing_of(classic(5)).stray == ()
    assert listing_of(classic(5)).target(None, URI) == 5


def test_target_errors_are_the_readers() -> None:
    with pytest.raises(TableNotFoundError, match=r"no Delta table at file:///t: "
                       r"file:///t/_delta_log has no commit files"):
        listing_of().target(None, URI)
    listing = listing_of(commit(0), commit(1))
    with pytest.raises(TableNotFoundError, match=r"table file:///t has versions up to 1; "
                       r"version 2 does not exist"):
        listing.target(2, URI)
    with pytest.raises(TableNotFoundError, match="version -1 does not exist"):
        listing.target(-1, URI)
    assert listing.target(0, URI) == 0


def test_missing_version_errors_are_the_readers() -> None:
    listing = listing_of(commit(1), commit(2), commit(5), classic(0))
    with pytest.raises(MissingVersionError) as e:
        listing.segment(5, {classic(0).name}, latest=True).check(URI)
    assert str(e.value) == (
        "table file:///t: file:///t/_delta_log/00000000000000000000.json is missing and no "
        "usable checkpoint covers it; the log cannot be replayed (checkpoint(s) at version 0 "
        "could not be used; see the logged warnings)")
    with pytest.raises(MissingVersionError) as e:
        listing.segment(5).check(URI)
    assert str(e.value) == ("table file:///t: the log lacks version(s) 3-4 needed to reach "
                            "version 5")
    with pytest.raises(MissingVersionError) as e:
        listing.segment(5, {classic(0).name}).check(URI)  # a version was asked for
    assert str(e.value) == (
        "table file:///t: the log lacks version(s) 0, 3-4 needed to reach version 5 "
        "(checkpoint(s) at version 0 could not be used; see the logged warnings)")


def test_found_commits_fill_gaps() -> None:
    seg = listing_of(commit(0), commit(1), commit(4)).segment(4)
    assert seg.gaps == [(2, 3)]
    assert seg.with_found([]) is seg
    assert seg.with_found([3, 9]).gaps == [(2, 2)]
    filled = seg.with_found([2, 3])
    assert filled.commits == (0, 1, 2, 3, 4) and filled.gaps == []
    filled.check(URI)


def test_format_versions() -> None:
    assert format_versions([3, 4, 5, 9]) == "3-5, 9"
    assert format_versions([]) == ""


# --------------------------------------------------------------------------- properties

versions = st.integers(min_value=0, max_value=40)


@st.composite
def listings(draw: st.DrawFn) -> tuple[list[LogFile], set[int], dict[int, str]]:
    """Log files: some commits, classic checkpoints and multi-part sets (some incomplete)."""
    commits = draw(st.sets(versions, max_size=30))
    files = [commit(v) for v in commits]
    checkpoint_kinds: dict[int, str] = {}
    for v in draw(st.sets(versions, max_size=6)):
        kind = draw(st.sampled_from(["classic", "parts", "partial"]))
        if kind == "classic":
            files.append(classic(v))
        else:
            n = draw(st.integers(min_value=2, max_value=3))
            present = range(1, n + 1) if kind == "parts" else range(2, n + 1)
            files.extend(part(v, i, n) for i in present)
        checkpoint_kinds[v] = kind
    return draw(st.permutations(files)), commits, checkpoint_kinds


@settings(max_examples=300, deadline=None)
@given(listings(), st.one_of(st.none(), versions), st.data())
def test_segment_matches_a_model(
        listed: tuple[list[LogFile], set[int], dict[int, str]], asked: int | None,
        data: st.DataObject) -> None:
    files, commits, kinds = listed
    newest_commit = max(commits, default=None)
    stray = {v for v in kinds if newest_commit is not None and v > newest_commit}
    kinds = {v: k for v, k in kinds.items() if v not in stray}
    listing = LogListing.of(files)
    assert listing.stray == tuple(sorted(stray))
    assert listing.commits == tuple(sorted(commits))
    all_versions = commits | set(kinds)
    if not all_versions or (asked is not None and asked > max(all_versions)):
        with pytest.raises(TableNotFoundError):
            listing.target(asked, URI)
        return
    target = listing.target(asked, URI)
    assert target == (max(all_versions) if asked is None else asked)

    whole = sorted((v for v, k in kinds.items() if k != "partial" and v <= target), reverse=True)
    candidates = checkpoint_candidates(listing.files, target)
    assert [c.version for c in candidates] == whole
    unusable = {c.name for c in candidates if data.draw(st.booleans(), label=f"bad {c.version}")}
    seg = listing.segment(target, unusable, latest=asked is None)

    usable = [c for c in candidates if c.name not in unusable]
    expected_checkpoint = usable[0] if usable else None
    assert seg.checkpoint == expected_checkpoint
    start = 0 if expected_checkpoint is None else expected_checkpoint.version + 1
    assert seg.start == start and seg.version == target
    assert seg.commits == tuple(sorted(v for v in commits if start <= v <= target))
    missing = sorted(set(range(start, target + 1)) - commits)
    covered = {v for a, b in seg.gaps for v in range(a, b + 1)}
    if len(seg.gaps) < 8:
        assert sorted(covered) == missing
    else:
        assert covered <= set(missing) and min(missing) in covered
    assert seg.skipped_checkpoints == (() if expected_checkpoint is not None
                                       else tuple(sorted(v for v in kinds if v <= target)))
    if missing:
        with pytest.raises(MissingVersionError):
            seg.check(URI)
        assert seg.with_found(missing).gaps == []
    else:
        seg.check(URI)
    seg.with_found(missing).check(URI)


@given(st.lists(versions, unique=True).map(sorted))
def test_with_found_keeps_commits_sorted_and_in_range(found: list[int]) -> None:
    seg = LogSegment(20, None, (0, 5, 10))
    out = seg.with_found(found)
    assert list(out.commits) == sorted({0, 5, 10} | {v for v in found if v <= 20})
