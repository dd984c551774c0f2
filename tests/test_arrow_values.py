"""The Arrow values built from buffers (protocol.arrow_values) equal pyarrow's conversion of
the same Python values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.protocol.arrow_values import (
    int64_array,
    null_scalar,
    string_array,
    string_scalar,
    true_scalar,
)


@settings(deadline=None)
@given(st.text())
def test_a_string_scalar_equals_pyarrows(text: str) -> None:
    built = string_scalar(text)
    assert built.type == pa.string() and built.equals(pa.scalar(text, pa.string()))


@settings(deadline=None)
@given(st.lists(st.text(), max_size=50))
def test_a_string_array_equals_pyarrows(texts: list[str]) -> None:
    built = string_array(texts)
    assert built.type == pa.string() and built.equals(pa.array(texts, pa.string()))
    assert built.null_count == 0


@settings(deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=50), st.integers(1, 3))
def test_an_int64_array_equals_pyarrows(values: list[int], step: int) -> None:
    source = np.array(values, dtype=np.int64)[::step]  # strided: copied contiguous
    assert int64_array(source).equals(pa.array(source, pa.int64()))


def test_the_null_and_true_scalars_equal_pyarrows() -> None:
    for t in (pa.string(), pa.bool_(), pa.int64(), pa.date32()):
        assert null_scalar(t).equals(pa.scalar(None, t))
    assert true_scalar().equals(pa.scalar(True))
