"""Fleet-wide group commit: many hosts, one Delta version per round, no coordinator.

Opted into per table with ``deltacommit.groupCommit.fleet=true`` (every deltacommit writer of
the table joins: ``dc.write``, ``dc.append``, the ``Appender``, Spark's writers), or for one
table object with ``GroupCommitPolicy(fleet=True)``.  Writers publish their staged
transactions on the table's own storage (``records``; the codec is
``protocol.fleet.record``), the first to create a round's key commits every one it can check
(``round``, ``include``), and what is published is removed once it lands or expires
(``cleanup``).  Nothing but the table's storage (and, in the DynamoDB mechanism, its DynamoDB
table) is involved, and the log stays plain Delta.
"""

from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.group.fleet.round import commit

__all__ = ["FleetPolicy", "commit"]
