"""How ``storage_options`` and the environment become an ``AwsConfig``.

Each option is looked up in ``storage_options`` (any letter case; an exact upper-case key wins
over other spellings), then in the environment, as delta-rs does; what each option means, and
where deltacommit deliberately differs from deltalake, is in ``deltacommit.io.aws.options``.  Every
value is checked here, so a mistake is reported with the option's name and where it came from
instead of surfacing later as a failed request.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws.config import AwsConfig, ConditionalPut
from deltacommit.io.aws.options import (
    ACCESS_KEY_ID,
    ACCESS_KEY_ID_DYNAMODB,
    ADDRESSING_STYLE,
    ALLOW_HTTP,
    CONDITIONAL_PUT,
    CONDITIONAL_PUT_ALIAS,
    DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME,
    DEFAULT_DYNAMO_REPAIR_GRACE_MS,
    DEFAULT_DYNAMO_TABLE_NAME,
    DEFAULT_DYNAMO_TTL_SECONDS,
    DEFAULT_REGION_ENV,
    DYNAMO_BILLING_MODE,
    DYNAMO_MAX_ELAPSED_REQUEST_TIME,
    DYNAMO_REPAIR_GRACE_MS,
    DYNAMO_TABLE_NAME,
    DYNAMO_TABLE_PATH_SCHEME,
    DYNAMO_TTL_SECONDS,
    ENDPOINT_URL,
    ENDPOINT_URL_DYNAMODB,
    IGNORED_OPTIONS,
    KNOWN_OPTIONS,
    LOCKING_PROVIDER,
    MIN_DYNAMO_TTL_SECONDS,
    OPTION_PREFIXES,
    PROFILE,
    REGION,
    REGION_DYNAMODB,
    S3_CONDITIONAL_WRITES,
    SECRET_ACCESS_KEY,
    SECRET_ACCESS_KEY_DYNAMODB,
    SESSION_TOKEN,
    SESSION_TOKEN_DYNAMODB,
    UNSUPPORTED_OPTIONS,
)


class _Options:
    """Lookup over storage options (any case) and then the environment."""

    def __init__(self, storage_options: Mapping[str, str], environ: Mapping[str, str]) -> None:
        self.opts: dict[str, str] = {}
        self.spelled: dict[str, str] = {}
        for key, value in storage_options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise StorageConfigError(
                    f"storage options are strings, as in deltalake; got {key!r}: {value!r}")
            upper = key.upper()
            if upper not in self.opts or key == upper:
                self.opts[upper] = value
                self.spelled[upper] = key
        self.environ = environ

    def from_options(self, name: str) -> str | None:
        value = self.opts.get(name)
        return None if value is None else value.strip()

    def get(self, name: str, *env_names: str) -> str | None:
        value = self.from_options(name)
        if value is not None:
            return value or None
        for env_name in (name, *env_names):
            env_value = self.environ.get(env_name)
            if env_value is not None and env_value.strip():
                return env_value.strip()
        return None

    def source(self, name: str) -> str:
        if name in self.opts:
            return f"storage option {self.spelled[name]}"
        return f"environment variable {name}"


def resolve_aws_config(storage_options: Mapping[str, str] | None,
                       *, environ: Mapping[str, str] | None = None,
                       extra_keys: Collection[str] = ()) -> AwsConfig:
    """The AWS settings the options and environment describe; StorageConfigError if unusable.

    ``extra_keys`` names further options (upper-case) that the caller reads itself, so they are
    not reported as unknown.
    """
    options = dict(storage_options or {})
    env = os.environ if environ is None else environ
    _check_keys(options, extra_keys)
    o = _Options(options, env)

    endpoint_url = _endpoint(o, ENDPOINT_URL)
    allow_http = _bool(o, ALLOW_HTTP, False)
    if endpoint_url and endpoint_url.lower().startswith("http://") and not allow_http:
        raise StorageConfigError(
            f"{ENDPOINT_URL} {endpoint_url!r} uses plain HTTP, which is refused unless "
            f"{ALLOW_HTTP}=true is set (as deltalake requires)")

    access_key_id = o.get(ACCESS_KEY_ID)
    secret = o.get(SECRET_ACCESS_KEY)
    # A token belongs to the key it was issued with: take it from where the key came from.
    if access_key_id is None:
        token = None
    elif ACCESS_KEY_ID in o.opts:
        token = o.from_options(SESSION_TOKEN) or None
    else:
        token = o.get(SESSION_TOKEN)
    _check_key_pair(o, ACCESS_KEY_ID, SECRET_ACCESS_KEY, access_key_id, secret)

    ddb_key = o.get(ACCESS_KEY_ID_DYNAMODB)
    ddb_secret = o.get(SECRET_ACCESS_KEY_DYNAMODB)
    _check_key_pair(o, ACCESS_KEY_ID_DYNAMODB, SECRET_ACCESS_KEY_DYNAMODB, ddb_key, ddb_secret)

    return AwsConfig(
        endpoint_url=endpoint_url,
        region=o.get(REGION, DEFAULT_REGION_ENV),
        access_key_id=access_key_id,
        secret_access_key=secret,
        session_token=token,
        profile=o.get(PROFILE),
        allow_http=allow_http,
        addressing_style=_choice(o, ADDRESSING_STYLE, ("path", "virtual", "auto"), None),  # type: ignore[arg-type]
        locking_provider=_choice(o, LOCKING_PROVIDER, ("dynamodb",), None),  # type: ignore[arg-type]
        dynamo_table_name=o.get(DYNAMO_TABLE_NAME) or DEFAULT_DYNAMO_TABLE_NAME,
        dynamo_billing_mode=_choice(o, DYNAMO_BILLING_MODE, ("PAY_PER_REQUEST", "PROVISIONED"),  # type: ignore[arg-type]
                                    "PAY_PER_REQUEST", upper=True),
        dynamo_max_elapsed_request_time=_number(o, DYNAMO_MAX_ELAPSED_REQUEST_TIME,
                                                DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME),
        dynamodb_endpoint_url=_endpoint(o, ENDPOINT_URL_DYNAMODB),
        dynamodb_region=o.get(REGION_DYNAMODB),
        dynamodb_access_key_id=ddb_key,
        dynamodb_secret_access_key=ddb_secret,
        dynamodb_session_token=o.get(SESSION_TOKEN_DYNAMODB) if ddb_key is not None else None,
        conditional_put=_conditional_put(o),
        dynamo_table_path_scheme=_choice(o, DYNAMO_TABLE_PATH_SCHEME, ("uri", "s3a", "s3"),  # type: ignore[arg-type]
                                         "uri"),
        dynamo_ttl_seconds=_ttl_seconds(o),
        dynamo_repair_grace_ms=int(_number(o, DYNAMO_REPAIR_GRACE_MS, DEFAULT_DYNAMO_REPAIR_GRACE_MS,
                                           integer=True, unit="milliseconds", allow_zero=True)),
        s3_conditional_writes=_bool(o, S3_CONDITIONAL_WRITES, True),
    )


def _check_keys(options: Mapping[str, str], extra_keys: Collection[str]) -> None:
    known = KNOWN_OPTIONS | IGNORED_OPTIONS | {k.upper() for k in extra_keys}
    for key in options:
        upper = key.upper()
        if upper in UNSUPPORTED_OPTIONS:
            raise StorageConfigError(
                f"storage option {key!r} is not supported by deltacommit: {UNSUPPORTED_OPTIONS[upper]}")
        if upper in known or not upper.startswith(OPTION_PREFIXES):
            continue
        import difflib  # for this error's suggestion only

        close = difflib.get_close_matches(upper, sorted(KNOWN_OPTIONS | {k.upper() for k in extra_keys}),
                                          n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise StorageConfigError(f"unknown storage option {key!r}{hint}")


def _check_key_pair(o: _Options, key_name: str, secret_name: str,
                    key: str | None, secret: str | None) -> None:
    if (key is None) != (secret is None):
        given, missing = (key_name, secret_name) if key is not None else (secret_name, key_name)
        raise StorageConfigError(f"{given} is set ({o.source(given)}) but {missing} is not: "
                                 "set both or neither")


def _endpoint(o: _Options, name: str) -> str | None:
    value = o.get(name)
    if value is None:
        return None
    if "://" not in value:
        raise StorageConfigError(
            f"{name} must be a URL such as http://127.0.0.1:5000 or https://s3.example.com; "
            f"got {value!r} ({o.source(name)})")
    return value.rstrip("/")


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bool(o: _Options, name: str, default: bool) -> bool:
    value = o.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise StorageConfigError(f"{name} must be true or false; got {value!r} ({o.source(name)})")


def _choice(o: _Options, name: str, allowed: tuple[str, ...], default: str | None,
            *, upper: bool = False) -> str | None:
    value = o.get(name)
    if value is None:
        return default
    normal = value.upper() if upper else value.lower()
    if normal not in allowed:
        raise StorageConfigError(
            f"{name} must be one of {', '.join(allowed)}; got {value!r} ({o.source(name)})")
    return normal


def _number(o: _Options, name: str, default: float, *, integer: bool = False,
            unit: str = "seconds", allow_zero: bool = False) -> float:
    value = o.get(name)
    if value is None:
        return default
    try:
        number = float(int(value)) if integer else float(value)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise StorageConfigError(
            f"{name} must be {kind} of {unit}; got {value!r} ({o.source(name)})") from None
    if number < 0 or (number == 0 and not allow_zero):
        limit = "zero or positive" if allow_zero else "positive"
        raise StorageConfigError(f"{name} must be {limit}; got {value!r} ({o.source(name)})")
    return number


def _ttl_seconds(o: _Options) -> int:
    ttl = int(_number(o, DYNAMO_TTL_SECONDS, DEFAULT_DYNAMO_TTL_SECONDS, integer=True))
    if ttl < MIN_DYNAMO_TTL_SECONDS:
        raise StorageConfigError(
            f"{DYNAMO_TTL_SECONDS} must be at least {MIN_DYNAMO_TTL_SECONDS} seconds (one hour); "
            f"got {ttl} ({o.source(DYNAMO_TTL_SECONDS)}). A DynamoDB entry deleted by TTL while "
            "a writer has not yet seen its version lets that writer commit the version again; "
            "the default, as in Spark and delta-rs, is 86400 (one day)")
    return ttl


def _conditional_put(o: _Options) -> ConditionalPut:
    name = CONDITIONAL_PUT if o.get(CONDITIONAL_PUT) is not None else CONDITIONAL_PUT_ALIAS
    raw = o.get(CONDITIONAL_PUT) or o.from_options(CONDITIONAL_PUT_ALIAS)
    if not raw:
        return ConditionalPut()
    return parse_conditional_put(raw, f"{name.lower()} ({o.source(name)})")


def parse_conditional_put(value: str, where: str = "conditional_put") -> ConditionalPut:
    """``etag``, ``disabled`` or ``dynamo:<table>[:<timeout_ms>]``, whitespace tolerated."""
    text = value.strip()
    lowered = text.lower()
    if lowered in ("etag", "disabled"):
        return ConditionalPut(mode=lowered)  # type: ignore[arg-type]
    scheme, sep, rest = text.partition(":")
    if scheme.strip().lower() == "dynamo" and sep:
        table, _, timeout = rest.partition(":")
        table = table.strip()
        if not table:
            raise StorageConfigError(f"{where}: dynamo:<table>[:<timeout_ms>] needs a table name; "
                                     f"got {value!r}")
        if not timeout.strip():
            return ConditionalPut(mode="dynamo", dynamo_table=table)
        try:
            timeout_ms = int(timeout.strip())
        except ValueError:
            timeout_ms = 0
        if timeout_ms <= 0:
            raise StorageConfigError(f"{where}: the timeout in dynamo:<table>:<timeout_ms> must be "
                                     f"a positive number of milliseconds; got {value!r}")
        return ConditionalPut(mode="dynamo", dynamo_table=table, dynamo_timeout_ms=timeout_ms)
    raise StorageConfigError(
        f"{where} must be etag, disabled or dynamo:<table>[:<timeout_ms>]; got {value!r}")
