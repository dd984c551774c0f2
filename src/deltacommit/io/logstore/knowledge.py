"""What this process has established about a table's coordination, shared by its log stores.

A log store object learns facts that spare later commits requests: the ``tablePath`` spelling
its fleet uses, that entry N is complete and N.json present, that N was the newest version a
moment ago.  ``dc.write(uri, ...)`` opens a new log store object on every call, so knowledge
kept on the object alone would be learnt again on every call (for Spark's DynamoDB protocol, a
Query per ``tablePath`` spelling and a HEAD of the previous commit, each time).  Log stores of
one table in one process therefore share one record here, keyed by the canonical location and
whatever else identifies the table and its coordination, as the clients resolved it
(``LogStore.identity``: endpoints, regions and credentials from any source, the DynamoDB
table, and the ``tablePath``).

The facts recorded never revert while the table exists (completion is final, a version once
taken stays taken), so sharing them is as safe as a kept table object keeping them.  A table
deleted and created again at the same location is the exception: whoever finds that out (the
process's table-state cache, whose proof of identity fails) calls ``forget`` for the location,
and ``clear`` forgets everything (as a new process would know nothing).  Never shared between
processes; bounded (the least recently used tables go first).  Log cleanup keeps its record of
a log too young to expire here too (``log_cleanup._Young``), for the same reason.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from deltacommit.protocol.log.paths import parse_location
from deltacommit.runtime.process_state import ForkSafeLock, process_wide

T = TypeVar("T")

#: At most this many tables' records are kept.
CAPACITY = 256

_lock = ForkSafeLock()
_records: OrderedDict[tuple[str, tuple[str, ...]], Any] = OrderedDict()



process_wide("log-store knowledge (io.logstore.knowledge)", _records.clear)

def canonical(uri: str) -> str:
    """The location every spelling of ``uri`` shares (``s3a://b/t/`` is ``s3://b/t``)."""
    try:
        return parse_location(uri).uri()
    except ValueError:
        return uri


def shared(uri: str, kind: tuple[str, ...], make: Callable[[], T]) -> T:
    """The process's record of kind ``kind`` for the table at ``uri``, made on first use."""
    key = (canonical(uri), kind)
    with _lock:
        record = _records.get(key)
        if record is None:
            record = _records[key] = make()
        _records.move_to_end(key)
        while len(_records) > CAPACITY:
            _records.popitem(last=False)
        return record


def forget(uri: str) -> None:
    """Drop every record of the table at ``uri`` (it may have been replaced)."""
    where = canonical(uri)
    with _lock:
        for key in [k for k in _records if k[0] == where]:
            del _records[key]


def clear() -> None:
    """Forget every table."""
    with _lock:
        _records.clear()
