"""Every table of Delta's own test suites in tests/data, read as its class says (corpus.py):
rows equal to what Spark recorded or, where nothing was recorded, to what deltalake 1.6.0 reads;
every earlier version equal to deltalake's time travel; file lists of log-only tables equal to
deltalake's; deliberate refusals and invalid logs clear errors, never a crash."""

from __future__ import annotations

import pytest

from deltacommit.errors import UnsupportedProtocolError

from .corpus import Case, cases, check

# Features being built: until they land, tables needing them must be refused naming them.
NOT_YET = {"columnMapping", "v2Checkpoint", "typeWidening", "typeWidening-preview"}

CASES = list(cases())


def _pending(case: Case) -> set[str]:
    features = {f.split(":")[0] for f in case.features()}
    return features & NOT_YET if case.kind == "read" else set()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reads_as_spark_and_deltalake_do(case: Case) -> None:
    pending = _pending(case)
    if pending:
        import deltacommit as dc

        with pytest.raises(UnsupportedProtocolError) as err:
            dc.DeltaTable(case.uri).to_arrow()
        assert case.uri in str(err.value) or case.path.name in str(err.value)
        return
    outcome = check(case)
    assert outcome.ok, f"{case.name} ({case.kind}): {outcome.detail}"


def test_the_corpus_is_whole() -> None:
    kinds = [c.kind for c in CASES]
    # 100 golden tables, 20 of the Java kernel, 60 of delta-kernel-rs (some nest two tables).
    assert len(CASES) >= 180
    assert kinds.count("read") >= 150
