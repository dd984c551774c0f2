"""Where one append's wall time goes, traced from inside a writer process of bench/fleet.py.

``install()`` wraps the functions an append passes through (opening the table, writing its
data file, the fleet's rounds: publish, round key, waiting for a version, listing, reading
records, choosing, claiming, deleting) so that each call pushes a phase; every S3 request
(``S3Store._request``) is counted under the innermost phase open when it was sent (requests
sent from pool threads count under the phase of the thread that submitted them: a writer
process makes one append at a time).  ``append()`` brackets one append; at its end the
phases' exclusive wall times and requests are written as one JSON line to the file named by
``FLEET_BENCH_TRACE``.  ``summarise()`` adds up such files.

Exclusive time: a phase's own time, less the time of phases opened inside it.  Only the
benchmark uses this; nothing in the library knows of it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_stack: list[tuple[str, float]] = []
_excl: dict[str, float] = defaultdict(float)
_calls: Counter[str] = Counter()
_requests: Counter[str] = Counter()
_request_s: dict[str, float] = defaultdict(float)
_child: list[float] = []  # time spent in children of each open phase
_out: Any = None


def _enter(name: str) -> None:
    with _lock:
        _stack.append((name, time.perf_counter()))
        _child.append(0.0)
        _calls[name] += 1


def _leave() -> None:
    with _lock:
        name, t0 = _stack.pop()
        child = _child.pop()
        took = time.perf_counter() - t0
        _excl[name] += took - child
        if _child:
            _child[-1] += took


def phase(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def inner(*a: Any, **k: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return f(*a, **k)
            _enter(name)
            try:
                return f(*a, **k)
            finally:
                _leave()
        return inner
    return wrap


def _patch(owner: Any, attr: str, name: str) -> None:
    f = getattr(owner, attr)
    setattr(owner, attr, phase(name)(f))


def install() -> None:
    """Wrap the functions an append passes through (see the module docstring)."""
    global _out
    path = os.environ.get("FLEET_BENCH_TRACE")
    if not path:
        return
    _out = open(path, "a", buffering=1)  # noqa: SIM115

    import deltacommit.table as facade
    from deltacommit.engine.commit import loop as loop_mod
    from deltacommit.engine.commit import table_log
    from deltacommit.engine.group.fleet import include, records
    from deltacommit.engine.group.fleet import round as round_mod
    from deltacommit.io.logstore import base as ls_base
    from deltacommit.io.storage import s3

    _patch(facade.TABLES.__class__, "open", "open table")
    _patch(facade.TABLES.__class__, "create", "open table")
    _patch(round_mod._Writer, "_publish", "publish")
    _patch(round_mod._Writer, "_await", "await version")
    _patch(round_mod._Writer, "_lead", "lead (other)")
    _patch(round_mod._Writer, "_read_digest", "read digest")
    _patch(round_mod._Writer, "_refresh", "refresh")
    _patch(round_mod._Writer, "__init__", "await data durable")
    _patch(round_mod._Writer, "_withdraw", "withdraw")
    _patch(ls_base.LogStore, "claim_fleet_round", "round key")
    _patch(records, "listing", "list records")
    _patch(records, "read_records", "read records")
    _patch(records, "delete", "delete records")
    _patch(include, "choose", "choose (checks)")
    _patch(loop_mod.CommitLoop, "run", "claim (commit loop)")
    _patch(loop_mod.CommitLoop, "catch_up", "catch up")
    _patch(table_log.TableLog, "refresh", "refresh")
    _patch(table_log.TableLog, "post_commit", "post commit")
    from deltacommit.engine.transaction import transaction as txn_mod
    _patch(txn_mod, "fleet_commit", "fleet commit (other)")

    awaited = round_mod._Writer._await

    def await_version(self: Any, *a: Any) -> Any:
        found = awaited(self, *a)
        if found is None:
            with _lock:
                _calls["await timed out (patience)"] += 1
        return found

    round_mod._Writer._await = await_version  # type: ignore[method-assign]
    lead = round_mod._Writer._lead

    def lead_round(self: Any, version: int) -> Any:
        with _lock:
            _calls["lead: behind (refresh first)" if self.clock.monotonic() - self.fresh_at
                   >= self.policy.turn_patience else "lead: fresh"] += 1
        return lead(self, version)

    round_mod._Writer._lead = lead_round  # type: ignore[method-assign]
    original = s3.S3Store._request

    def request(self: Any, api: str, op: str, path: str, call: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, api, op, path, call, **kw)
        finally:
            took = time.perf_counter() - t0
            area = _area(path)
            with _lock:
                where = _stack[-1][0] if _stack else "-"
                _requests[f"{where} | {api} {area}"] += 1
                _request_s[f"{where} | {api} {area}"] += took

    s3.S3Store._request = request  # type: ignore[method-assign]


def _area(path: str) -> str:
    if "_deltacommit_fleet" in path:
        return "fleet-round" if path.endswith(".round") else "fleet"
    if "_delta_log" in path:
        return "log"
    return "data"


@contextlib.contextmanager
def append() -> Iterator[None]:
    """Bracket one append: its phases and requests go out as one line when it ends."""
    if _out is None:
        yield
        return
    with _lock:
        _excl.clear()
        _calls.clear()
        _requests.clear()
        _request_s.clear()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    _enter("append (other)")
    try:
        yield
    finally:
        _leave()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        with _lock:
            line = {"start": round(time.time() - wall, 4),
                    "wall_ms": round(wall * 1000, 2), "cpu_ms": round(cpu * 1000, 2),
                    "phases_ms": {k: round(v * 1000, 2) for k, v in _excl.items()},
                    "calls": dict(_calls), "requests": dict(_requests),
                    "request_ms": {k: round(v * 1000, 2) for k, v in _request_s.items()}}
        _out.write(json.dumps(line) + "\n")


def summarise(paths: list[Path]) -> dict[str, Any]:
    """Mean per append over every line of ``paths``: wall and CPU time, exclusive time per
    phase, requests per phase and kind (with their mean round trip)."""
    n = 0
    wall = cpu = 0.0
    phases: dict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    reqs: Counter[str] = Counter()
    req_ms: dict[str, float] = defaultdict(float)
    for p in paths:
        for line in p.read_text().splitlines():
            d = json.loads(line)
            n += 1
            wall += d["wall_ms"]
            cpu += d["cpu_ms"]
            for k, v in d["phases_ms"].items():
                phases[k] += v
            calls.update(d["calls"])
            reqs.update(d["requests"])
            for k, v in d["request_ms"].items():
                req_ms[k] += v
    if not n:
        return {"appends": 0}
    return {
        "appends": n, "wall_ms": round(wall / n, 1), "cpu_ms": round(cpu / n, 1),
        "phases_ms": {k: round(v / n, 1) for k, v in sorted(phases.items(), key=lambda x: -x[1])},
        "calls_per_append": {k: round(v / n, 2) for k, v in sorted(calls.items())},
        "requests_per_append": {k: round(v / n, 2) for k, v in sorted(reqs.items())},
        "request_rtt_ms": {k: round(req_ms[k] / reqs[k], 1) for k in sorted(reqs)},
        "requests_total_per_append": round(sum(reqs.values()) / n, 2),
    }
