"""How hard a commit tries, and what it reports back."""

from __future__ import annotations

from dataclasses import dataclass

from deltacommit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class CommitPolicy:
    """How hard a commit tries.  The attempt limit is generous on purpose: a writer that loses
    races to innocent appends should keep going, as Spark's does, not give up after 15 tries."""

    max_attempts: int = 10_000
    backoff_base: float = 0.002
    backoff_cap: float = 0.5
    #: Whether the processes of this host take turns to claim a version instead of racing
    #: (``engine.host_turn``; also off with ``DELTACOMMIT_HOST_TURNS=off``).
    host_turns: bool = True
    #: Seconds a writer waits for a turn that is not handed on (a holder that hangs), and for
    #: the word of the writer it took the turn from, before going on without them.
    turn_patience: float = 2.0
    #: Seconds after which a snapshot last known to be the newest version has its newest
    #: commit read back before a commit is built on it (``TableLog.recheck_newest``): a
    #: table rolled back meanwhile (its newest commit files deleted) is then read afresh
    #: instead of getting a commit after a gap.  A writer committing more often than this
    #: pays nothing; a long operation (UPDATE, MERGE, a rewrite) pays one read.
    recheck_after: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise InvalidArgumentError(
                f"CommitPolicy.max_attempts must be a positive integer, got {self.max_attempts!r}")
        if not (0 <= self.backoff_base <= self.backoff_cap):
            raise InvalidArgumentError(
                "CommitPolicy needs 0 <= backoff_base <= backoff_cap, got "
                f"backoff_base={self.backoff_base!r}, backoff_cap={self.backoff_cap!r}")
        for name in ("turn_patience", "recheck_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidArgumentError(
                    f"CommitPolicy.{name} must be a number of seconds >= 0, got {value!r}")

    def backoff(self, losses: int, draw: float) -> float:
        """Full jitter: ``draw`` in [0, 1) scales the capped exponential ceiling, so that many
        writers spread out instead of colliding again in lockstep."""
        ceiling = min(self.backoff_cap, self.backoff_base * float(2 ** min(losses - 1, 20)))
        return ceiling * draw


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    attempts: int
    skipped: bool = False
    #: Concurrent versions this transaction was checked against and rebased over.
    winners: tuple[int, ...] = ()
    #: Spark's ``commitInfo.txnId`` of this transaction (the same on every attempt).
    txn_id: str = ""
    #: SHA-256 of the commit file as written, so a history checker can prove it was not replaced.
    digest: str = ""
    #: The snapshot version the transaction read (``commitInfo.readVersion``).
    read_version: int = -1
    #: How many transactions the version holds (more than one under group commit, see
    #: ``coalesce.py``; ``digest`` is then the digest of the shared commit file).
    group_size: int = 1
