"""Whether the light client can serve a configuration exactly, and the endpoint, region and
credentials it then uses: those our botocore clients would use, or no answer at all.

botocore reads more than the options say: the shared config files, profiles, the credential
chain (SSO, web identity, container and instance roles), CA bundles, proxies and a dozen
``AWS_*`` switches.  The light client serves only what it can do exactly as the botocore path
does, which is the serverless case: static keys (options or ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, which Lambda sets), the region from the
options or ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, the endpoint from the options,
``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL_DYNAMODB`` or AWS's own, and
path-style or automatic addressing.  Anything else makes ``light_s3`` / ``light_dynamodb``
return the reason it is not served, and the caller uses botocore.  ``DELTACOMMIT_AWS_CLIENT=
botocore`` always does.

Pure apart from reading the environment and whether the AWS config file exists (both given by
the caller in tests).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, urlsplit

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws.light.http import Endpoint
from deltacommit.io.aws.light.sigv4 import Credentials
from deltacommit.io.aws.options import CLIENT_SWITCH, FALLBACK_REGION

__all__ = ["CLIENT_SWITCH", "DynamoDBSettings", "S3Settings", "light_dynamodb", "light_s3"]


#: Environment variables that change what botocore does in ways the light client does not
#: reproduce: where the config files are and which profile, CA bundles, proxies, FIPS and
#: dual-stack endpoints, S3's us-east-1 and ARN settings, account-id endpoints, endpoint
#: discovery from the config files.
_BOTOCORE_ONLY_ENV = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
    "AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT",
    "AWS_S3_USE_ARN_REGION", "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ACCOUNT_ID", "AWS_ACCOUNT_ID_ENDPOINT_MODE",
    "AWS_DEFAULTS_MODE", "AWS_S3_DISABLE_EXPRESS_SESSION_AUTH",
)
#: CA bundles botocore verifies HTTPS servers with instead of its own (plain HTTP needs none).
_CA_BUNDLE_ENV = ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE")
#: Regions of the standard AWS partition, whose endpoints are ``*.amazonaws.com``.
_AWS_REGION = re.compile(r"^(?!us-gov-|us-iso)(us|eu|ap|sa|ca|me|af|il|mx)-[a-z]+-\d+$")
_HOST_LABEL = re.compile(r"^(?!-)[a-zA-Z\d-]{1,63}(?<!-)$")
_IPV4 = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+)$")


class AwsSettings(Protocol):
    """What the light client reads of ``deltacommit.io.aws.config.AwsConfig``."""

    @property
    def endpoint_url(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def access_key_id(self) -> str | None: ...
    @property
    def secret_access_key(self) -> str | None: ...
    @property
    def session_token(self) -> str | None: ...
    @property
    def profile(self) -> str | None: ...
    @property
    def addressing_style(self) -> str | None: ...
    @property
    def dynamodb_region(self) -> str | None: ...
    @property
    def effective_dynamodb_endpoint_url(self) -> str | None: ...
    def dynamodb_credentials(self) -> tuple[str | None, str | None, str | None]: ...


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where and as whom the light S3 client sends a bucket's requests."""

    credentials: Credentials
    region: str
    #: The custom endpoint, or None for AWS's (from the region).
    endpoint: Endpoint | None
    #: Path-style always (True), or, on AWS's endpoints, virtual-host style for buckets whose
    #: names are host names (False); custom endpoints are always addressed path-style.
    force_path_style: bool

    def locate(self, bucket: str) -> tuple[Endpoint, str]:
        """The endpoint and the path prefix (``/bucket`` or empty) of ``bucket``'s requests."""
        path = "/" + quote(bucket, safe="/~")
        if self.endpoint is not None:
            # botocore addresses a custom endpoint path-style, automatic addressing included.
            return self.endpoint, path
        suffix = "s3.amazonaws.com" if self.region == "us-east-1" else f"s3.{self.region}.amazonaws.com"
        if not self.force_path_style and _virtual_hostable(bucket, subdomains=False):
            return Endpoint("https", f"{bucket}.{suffix}", 443), ""
        return Endpoint("https", suffix, 443), path


@dataclass(frozen=True, slots=True)
class DynamoDBSettings:
    credentials: Credentials
    region: str
    endpoint: Endpoint


def client_choice(environ: Mapping[str, str]) -> str:
    """``auto`` or ``botocore``, from ``DELTACOMMIT_AWS_CLIENT``."""
    value = (environ.get(CLIENT_SWITCH) or "auto").strip().lower()
    if value not in ("auto", "botocore"):
        raise StorageConfigError(f"{CLIENT_SWITCH} must be auto or botocore; got {value!r}")
    return value


def light_s3(config: AwsSettings, *, environ: Mapping[str, str] | None = None,
             config_file_exists: bool | None = None) -> S3Settings | str:
    """The light S3 client's settings for ``config``, or why botocore must serve it."""
    env = os.environ if environ is None else environ
    reason = _common_reason(config, env, config_file_exists)
    if reason is not None:
        return reason
    assert config.access_key_id is not None and config.secret_access_key is not None
    if config.addressing_style == "virtual":
        return "virtual-host addressing is left to botocore"
    region = config.region or FALLBACK_REGION
    endpoint_url = config.endpoint_url or _env(env, "AWS_ENDPOINT_URL_S3")
    endpoint: Endpoint | None = None
    if endpoint_url is not None:
        parsed = _endpoint(endpoint_url)
        if isinstance(parsed, str):
            return parsed
        endpoint = parsed
    elif not _AWS_REGION.match(region):
        return f"region {region!r} is not in the standard AWS partition"
    # Our botocore path forces path-style with an endpoint from the options (or
    # AWS_ENDPOINT_URL); AWS_ENDPOINT_URL_S3 and AWS's own endpoints go by the endpoint rules.
    if endpoint is None or endpoint.scheme == "https":
        reason = _ca_bundle_reason(env)
        if reason is not None:
            return reason
    style = config.addressing_style or ("path" if config.endpoint_url else None)
    return S3Settings(Credentials(config.access_key_id, config.secret_access_key,
                                  config.session_token or None),
                      region, endpoint, force_path_style=style == "path")


def light_dynamodb(config: AwsSettings, *, environ: Mapping[str, str] | None = None,
                   config_file_exists: bool | None = None) -> DynamoDBSettings | str:
    """The light DynamoDB client's settings for ``config``, or why botocore must serve it."""
    env = os.environ if environ is None else environ
    reason = _common_reason(config, env, config_file_exists)
    if reason is not None:
        return reason
    key, secret, token = config.dynamodb_credentials()
    if key is None or secret is None:
        return "no static DynamoDB keys"
    region = config.dynamodb_region or config.region or FALLBACK_REGION
    endpoint_url = config.effective_dynamodb_endpoint_url
    if endpoint_url is None:
        if not _AWS_REGION.match(region):
            return f"region {region!r} is not in the standard AWS partition"
        endpoint_url = f"https://dynamodb.{region}.amazonaws.com"
    endpoint = _endpoint(endpoint_url)
    if isinstance(endpoint, str):
        return endpoint
    if endpoint.scheme == "https":
        reason = _ca_bundle_reason(env)
        if reason is not None:
            return reason
    return DynamoDBSettings(Credentials(key, secret, token or None), region, endpoint)


def _common_reason(config: AwsSettings, env: Mapping[str, str],
                   config_file_exists: bool | None) -> str | None:
    if client_choice(env) == "botocore":
        return f"{CLIENT_SWITCH}=botocore"
    if config.access_key_id is None or config.secret_access_key is None:
        return "no static keys: botocore's credential chain finds them"
    if config.profile is not None:
        return "a profile is named"
    for name in _BOTOCORE_ONLY_ENV:
        if env.get(name):
            return f"{name} is set"
    if config_file_exists is None:
        config_file_exists = _config_file_has_settings(env)
    if config_file_exists:
        return "the AWS config file may set the region, endpoints or other settings"
    region = config.region or FALLBACK_REGION
    if not _HOST_LABEL.match(region):
        return f"region {region!r} is left to botocore to refuse"
    return None


def standard_region(region: str) -> bool:
    """Whether ``region`` is in AWS's standard partition (endpoints ``*.amazonaws.com``)."""
    return bool(_AWS_REGION.match(region))


def _ca_bundle_reason(env: Mapping[str, str]) -> str | None:
    for name in _CA_BUNDLE_ENV:
        if env.get(name):
            return f"{name} is set (a CA bundle for HTTPS)"
    return None


def _config_file_has_settings(env: Mapping[str, str]) -> bool:
    """Whether the AWS config file botocore would read (``AWS_CONFIG_FILE`` or
    ``~/.aws/config``) can hold anything: it exists and is not empty (``/dev/null`` is)."""
    path = os.path.expanduser(env.get("AWS_CONFIG_FILE") or os.path.join("~", ".aws", "config"))
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value.strip().rstrip("/") if value and value.strip() else None


def _endpoint(url: str) -> Endpoint | str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"endpoint {url!r} is left to botocore"
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return f"endpoint {url!r} has a path, query or user part"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"endpoint {url!r} has a bad port"
    return Endpoint(parts.scheme, parts.hostname, port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _virtual_hostable(bucket: str, *, subdomains: bool) -> bool:
    """AWS's rule for a bucket name usable as a host name label (or labels)."""
    if len(bucket) < 3 or bucket.lower() != bucket or _IPV4.match(bucket):
        return False
    if not subdomains:
        return "." not in bucket and bool(_HOST_LABEL.match(bucket))
    return all(_HOST_LABEL.match(label) for label in bucket.split("."))


def unserved_bucket(bucket: str) -> str | None:
    """Why a bucket name needs botocore's endpoint rules (ARNs, access points, directory
    buckets), or None."""
    if bucket.startswith("arn:") or bucket.endswith(("--x-s3", "--op-s3", "-s3alias")):
        return f"bucket {bucket!r} is an ARN, access point or directory bucket"
    return None
