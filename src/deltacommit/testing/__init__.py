"""Local servers, fault injection and helpers for tests, benchmarks and ``deltacommit stress``.

Kept inside the package (not under ``tests/``) because benchmarks and the stress command start
the same servers the tests do, and inject the same faults (``storage.faults``, re-exported).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from deltacommit.io.storage.faults import (
    FaultPlan,
    FaultRule,
    FaultyStore,
    Injection,
    SimulatedCrash,
    StepFaults,
)
from deltacommit.testing.proxy import Fault, FaultInjectingProxy, ProxyRecord
from deltacommit.testing.servers import (
    DELTALAKE_LATEST_INSTALL_HINT,
    DELTALAKE_LATEST_VERSION,
    DYNALITE_INSTALL_HINT,
    LOCALSTACK_VERSION,
    TEST_AWS_ENV,
    Dynalite,
    DynaliteNotInstalledError,
    LocalStackS3,
    LocalStackUnavailableError,
    MotoServer,
    S3Bucket,
    S3Implementation,
    ServerProcess,
    ServerStartError,
    apply_test_aws_environment,
    find_deltalake_latest,
    find_dynalite,
    find_localstack,
    find_python,
    localstack_unavailable,
    port_is_open,
    proc_stat,
    s3_storage_options,
    unique_name,
)

__all__ = [
    "DELTALAKE_LATEST_INSTALL_HINT",
    "DELTALAKE_LATEST_VERSION",
    "DYNALITE_INSTALL_HINT",
    "LOCALSTACK_VERSION",
    "TEST_AWS_ENV",
    "Dynalite",
    "DynaliteNotInstalledError",
    "Fault",
    "FaultInjectingProxy",
    "FaultPlan",
    "FaultRule",
    "FaultyStore",
    "Injection",
    "LocalStackS3",
    "LocalStackUnavailableError",
    "MotoServer",
    "ProxyRecord",
    "S3Bucket",
    "S3Implementation",
    "ServerProcess",
    "ServerStartError",
    "SimulatedCrash",
    "StepFaults",
    "apply_test_aws_environment",
    "find_deltalake_latest",
    "find_dynalite",
    "find_localstack",
    "find_python",
    "localstack_unavailable",
    "port_is_open",
    "proc_stat",
    "race",
    "s3_storage_options",
    "unique_name",
    "wait_table_active",
]


K = TypeVar("K")


def race(keys: Sequence[K], contenders: int, attempt: Callable[[int, K], bool]) -> dict[K, int]:
    """Winners per key when ``contenders`` threads try ``attempt`` on each key at once.

    A barrier releases all threads together on every key, so each key is a real race (no
    sleeps order anything).  ``attempt(thread_index, key)`` returns whether that thread won; an
    exception from any thread aborts the race and is raised here.
    """
    barrier = threading.Barrier(contenders)
    wins: dict[K, int] = dict.fromkeys(keys, 0)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            for key in keys:
                barrier.wait()
                if attempt(index, key):
                    with lock:
                        wins[key] += 1
        except threading.BrokenBarrierError:
            pass
        except BaseException as e:
            with lock:
                errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), name=f"racer-{i}") for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return wins


def wait_table_active(client: Any, table: str, timeout: float = 30.0) -> None:
    """Block until a DynamoDB table is ACTIVE (dynalite takes 50 ms, moto none)."""
    deadline = time.monotonic() + timeout
    while True:
        status = client.describe_table(TableName=table)["Table"]["TableStatus"]
        if status == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"DynamoDB table {table} still {status} after {timeout:.0f} s")
        time.sleep(0.02)
