"""Network faults between a writer and S3 or DynamoDB, then recovery and the check.

The victim writer reaches moto through the fault proxy, which fails the request that makes
its next commit: S3 5xx and throttling, a connection reset before the request arrives or
after it was applied (the write happened but the answer was lost), a request held until the
client's read timeout (before or after it was applied); DynamoDB throttling
(``ProvisionedThroughputExceededException``), 5xx, resets and timeouts of the ``PutItem``
that claims a version (Spark's protocol) or takes a lease (DynamoCommit), and of the
``UpdateItem`` that marks an entry complete.  Whatever the layer (the store's retries, the
coordinator's backoff, or the writer retrying its transaction) the acknowledged writes must
each be in the table exactly once.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from deltacommit.testing import Fault, FaultInjectingProxy

from .conftest import MakeRig
from .harness import SHORT_TIMEOUT, History

COMMIT = "*/_delta_log/0*.json"
TEMP = "*/_delta_log/.tmp/*"

S3_FAULTS = {
    "s3-503-slowdown": Fault(status=503, code="SlowDown", method="PUT", times=2),
    "s3-500-applied": Fault(status=500, code="InternalError", method="PUT", forward=True),
    "s3-reset": Fault(drop=True, method="PUT"),
    "s3-reset-applied": Fault(drop=True, method="PUT", forward=True),
    "s3-timeout-applied": Fault(method="PUT", forward=True),  # held: see below
    "s3-timeout": Fault(method="PUT"),  # held, never sent on
}
DYNAMODB_FAULTS = {
    "throttled": Fault(status=400, code="ProvisionedThroughputExceededException", times=2),
    "500": Fault(status=500, code="InternalServerError"),
    "reset-applied": Fault(drop=True, forward=True),
    "timeout-applied": Fault(forward=True),  # held: see below
    "timeout": Fault(),  # held, never sent on
    # The same two with the SDK's own retries: the retried request meets its own first attempt.
    "reset-applied-sdk-retry": Fault(drop=True, forward=True),
    "timeout-applied-sdk-retry": Fault(forward=True),
}
#: Which S3 object and which DynamoDB operation make a commit, per log store kind.
S3_TARGETS = {"s3": {"commit": COMMIT}, "dynamodb": {"temp": TEMP, "copy": COMMIT},
              "dynamo-commit": {"commit": COMMIT}}
DYNAMODB_TARGETS = {"dynamodb": ("PutItem", "UpdateItem"), "dynamo-commit": ("PutItem",)}

#: A request that never arrived is a plain retry for a store: these run where the retrying
#: code differs (the S3 store's, DynamoCommit's writer under a lease, the DynamoDB log store's).
ONLY = {"s3-timeout": {("s3", "commit")}, "s3-reset": {("s3", "commit"), ("dynamo-commit", "commit")},
        "ddb-timeout": {("dynamodb", "PutItem")}}


def _wanted(kind: str, name: str, target: str) -> bool:
    return name not in ONLY or (kind, target) in ONLY[name]


CASES = [pytest.param(kind, name, target, id=f"{kind}-{target}-{name}")
         for kind, targets in S3_TARGETS.items() for target in targets for name in S3_FAULTS
         if _wanted(kind, name, target)]
CASES += [pytest.param(kind, f"ddb-{name}", op, id=f"{kind}-{op}-ddb-{name}")
          for kind, ops in DYNAMODB_TARGETS.items() for op in ops for name in DYNAMODB_FAULTS
          if _wanted(kind, f"ddb-{name}", op)]


@pytest.mark.parametrize(("kind", "fault", "target"), CASES)
def test_network_fault_then_recovery_keeps_every_acknowledged_write(
        make_rig: MakeRig, proxy: FaultInjectingProxy, kind: str, fault: str, target: str) -> None:
    rig = make_rig(kind)
    history = History(rig)
    timed_out = "timeout" in fault
    on_dynamodb = fault.startswith("ddb-")
    timeout = SHORT_TIMEOUT if timed_out else None
    if on_dynamodb:
        victim = history.writer("victim", dynamodb_endpoint=proxy.endpoint, timeout=timeout,
                                dynamodb_attempts=3 if fault.endswith("sdk-retry") else 1)
        armed = replace(DYNAMODB_FAULTS[fault[4:]], target=target)
    else:
        # Under DynamoCommit the store writes to S3 itself (its own retries and read-back).
        victim = history.writer("victim", s3_endpoint=proxy.endpoint, timeout=timeout,
                                faulty=kind != "dynamo-commit")
        armed = replace(S3_FAULTS[fault], path=S3_TARGETS[kind][target])
    other = history.writer("other")
    history.append(victim)

    held = threading.Event()
    if timed_out:
        armed = replace(armed, hang=held)
    times = armed.times
    proxy.inject(armed)
    try:
        history.append(victim)
    finally:
        held.set()
    history.append(other)
    history.append(history.writer("late"))
    if fault.endswith("sdk-retry"):
        # The SDK's retry met the first attempt's entry or lease, which the code recognised as
        # its own: the writer never saw an error.
        assert history.retries == 0
    assert proxy.pending_faults == 0
    assert sum(r.injected for r in proxy.records) == times
    history.check()
