"""AWS failures, read one way by every AWS layer: codes, statuses, messages and kinds, from
botocore's clients and the light ones alike.

What a failure means decides what a commit protocol may do next: a 412 is an answer, throttling
is retried, and a request whose answer was lost may have taken effect, so a conditional write
retried after it must check whether its own first attempt won.  These helpers are that reading,
shared by the S3 store, the DynamoCommit leases and the Spark protocol's log store.

Importing this module does not import botocore.  The light client's failures
(``deltacommit.io.aws.light.errors``) carry botocore's ``response`` shape, so the same readers
serve both.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from deltacommit.io.aws.light import errors as light

__all__ = [
    "CONDITION_FAILED",
    "DYNAMODB_CREDENTIALS",
    "DYNAMODB_DENIED",
    "DYNAMODB_THROTTLED",
    "S3_CONFLICT",
    "S3_CREDENTIALS",
    "S3_DENIED",
    "S3_NOT_FOUND",
    "S3_PRECONDITION",
    "S3_THROTTLED",
    "S3_TRANSIENT",
    "TABLE_EXISTS",
    "TABLE_MISSING",
    "answer_lost",
    "client_errors",
    "describe_error",
    "error_code",
    "error_message",
    "error_response",
    "error_status",
    "no_credentials",
    "not_sent",
    "retry_attempts",
    "s3_maybe_applied",
    "s3_retryable",
    "transport_errors",
]

# --------------------------------------------------------------------------- kinds of failure
#
# Each kind is a tuple of exception classes for an ``except`` clause, evaluated when an
# exception reaches it: the light client's classes always, botocore's once botocore is loaded
# (only a botocore client can raise them, and making one loads botocore), so a process served
# by the light client never imports botocore.


def _botocore() -> Any:
    return sys.modules.get("botocore.exceptions")


def client_errors() -> tuple[type[Exception], ...]:
    """A service's error answer (``e.response`` holds its code, message and status)."""
    bc = _botocore()
    return (light.ClientError,) if bc is None else (light.ClientError, bc.ClientError)


def not_sent() -> tuple[type[Exception], ...]:
    """The request never reached the server: retrying cannot duplicate it.  Test for these
    before ``answer_lost``: botocore derives them from its ``ConnectionError``."""
    bc = _botocore()
    mine = (light.EndpointConnectionError, light.ConnectTimeoutError)
    return mine if bc is None else (*mine, bc.EndpointConnectionError, bc.ConnectTimeoutError)


def answer_lost() -> tuple[type[Exception], ...]:
    """Closed, reset or timed out after sending: the request may have taken effect."""
    bc = _botocore()
    mine = (light.ConnectionLostError,)
    return mine if bc is None else (*mine, bc.HTTPClientError, bc.IncompleteReadError,
                                    bc.ConnectionError)


def no_credentials() -> tuple[type[Exception], ...]:
    """No credentials could be found at all (as opposed to credentials the service rejected);
    the light client is only used with static keys, so only botocore's."""
    bc = _botocore()
    return () if bc is None else (bc.NoCredentialsError, bc.PartialCredentialsError)


def transport_errors() -> tuple[type[Exception], ...]:
    """Every failure that is not a service's answer (botocore's ``BotoCoreError``)."""
    bc = _botocore()
    return (light.LightClientError,) if bc is None else (light.LightClientError, bc.BotoCoreError)


# --------------------------------------------------------------------------- S3 error codes

S3_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
S3_PRECONDITION = frozenset({"PreconditionFailed", "412", "NotModified", "304"})
#: Another conditional write to the key is in flight; S3 asks callers to retry.
S3_CONFLICT = frozenset({"ConditionalRequestConflict", "OperationAborted"})
S3_THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                          "TooManyRequests", "TooManyRequestsException", "RequestThrottled"})
S3_TRANSIENT = frozenset({"InternalError", "ServiceUnavailable", "RequestTimeout",
                          "RequestTimeoutException", "BadGateway", "GatewayTimeout"})
S3_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                            "ExpiredToken", "InvalidClientTokenId", "TokenRefreshRequired",
                            "AuthorizationHeaderMalformed"})
S3_DENIED = frozenset({"AccessDenied", "AllAccessDisabled", "403", "Forbidden"})

# --------------------------------------------------------------------------- DynamoDB error codes

CONDITION_FAILED = "ConditionalCheckFailedException"
TABLE_MISSING = "ResourceNotFoundException"
TABLE_EXISTS = "ResourceInUseException"
DYNAMODB_THROTTLED = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException",
                                "RequestLimitExceeded", "TooManyRequestsException", "Throttling"})
DYNAMODB_CREDENTIALS = frozenset({
    "UnrecognizedClientException", "InvalidSignatureException", "InvalidClientTokenId",
    "ExpiredTokenException", "IncompleteSignatureException", "MissingAuthenticationTokenException",
    "SignatureDoesNotMatch", "InvalidAccessKeyId"})
DYNAMODB_DENIED = frozenset({"AccessDeniedException", "AccessDenied"})

#: Some DynamoDB emulators (moto) answer authentication failures with an XML body and HTTP 403,
#: which botocore's JSON parser reports as code "403" with the XML as the message.
_XML_CODE = re.compile(r"<Code>([^<]+)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")

# --------------------------------------------------------------------------- reading an error


def error_response(e: Exception) -> dict[str, Any]:
    """The ``response`` dict of a service's error answer (botocore's or the light client's)."""
    response = getattr(e, "response", None)
    return response if isinstance(response, dict) else {}


def error_code(e: Any) -> str:
    """The service's error code (``NoSuchKey``, ``ConditionalCheckFailedException``, ``412``),
    taken from an XML body a JSON protocol failed to parse where there is one."""
    error = e.response.get("Error", {})
    code = str(error.get("Code", ""))
    if code.isdigit():
        inner = _XML_CODE.search(str(error.get("Message", "")))
        if inner:
            return inner.group(1)
    return code


def error_status(e: Any) -> int:
    """The HTTP status of the answer (0 if unknown)."""
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def error_message(e: Any) -> str:
    """The service's message, taken from an XML body a JSON protocol failed to parse."""
    message = str(e.response.get("Error", {}).get("Message", ""))
    inner = _XML_MESSAGE.search(message)
    return inner.group(1) if inner else message


def describe_error(e: Any) -> str:
    """``Code (HTTP status): message``, for error messages."""
    message = error_message(e)
    text = f"{error_code(e) or 'error'} (HTTP {error_status(e)})"
    return f"{text}: {message}" if message else text


def retry_attempts(response: object) -> int:
    """How many times botocore retried a request itself (its ``RetryAttempts``), from a response
    or from a ClientError."""
    if isinstance(response, client_errors()):
        response = getattr(response, "response", None)
    if not isinstance(response, dict):
        return 0
    return int(response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)


# --------------------------------------------------------------------------- what an S3 failure means


def s3_retryable(e: Any, *, conditional: bool = False) -> bool:
    """Whether an S3 error is transient: throttling, 5xx, and for a conditional write the 409
    S3 answers while another conditional write to the key is in flight."""
    code, status = error_code(e), error_status(e)
    return (code in S3_THROTTLED or code in S3_TRANSIENT or status in (500, 502, 503, 504)
            or (conditional and (code in S3_CONFLICT or status == 409)))


def s3_maybe_applied(e: Any) -> bool:
    """Whether the request that failed so may still have been applied (a 5xx other than
    throttling, or a timeout): a conditional write retried after it must check whether its
    own first attempt won."""
    code, status = error_code(e), error_status(e)
    return (status >= 500 and code not in S3_THROTTLED) or code in S3_TRANSIENT
