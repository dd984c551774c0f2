"""The tunables of fleet-wide group commit, and when a table object takes part."""

from __future__ import annotations

from dataclasses import dataclass

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.table_config.config import TableConfig


@dataclass(frozen=True, slots=True)
class FleetPolicy:
    """How a writer takes part in fleet-wide group commit (``engine.group.fleet``).

    The defaults are what the protocol needs to be safe and cheap; the benchmarks tune them.
    """

    #: A published transaction may land at most this many versions after the version its
    #: owner knew when it published (its version bound B); a live owner renews it past that.
    bound_versions: int = 32
    #: Seconds after publishing (or renewing) after which includers refuse the transaction
    #: (a restriction only); the owner renews it while it waits.
    deadline_seconds: float = 30.0
    #: Seconds past that deadline after which any writer listing the folder deletes it.
    expiry_margin_seconds: float = 60.0
    #: Seconds between two looks (a GET of the version) while waiting for a round's version
    #: (after the first, which goes out shortly before the version is due).
    poll_interval: float = 0.005
    #: Seconds a round's winner lingers before listing, for more transactions to arrive.
    linger: float = 0.0
    #: Where the version before a round carried several transactions (hosts appending one
    #: after another), its winner lists no sooner than this many round trips (as the process
    #: measures them) after that version landed: its members' next transactions, their data
    #: stored and published meanwhile, join this round instead of forming the next.  0: no.
    linger_round_trips: float = 3.0
    #: Most seconds that lingering adds to a round.
    max_linger: float = 0.25
    #: Most transactions one version carries.
    max_members: int = 1000
    #: An includer checks a transaction only against this many versions after its snapshot;
    #: one published further back is left to its owner.
    max_back: int = 64
    #: Rounds a writer waits for others to carry its transaction before it commits it
    #: itself (a round's winner that never includes it: another operation, a full version).
    max_rounds: int = 64

    def __post_init__(self) -> None:
        for name in ("bound_versions", "max_members", "max_back", "max_rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(
                    f"FleetPolicy.{name} must be a positive integer, got {v!r}")
        for name in ("deadline_seconds", "expiry_margin_seconds", "poll_interval", "linger",
                     "linger_round_trips", "max_linger"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 3600:
                raise InvalidArgumentError(
                    f"FleetPolicy.{name} must be a number of seconds from 0 to 3600, got {v!r}")
        if self.poll_interval <= 0 or self.deadline_seconds <= 0:
            raise InvalidArgumentError(
                "FleetPolicy.poll_interval and deadline_seconds must be above 0")


def fleet_policy(config: TableConfig, requested: bool | FleetPolicy = False
                 ) -> FleetPolicy | None:
    """How this table object's transactions take part in the fleet; None if they do not.
    ``requested``: the object's ``GroupCommitPolicy.fleet``; the table's property
    ``deltacommit.groupCommit.fleet`` makes every writer of the table join."""
    if isinstance(requested, FleetPolicy):
        return requested
    if requested or config.group_commit_fleet:
        return FleetPolicy()
    return None
