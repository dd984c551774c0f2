"""The benchmarks' rig's own ceiling: requests per second single-threaded moto serves.

bench/fleet.py's writers share one single-threaded moto server (through
``bench/latency_proxy.py``) on a small machine, so no contender can exceed moto's requests
per second divided by its requests per transaction.  This measures that ceiling: P client
processes (default 8, as the fleet benchmark's hosts) send S3 requests of one kind as fast as
they can for a few seconds each, through the proxy at 0 ms added latency (``--direct``: to
moto itself), with the library's own S3 client (``deltacommit.io.storage.s3.S3Store``: the
same signing, retries and connection handling as a commit's requests).

Per kind, one JSON line (``"bench": "rig-ceiling"``): ``requests_per_s`` (all processes),
``moto_cpu_per_request_ms`` (moto's process CPU over the requests served), the mean round
trip, and ``client_cpu_per_request_ms`` (the clients' CPU per request).  Kinds: ``GET``
(a 1 KiB object), ``GET-404`` (a missing one: a version poll), ``PUT`` (1 KiB),
``PUT-if-absent-412`` (a lost round key or claim), ``LIST`` (a prefix holding 8 objects) and
``mix`` (the fleet's measured mix per transaction).

    .venv/bin/python bench/rig_ceiling.py
    .venv/bin/python bench/rig_ceiling.py --procs 8 --seconds 5 --kinds GET,mix
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: The fleet's requests per transaction by kind (8 hosts, 15 ms, bench/fleet.py), as a cycle
#: of kinds: data PUT, record PUT, round key (mostly lost), version polls (mostly 404), the
#: round's LIST, record GETs, the claim.
MIX = ["PUT", "PUT", "PUT-if-absent-412", "GET-404", "GET-404", "GET", "GET", "GET",
       "LIST", "PUT-if-absent"]


def _one(store: Any, kind: str, i: int, pid: int) -> None:
    from deltacommit.errors import ObjectExistsError, ObjectNotFoundError
    from deltacommit.io.storage.base import PutMode

    body = b"x" * 1024
    if kind == "GET":
        store.get(f"objs/{i % 8}")
    elif kind == "GET-404":
        with contextlib.suppress(ObjectNotFoundError):
            store.get(f"missing/{pid}-{i}")
    elif kind == "PUT":
        store.put(f"puts/{pid}-{i % 64}", body)
    elif kind == "PUT-if-absent-412":
        with contextlib.suppress(ObjectExistsError):
            store.put("objs/0", body, mode=PutMode.CREATE)
    elif kind == "PUT-if-absent":
        store.put(f"created/{pid}-{i}-{time.monotonic_ns()}", body, mode=PutMode.CREATE)
    elif kind == "LIST":
        list(store.list("objs/"))
    else:
        raise ValueError(kind)


def _client(endpoint: str, bucket: str, kind: str, seconds: float, start: Any,
            out: Any, pid: int) -> None:
    from deltacommit.io.storage.s3 import S3Store
    from deltacommit.testing import s3_storage_options

    store = S3Store.from_uri(f"s3://{bucket}/rig", s3_storage_options(endpoint))
    kinds = MIX if kind == "mix" else [kind]
    _one(store, "GET", 0, pid)  # a connection and credentials before the clock starts
    start.wait()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    n = 0
    while time.perf_counter() - t0 < seconds:
        _one(store, kinds[n % len(kinds)], n, pid)
        n += 1
    out.put((n, time.perf_counter() - t0, time.process_time() - cpu0))


def measure(endpoint: str, bucket: str, kind: str, procs: int, seconds: float,
            moto: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    ps = [ctx.Process(target=_client, args=(endpoint, bucket, kind, seconds, start, out, i))
          for i in range(procs)]
    for p in ps:
        p.start()
    time.sleep(3.0)  # the clients import and connect (not measured)
    cpu0 = moto.cpu_seconds()
    start.set()
    results = [out.get() for _ in ps]
    cpu1 = moto.cpu_seconds()
    for p in ps:
        p.join()
    n = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    client_cpu = sum(r[2] for r in results)
    return {"bench": "rig-ceiling", "kind": kind, "procs": procs, "requests": n,
            "seconds": round(wall, 2), "requests_per_s": round(n / wall, 1),
            "mean_round_trip_ms": round(procs * wall * 1000 / n, 2),
            "moto_cpu_per_request_ms": round((cpu1 - cpu0) * 1000 / n, 3)
            if cpu0 is not None and cpu1 is not None else None,
            "moto_busy": round((cpu1 - cpu0) / wall, 2)
            if cpu0 is not None and cpu1 is not None else None,
            "client_cpu_per_request_ms": round(client_cpu * 1000 / n, 3),
            "load_average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--kinds", default="GET,GET-404,PUT,PUT-if-absent-412,LIST,mix")
    ap.add_argument("--direct", action="store_true", help="to moto itself, not the proxy")
    args = ap.parse_args()

    import boto3
    from latency_proxy import LatencyProxy

    from deltacommit.testing import TEST_AWS_ENV, MotoServer, apply_test_aws_environment

    apply_test_aws_environment()
    os.environ.update({**TEST_AWS_ENV, "AWS_ALLOW_HTTP": "true"})
    with MotoServer() as moto, LatencyProxy(moto.endpoint, 0.0) as proxy:
        bucket = "rig-ceiling"
        s3 = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        for i in range(8):
            s3.put_object(Bucket=bucket, Key=f"rig/objs/{i}", Body=b"x" * 1024)
        endpoint = moto.endpoint if args.direct else proxy.endpoint
        for kind in args.kinds.split(","):
            line = measure(endpoint, bucket, kind, args.procs, args.seconds, moto)
            line["through"] = "moto" if args.direct else "bench/latency_proxy.py at 0 ms"
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
