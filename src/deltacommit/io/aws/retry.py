"""The one retry and backoff policy for requests to S3 and DynamoDB.

Every retry loop of the AWS layers (the S3 store's requests, writes under a DynamoCommit lease,
the Spark protocol's DynamoDB requests) waits by this policy: exponential backoff with "full
jitter" (each delay drawn uniformly from zero up to a bound that doubles from ``base_delay`` and
stops at ``max_delay``), so writers that failed together do not retry together.  The loops differ
only in when they give up, which the policy states as parameters: after ``max_attempts``
requests, after ``max_elapsed`` seconds, or (neither given) when the caller's own deadline says
so, as a lease does.  Time and randomness come from the caller's injectable clock and source, so
tests drive retries without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltacommit.runtime.clock import RandomSource

#: Doublings of the delay bound stop here, far beyond any cap, so that the bound never
#: overflows however long a loop retries.
_MAX_DOUBLINGS = 16


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried.

    ``max_attempts`` counts the first request (None: no limit of attempts); ``max_elapsed`` is the
    time in seconds after the first request past which no retry starts (None: no limit of time).
    """

    max_attempts: int | None = 6
    base_delay: float = 0.05
    max_delay: float = 2.0
    max_elapsed: float | None = None

    def delay(self, retry: int, random: RandomSource) -> float:
        """Sleep before retry number ``retry`` (1 for the first retry)."""
        bound = min(self.max_delay, self.base_delay * 2 ** min(retry - 1, _MAX_DOUBLINGS))
        return random.uniform(0.0, bound)

    def exhausted(self, attempts: int, elapsed: float = 0.0) -> bool:
        """Whether to give up after ``attempts`` requests made over ``elapsed`` seconds."""
        return ((self.max_attempts is not None and attempts >= self.max_attempts)
                or (self.max_elapsed is not None and elapsed >= self.max_elapsed))

    def pause(self, retry: int, random: RandomSource, elapsed: float = 0.0) -> float:
        """The sleep before retry ``retry``, shortened so that it ends within ``max_elapsed``."""
        delay = self.delay(retry, random)
        if self.max_elapsed is None:
            return delay
        return min(delay, max(0.0, self.max_elapsed - elapsed))


#: S3 requests of the S3 store: six attempts, delays up to 2 s.
S3_REQUESTS = RetryPolicy(max_attempts=6, base_delay=0.05, max_delay=2.0)
#: Writes under a DynamoCommit lease: as many attempts as the lease leaves time for (the lease,
#: not the policy, ends them), delays up to 1 s.
LEASED_WRITES = RetryPolicy(max_attempts=None, base_delay=0.05, max_delay=1.0)


def dynamodb_throttling(max_elapsed: float) -> RetryPolicy:
    """DynamoDB throttling on the Spark protocol's table: retried until ``max_elapsed`` seconds
    (``DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME``) have passed, delays up to 5 s.  A throttled
    request was not executed, so retrying a conditional write is safe."""
    return RetryPolicy(max_attempts=None, base_delay=0.05, max_delay=5.0, max_elapsed=max_elapsed)
