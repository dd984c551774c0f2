"""Fleets of deltacommit writer processes and writers of the newest deltalake, released together.

The newest deltalake runs in a venv of its own (``deltalake_peer.py`` under that venv's
Python); deltacommit's writers are processes of the fork server (``tests.s3.helpers``).  Both
kinds open the table first, then wait: the deltacommit writers on a barrier, the peers for a
line on stdin, so that every writer starts appending at once.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltacommit.protocol.log.names import commit_path
from tests.s3.helpers import Acked, context, deltacommit_appender

PEER_SCRIPT = Path(__file__).with_name("deltalake_peer.py")
TIMEOUT = 600.0


class LatestPeer:
    """One writer process of the newest deltalake."""

    def __init__(self, python: Path, uri: str, options: Mapping[str, str], writer: int,
                 appends: int, mode: str = "append") -> None:
        spec = {"uri": uri, "options": dict(options), "writer": writer, "appends": appends,
                "mode": mode}
        self.writer = writer
        self.proc = subprocess.Popen([str(python), str(PEER_SCRIPT), json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        self._early: dict[str, Any] | None = None

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":  # it failed before opening the table: that is its report
            self._early = json.loads(line) if line.strip().startswith("{") else {
                "writer": self.writer, "acked": [], "errors": {f"no start: {line!r}": 1}}

    def go(self) -> None:
        if self._early is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()

    def result(self) -> PeerResult:
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        report = self._early or json.loads(out.strip().splitlines()[-1])
        return PeerResult(self.writer, report["acked"], Counter(report["errors"]), err,
                          report.get("deltalake"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@dataclass
class PeerResult:
    writer: int
    acked: list[int]
    errors: Counter[str]
    stderr: str
    version: str | None


@dataclass
class FleetResult:
    """Each writer's acknowledged batches: deltacommit's journals and the peers' reports."""

    ours: dict[int, list[Acked]] = field(default_factory=dict)
    ours_failed: dict[int, str] = field(default_factory=dict)
    peers: dict[int, PeerResult] = field(default_factory=dict)

    def expected_rows(self) -> Counter[tuple[int, int]]:
        rows: Counter[tuple[int, int]] = Counter()
        for w, journal in self.ours.items():
            rows.update((w, b) for b, _, _, _ in journal)
        for w, peer in self.peers.items():
            rows.update((w, b) for b in peer.acked)
        return rows


#: deltacommit's MERGE conflicts by its own rules, each ending one attempt of a MERGE that is
#: then submitted again.
MERGE_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException",
                   "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
                   "MetadataChangedException", "ProtocolChangedException")


def deltacommit_merger(uri: str, options: Mapping[str, str], writer: int, merges: int,
                       start: Any, out: Any) -> None:
    """MERGE ``merges`` keys (``writer``, batch) into the table with deltacommit, each inserted
    where absent; a MERGE that meets a conflict of deltacommit's rules is submitted again
    (safe: the key is inserted only where absent).  The journal's attempts column counts the
    conflicts met by that batch."""
    import deltacommit as dc
    from tests.s3.helpers import _report, batch

    def work() -> list[Acked]:
        dc.DeltaTable(uri, storage_options=dict(options))  # opened first, as every writer is
        start.wait()
        acked: list[Acked] = []
        for b in range(merges):
            conflicts = 0
            while conflicts < 200:
                try:
                    r = (dc.DeltaTable(uri, storage_options=dict(options))
                         .merge(batch(writer, b), "t.writer = s.writer AND t.batch = s.batch",
                                "s", "t").when_not_matched_insert_all().execute())
                    break
                except dc.DeltaCommitError as e:
                    if type(e).__name__ not in MERGE_CONFLICTS:
                        raise
                    conflicts += 1
            else:
                raise RuntimeError(f"MERGE of batch {b} met 200 conflicts")
            acked.append((b, int(r["version"]), conflicts, ""))
        return acked

    _report(out, writer, work)


def run_fleet(uri: str, options: Mapping[str, str], python: Path, *, ours: list[int],
              peers: list[int], appends: int, our_mergers: tuple[int, ...] = (),
              peer_mode: str = "append") -> FleetResult:
    """deltacommit writers ``ours`` and newest-deltalake writers ``peers`` (writer ids), each
    appending ``appends`` one-row batches at once; the deltacommit writers ``our_mergers`` (of
    ``ours``) MERGE their batches instead, and the peers too with ``peer_mode="merge"``."""
    ctx = context("forkserver")
    start = ctx.Barrier(len(ours) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=deltacommit_merger if w in our_mergers else deltacommit_appender,
                         args=(uri, dict(options), w, appends, start, out))
             for w in ours]
    started = [LatestPeer(python, uri, options, w, appends, peer_mode) for w in peers]
    result = FleetResult()
    try:
        for p in procs:
            p.start()
        for peer in started:
            peer.wait_ready()
        start.wait(timeout=TIMEOUT)
        for peer in started:
            peer.go()
        for _ in procs:
            w, journal = out.get(timeout=TIMEOUT)
            if isinstance(journal, str):
                result.ours_failed[w] = journal
            else:
                result.ours[w] = journal
        for peer in started:
            result.peers[peer.writer] = peer.result()
    finally:
        for peer in started:
            peer.kill()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return result


def pairs(data: pa.Table) -> Counter[tuple[int, int]]:
    return Counter(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(),
                       strict=True))


def digests_hold(store: Any, result: FleetResult) -> list[str]:
    """deltacommit's acknowledged commits whose file no longer holds the bytes it wrote."""
    import hashlib

    bad = []
    for w, journal in result.ours.items():
        for b, version, _, digest in journal:
            if not digest:  # a MERGE's journal: no digest kept
                continue
            if hashlib.sha256(store.get(commit_path(version))).hexdigest() != digest:
                bad.append(f"writer {w} batch {b} at version {version}")
    return bad
