"""S3 locations (``s3://bucket/prefix``, Hadoop's ``s3a://`` and ``s3n://``), parsed without
boto3, so a store that does not use it (``arrow_s3``) shares one parser with the one that does."""

from __future__ import annotations

from deltacommit.errors import StorageConfigError

S3_SCHEMES = ("s3", "s3a", "s3n")


def parse_s3_uri(uri: str) -> tuple[str, str, str]:
    """``(scheme, bucket, prefix)`` of ``s3://bucket/prefix`` (also ``s3a://``, ``s3n://``)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in S3_SCHEMES:
        raise StorageConfigError(f"not an S3 location: {uri!r}; expected s3://bucket/path "
                                 "(or s3a://, s3n://)")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StorageConfigError(f"S3 location {uri!r} names no bucket; expected s3://bucket/path")
    if "?" in rest or "#" in rest:
        raise StorageConfigError(f"S3 location {uri!r} has a query or fragment; expected "
                                 "s3://bucket/path")
    prefix = prefix.strip("/")
    if "//" in prefix:
        spelled = f"{scheme}://{bucket}/{'/'.join(p for p in prefix.split('/') if p)}"
        raise StorageConfigError(
            f"S3 location {uri!r} has an empty path segment ('//'). Spark's Hadoop paths read "
            f"it as {spelled!r} and deltalake refuses it, while S3 keys it as written: writers "
            f"of one table would not agree on where it is. Spell it {spelled!r}")
    segments = prefix.split("/")
    if "." in segments or ".." in segments:
        kept: list[str] = []
        for part in segments:
            if part == "..":
                if kept:
                    kept.pop()
            elif part != ".":
                kept.append(part)
        spelled = f"{scheme}://{bucket}" + (f"/{'/'.join(kept)}" if kept else "")
        raise StorageConfigError(
            f"S3 location {uri!r} has a '.' or '..' path segment. Spark's Hadoop paths and "
            f"deltalake's URLs read it as {spelled!r}, while S3 keys it as written: writers of "
            f"one table would not agree on where it is. Spell it {spelled!r}")
    return scheme.lower(), bucket, prefix
