"""Fault injection for tests: make a store or a log-store step fail, hang or crash on purpose.

A commit protocol is only as good as what happens when it is interrupted: a request that
fails, an answer that never arrives, a writer that dies between two steps.  Real faults are
rare and unrepeatable, so tests arm them here, at a chosen operation and path of an object
store (``FaultyStore``) or at a named step of a log store's protocol (``StepFaults``, passed
as the log store's ``hook``), with one vocabulary for both:

``fail``
    Raise the layer's own error type (``StorageError`` for a store, ``LogStoreError`` for a
    protocol step) naming the operation and the path, as a real failure would.  With
    ``after=True`` the operation is carried out first: the caller is told it failed although
    it succeeded, which is the ambiguous outcome a lost answer leaves.  (An ``after`` rule
    fires only on an operation that succeeded; one that failed by itself leaves it armed.)
``hang``
    Block at that point until the test calls ``rule.release()``.  ``rule.wait_reached()``
    returns once a writer is blocked there, so a test orders threads by events, never by
    sleeping; other writers carry on meanwhile.
``crash``
    Raise ``SimulatedCrash``, a ``BaseException``: it passes through every ``except
    Exception`` of the library, so nothing after the point runs in that writer, as if its
    process had died there.  The writer object must be thrown away afterwards.

Every rule has a ``times`` budget, and every fault that fired is recorded in ``injections``,
so a test can prove that the fault it meant to inject actually happened.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from deltacommit.errors import LogStoreError, StorageError
from deltacommit.io.storage.base import ObjectMeta, ObjectStore
from deltacommit.io.storage.forwarding import ForwardingStore

__all__ = ["OPERATIONS", "FaultPlan", "FaultRule", "FaultyStore", "Injection", "SimulatedCrash",
           "StepFaults"]

T = TypeVar("T")

FaultAction = Literal["fail", "hang", "crash"]
Phase = Literal["before", "after"]

#: Store operations a rule can name (``*`` matches any of them).
OPERATIONS = ("get", "head", "put", "put_if_absent", "put_if_match", "copy", "copy_if_absent",
              "delete", "list", "make_durable")

#: How long a hang waits for ``release`` before giving up, so a test that forgets to release
#: fails instead of blocking the run.
DEFAULT_HANG_LIMIT_SECONDS = 60.0

ErrorFactory = Callable[[str, str, str], BaseException]


class SimulatedCrash(BaseException):
    """The writer process died at this point.

    A ``BaseException``, so the library's ``except Exception`` handlers (which rightly log and
    carry on after, say, a failed checkpoint) do not absorb it: nothing after the point runs.
    """

    def __init__(self, operation: str, path: str, phase: str) -> None:
        self.operation = operation
        self.path = path
        self.phase = phase
        super().__init__(f"simulated crash {phase} {operation} {path}")


@dataclass(frozen=True, slots=True)
class Injection:
    """One fault that fired: what, where, and whether before or after the operation ran."""

    action: str
    operation: str
    path: str
    phase: str


@dataclass(eq=False)
class FaultRule:
    """Which calls a fault hits (operation and fnmatch path pattern), what it does, how often."""

    action: FaultAction
    operation: str = "*"
    pattern: str = "*"
    phase: Phase = "before"
    times: int = 1
    #: Builds the exception of a ``fail``: ``(operation, path, detail) -> exception``.
    error: ErrorFactory | None = None
    hang_limit: float = DEFAULT_HANG_LIMIT_SECONDS
    fired: int = 0
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.action not in ("fail", "hang", "crash"):
            raise ValueError(f"fault action must be fail, hang or crash, got {self.action!r}")
        if self.phase not in ("before", "after"):
            raise ValueError(f"fault phase must be before or after, got {self.phase!r}")
        if self.times < 0:
            raise ValueError(f"fault times must not be negative, got {self.times}")

    def matches(self, operation: str, path: str) -> bool:
        return (self.operation in ("*", operation)) and fnmatch.fnmatchcase(path, self.pattern)

    def release(self) -> None:
        """Let every writer blocked (or about to block) on this hang continue."""
        self.released.set()

    def wait_reached(self, timeout: float = DEFAULT_HANG_LIMIT_SECONDS) -> None:
        """Block until a writer has hit this rule (AssertionError after ``timeout``)."""
        if not self.reached.wait(timeout):
            raise AssertionError(f"no writer reached the {self.action} fault on {self.operation} "
                                 f"{self.pattern} within {timeout:g} s")


class FaultPlan:
    """A list of rules and a record of what fired; shared by the stores and hooks using it."""

    def __init__(self, default_error: ErrorFactory | None = None) -> None:
        self.rules: list[FaultRule] = []
        self.injections: list[Injection] = []
        self._default_error = default_error
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ arming

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def fail(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, error: ErrorFactory | None = None) -> FaultRule:
        return self.add(FaultRule("fail", operation, pattern, "after" if after else "before",
                                  times, error))

    def hang(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, limit: float = DEFAULT_HANG_LIMIT_SECONDS) -> FaultRule:
        return self.add(FaultRule("hang", operation, pattern, "after" if after else "before",
                                  times, hang_limit=limit))

    def crash(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
              times: int = 1) -> FaultRule:
        return self.add(FaultRule("crash", operation, pattern, "after" if after else "before",
                                  times))

    def clear(self) -> None:
        """Disarm every rule (releasing hangs) and forget what fired."""
        with self._lock:
            for rule in self.rules:
                rule.release()
            self.rules.clear()
            self.injections.clear()

    def count(self, action: str | None = None, operation: str | None = None) -> int:
        """How many faults fired, optionally of one action and/or operation."""
        with self._lock:
            return sum(1 for i in self.injections
                       if (action is None or i.action == action)
                       and (operation is None or i.operation == operation))

    # ------------------------------------------------------------------ firing

    def _take(self, operation: str, path: str) -> FaultRule | None:
        with self._lock:
            for rule in self.rules:
                if rule.times > 0 and rule.matches(operation, path):
                    rule.times -= 1
                    rule.fired += 1
                    return rule
        return None

    def _fire(self, rule: FaultRule, operation: str, path: str, phase: str,
              fallback: ErrorFactory | None = None) -> None:
        with self._lock:
            self.injections.append(Injection(rule.action, operation, path, phase))
        if rule.action == "crash":
            raise SimulatedCrash(operation, path, phase)
        if rule.action == "hang":
            rule.reached.set()
            if not rule.released.wait(rule.hang_limit):
                raise AssertionError(f"hang {phase} {operation} {path} was not released within "
                                     f"{rule.hang_limit:g} s")
            return
        factory = rule.error or self._default_error or fallback or _storage_error
        raise factory(operation, path, f"injected fault ({phase} the operation)")

    def run(self, operation: str, path: str, call: Callable[[], T], *,
            error: ErrorFactory | None = None) -> T:
        """Run ``call`` (the real operation) under the first rule matching, if any.

        A ``fail`` raises the rule's error, else the plan's, else ``error``, else a
        ``StorageError``."""
        rule = self._take(operation, path)
        if rule is None:
            return call()
        if rule.phase == "before":
            self._fire(rule, operation, path, "before", error)
            return call()
        try:
            result = call()
        except BaseException:
            # The operation itself failed (say, the object existed): nothing succeeded for the
            # fault to hide, so the rule stays armed for the next matching call.
            with self._lock:
                rule.times += 1
                rule.fired -= 1
            raise
        self._fire(rule, operation, path, "after", error)
        return result


class FaultyStore(ForwardingStore):
    """Any object store, with faults armed by operation and path (relative to the store root).

    Every operation passes through ``around``, which applies the plan's rules.  Children opened
    with ``child`` share the plan and match on paths relative to this store's root, so one rule
    covers a table however its layers open sub-locations.
    """

    def __init__(self, inner: ObjectStore, plan: FaultPlan | None = None, *,
                 prefix: str = "") -> None:
        super().__init__(inner)
        self.plan = plan if plan is not None else FaultPlan()
        self._prefix = prefix.strip("/")

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, {len(self.plan.rules)} rules)"

    def around(self, operation: str, path: str, call: Callable[[], T]) -> T:
        def error(op: str, _matched: str, detail: str) -> BaseException:
            return _storage_error(op, f"{self.uri}/{path}", detail)

        return self.plan.run(operation, self._rel(path), call, error=error)

    # Arming, for convenience on the store itself.
    def fail(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, error: ErrorFactory | None = None) -> FaultRule:
        return self.plan.fail(operation, pattern, after=after, times=times, error=error)

    def hang(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, limit: float = DEFAULT_HANG_LIMIT_SECONDS) -> FaultRule:
        return self.plan.hang(operation, pattern, after=after, times=times, limit=limit)

    def crash(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
              times: int = 1) -> FaultRule:
        return self.plan.crash(operation, pattern, after=after, times=times)

    @property
    def injections(self) -> list[Injection]:
        return self.plan.injections

    def _rel(self, path: str) -> str:
        return f"{self._prefix}/{path}" if self._prefix else path

    # ------------------------------------------------------------------ operations that differ

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        # Listed eagerly, so a fault after the listing fires before the caller sees any of it.
        return iter(self.around("list", prefix, lambda: list(self.inner.list(prefix, start_after))))

    def exists(self, path: str) -> bool:
        # Through ``head``, so a rule on head covers existence checks too.
        return ObjectStore.exists(self, path)

    def local_path(self, path: str) -> str | None:
        # None: reads then go through ``get`` (and its rules) instead of around the store.
        return None

    def child(self, prefix: str) -> FaultyStore:
        return FaultyStore(self.inner.child(prefix), self.plan, prefix=self._rel(prefix))


class StepFaults(FaultPlan):
    """Faults at named steps of a log store's protocol; pass the object as its ``hook``.

    ``hook(step, version)`` is how log stores announce the points between their steps
    (``logstore.s3_dynamodb.log_store.STEPS``, ``logstore.dynamo_commit.log_store.STEPS``);
    ``DynamoCommitStore`` calls ``hook(step, path)`` for every guarded object.  A rule's
    operation is the step name and its pattern matches the version number or the path (``"*"``
    for any).  A step is a point between two operations, so every rule here fires at it
    (``after`` is not used).
    """

    def __init__(self) -> None:
        super().__init__(_step_error)

    def fail(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, error: ErrorFactory | None = None) -> FaultRule:
        return super().fail(operation, pattern, times=times, error=error)

    def hang(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
             times: int = 1, limit: float = DEFAULT_HANG_LIMIT_SECONDS) -> FaultRule:
        return super().hang(operation, pattern, times=times, limit=limit)

    def crash(self, operation: str = "*", pattern: str = "*", *, after: bool = False,
              times: int = 1) -> FaultRule:
        return super().crash(operation, pattern, times=times)

    def __call__(self, step: str, where: int | str) -> None:
        """The hook: ``where`` is a version (log stores) or a path (``DynamoCommitStore``)."""
        rule = self._take(step, str(where))
        if rule is not None:
            self._fire(rule, step, str(where), "at")


def _storage_error(operation: str, path: str, detail: str) -> BaseException:
    return StorageError(operation.replace("_", "-"), path, detail)


def _step_error(step: str, version: str, detail: str) -> BaseException:
    return LogStoreError(f"step {step} of the commit of version {version} failed: {detail}")
