"""Long torture runs: ``deltacommit stress`` on local disk and on S3 (moto) in both modes.

Modes: ``local``, ``s3-conditional``, ``s3-dynamodb``; ``s3-dynamodb-mixed`` adds peer writers
of other engines (``--peers``: deltalake 1.6.0 and the Spark S3DynamoDBLogStore emulator) beside
deltacommit's, and ``s3-dynamodb-peers-only`` runs the peers alone as the baseline of the errors
they raise among themselves.  Each mode runs N writer processes for S seconds while one writer
is killed with SIGKILL at random R times a second and restarted; then the history checker reads
the whole log.  Prints one JSON line per mode (commits, kills, restarts, the checker's counts,
the peers' acknowledged writes, lost and duplicated rows and errors, and ``ok``) and exits 1 if
any mode lost or duplicated an acknowledged write.  Journals and writer logs stay in the
directory printed first.  ``make torture`` and ``make torture-mixed`` run it.

Fleet-wide group commit: ``s3-conditional-fleet`` and ``s3-dynamodb-fleet`` run the writers as
hosts (each its own turn folder) on a table with ``deltacommit.groupCommit.fleet=true``, beside
the peers of ``--fleet-peers`` (deltalake; on DynamoDB also the Spark emulator); the baselines
``s3-conditional-hosts`` and ``s3-dynamodb-hosts`` run the same writers and peers with the
property off (a racing fleet of hosts).  After a fleet mode and its baseline, a
``torture-fleet-peers`` line sets the peers' errors per 100 acknowledged peer writes beside
each other.  ``make torture-fleet`` runs all four.

    .venv/bin/python bench/torture.py --seconds 300 --writers 8 --kill-rate 0.5
    .venv/bin/python bench/torture.py --seconds 600 --modes s3-dynamodb-fleet,s3-dynamodb-hosts
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--kill-rate", type=float, default=0.5)
    ap.add_argument("--modes", default="local,s3-conditional,s3-dynamodb")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--peers", default="deltalake,deltalake,spark-emulator",
                    help="peer writers of the s3-dynamodb-mixed and s3-dynamodb-peers-only modes")
    ap.add_argument("--fleet-peers", default="deltalake,spark-emulator",
                    help="peer writers of the -fleet and -hosts modes (the Spark emulator only "
                         "on DynamoDB)")
    ap.add_argument("--baseline-seconds", type=float,
                    help="seconds of the -hosts modes (default: --seconds)")
    args = ap.parse_args()

    from deltacommit.testing import (
        MotoServer,
        apply_test_aws_environment,
    )
    from deltacommit.testing.locations import new_s3_location
    from deltacommit.testing.stress import run_stress

    apply_test_aws_environment()
    ok = True
    peer_errors: dict[str, dict[str, Any]] = {}
    # Kept after the run: the journals and writer logs of a failing mode are the evidence.
    tmp = tempfile.mkdtemp(prefix="dc-torture-")
    print(f"torture: journals, writer logs and the local table in {tmp}", file=sys.stderr)
    with MotoServer() as moto:
        for mode in [m for m in args.modes.split(",") if m]:
            options: dict[str, str] = {}
            if mode == "local":
                uri = str(Path(tmp) / "local" / "table")
            else:
                moto.reset()
                bucket_uri, options = new_s3_location(
                    moto.endpoint, "torture", dynamodb=mode.startswith("s3-dynamodb"))
                uri = f"{bucket_uri}/table"
            peers = [p for p in args.peers.split(",") if p] if mode in (
                "s3-dynamodb-mixed", "s3-dynamodb-peers-only") else []
            fleet, hosts = mode.endswith("-fleet"), mode.endswith(("-fleet", "-hosts"))
            if hosts:
                peers = [p for p in args.fleet_peers.split(",")
                         if p and (p != "spark-emulator" or mode.startswith("s3-dynamodb"))]
            seconds = args.seconds
            if mode.endswith("-hosts") and args.baseline_seconds:
                seconds = args.baseline_seconds
            writers = 0 if mode == "s3-dynamodb-peers-only" else args.writers
            report = run_stress(uri, writers=writers, seconds=seconds, peers=peers,
                                kill_rate=args.kill_rate, storage_options=options,
                                journal_dir=Path(tmp) / f"{mode}-journals", seed=args.seed,
                                on_progress=lambda line: print(line, file=sys.stderr, flush=True),
                                fleet=fleet, as_hosts=hosts)
            doc: dict[str, Any] = {"bench": "torture", "mode": mode, **report.to_json()}
            v = doc.pop("verify") or {}
            doc.update({k: v.get(k) for k in ("last_version", "transactions", "acknowledged",
                                               "rows", "incomplete_entries", "problems")})
            print(json.dumps(doc), flush=True)
            ok = ok and report.ok
            if hosts and report.peers is not None:
                peer_errors[mode] = _peer_error_rates(report.peers.to_json())
                _compare_peers(peer_errors)
    return 0 if ok else 1


def _peer_error_rates(peers: dict[str, Any]) -> dict[str, Any]:
    """Per peer kind: acknowledged writes, errors by class and per 100 acknowledged writes."""
    out: dict[str, Any] = {}
    for kind, acked in peers["acknowledged"].items():
        errors = peers["errors"].get(kind, {})
        out[kind] = {"acknowledged": acked, "errors": errors,
                     "errors_per_100": round(100 * sum(errors.values()) / max(1, acked), 2)}
    return out


def _compare_peers(peer_errors: dict[str, dict[str, Any]]) -> None:
    """Once a fleet mode and its racing baseline have both run, one line beside each other."""
    for mode in list(peer_errors):
        if not mode.endswith("-fleet"):
            continue
        base = mode.removesuffix("-fleet") + "-hosts"
        if base in peer_errors:
            fleet, racing = peer_errors[mode], peer_errors[base]
            print(json.dumps({
                "bench": "torture-fleet-peers", "mechanism": mode.removesuffix("-fleet"),
                "fleet": fleet, "racing": racing,
                "no_higher": all(fleet[k]["errors_per_100"] <= racing.get(k, {}).get(
                    "errors_per_100", float("inf")) for k in fleet)}), flush=True)
            del peer_errors[mode]


if __name__ == "__main__":
    sys.exit(main())
