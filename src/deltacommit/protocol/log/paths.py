"""The one rule for what file a path in the log names.  Pure: no I/O.

Paths in ``add`` and ``remove`` actions are URIs (PROTOCOL.md, "Add File and Remove File"):
relative ones are relative to the table root and percent-encoded, absolute ones may be spelled
as Hadoop and Spark spell them (``file:/x``, ``file:///x``, ``file://localhost/x``, a bare
``/x`` on the table's own file system, ``s3a://`` or ``s3n://`` for ``s3://``).  Every reader,
vacuum, the conflict checker and verify decide with this module whether two spellings name the
same file and whether a file lies inside the table, so that no spelling can make vacuum delete
a live file or make a reader open a file outside the table.

The rule, in order: percent-decode; resolve a relative path against the root, an absolute one
as it stands (the file-system schemes folded into one, the S3 schemes into ``s3``); collapse
empty and ``.`` segments and resolve ``..`` (also when it came from ``%2E%2E`` or ``%2F``);
then the file is inside when its canonical form lies strictly below the root's.

A deletion vector stored by id (``u``) names its file by a prefix and a UUID, not by a path:
``deletion_vector_path`` spells it as a relative log path (the prefix taken literally, as
Spark's ``Path`` takes it, then percent-encoded), so reader and vacuum resolve it with the
same rule as a data file.  Peers differ in how many times they decode a path (delta-kernel-rs
joins a DV prefix into a URL, decoding it once more than Spark), so VACUUM keeps every key
any of them could read (``vacuum_keys``), and deletes nothing a live spelling may name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.deletion_vectors import z85_decode

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_FILE_SCHEMES = frozenset({"file", ""})
# Longest spelling we accept: no file system or object store takes longer keys (S3: 1,024
# bytes; Linux PATH_MAX 4,096), and an unbounded one costs memory on every replay.
MAX_PATH_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class Location:
    """A canonical absolute location: scheme (``file``, ``s3``, ``memory`` or another as given,
    lower case), authority (bucket; empty for local files) and a normalised absolute path."""

    scheme: str
    authority: str
    path: str

    def uri(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    def child_path(self, other: Location) -> str | None:
        """``other``'s path relative to this location if it lies strictly below it, else None."""
        if other.scheme != self.scheme or other.authority != self.authority:
            return None
        base = self.path.rstrip("/") + "/"
        if other.path.startswith(base) and len(other.path) > len(base):
            return other.path[len(base):]
        return None


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """What a log path names: its canonical location, and its path relative to the table root
    (the key in the table's store) when it lies inside the table, else None."""

    location: Location
    relative: str | None

    @property
    def inside(self) -> bool:
        return self.relative is not None


def normalise_segments(path: str) -> str:
    """An absolute path with empty and ``.`` segments dropped and ``..`` resolved (never
    above ``/``, as POSIX and Hadoop's Path do)."""
    out: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    return "/" + "/".join(out)


def _decode(text: str, what: str) -> str:
    if "%" not in text:
        return text
    try:
        decoded = unquote(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise CorruptLogError(f"{what}: {text!r} percent-decodes to invalid UTF-8") from None
    return decoded


@functools.lru_cache(maxsize=1024)
def parse_location(uri: str) -> Location:
    """The canonical location of a table root or absolute URI (``s3a://b/k`` is ``s3://b/k``;
    a plain path or any ``file:`` spelling is ``file:///path``).  Cached (a ``Location`` is
    immutable): every transaction and every open by URI parses its table's root."""
    m = _SCHEME.match(uri)
    scheme = m.group(1).lower() if m else ""
    if scheme in _FILE_SCHEMES:
        rest = uri[m.end():] if m else uri
        if rest.startswith("//"):
            host, slash, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                return Location("file", host.lower(), normalise_segments(_decode(tail, uri)))
            rest = slash + tail
        return Location("file", "", normalise_segments(_decode(rest, uri)))
    rest = uri[m.end():] if m else uri
    if rest.startswith("//"):
        host, _, tail = rest[2:].partition("/")
    else:
        host, tail = "", rest
    canonical = "s3" if scheme in _S3_SCHEMES else scheme
    return Location(canonical, host, normalise_segments(_decode(tail, uri)))


def resolve(root: Location, path: str, *, table: str = "") -> ResolvedPath:
    """What the log path ``path`` names in a table rooted at ``root``.

    A path with a scheme is absolute; a path starting with ``/`` is absolute on the table's
    own file system or bucket (Hadoop qualifies it with the table's file system); anything
    else is relative to the root.
    """
    where = f"table {table}: data file path" if table else "data file path"
    if not path:
        raise CorruptLogError(f"{where} is empty")
    if len(path) > MAX_PATH_CHARS:
        raise CorruptLogError(f"{where} {path[:80]!r}... is {len(path)} characters long; "
                              f"at most {MAX_PATH_CHARS} are accepted")
    if "\x00" in path:
        raise CorruptLogError(f"{where} {path!r} contains a NUL character")
    if is_plain_relative(path) and root.path.startswith("/"):
        # The common case (what every writer writes): already canonical and below the root,
        # so its location is the root's path and it, and it is its own relative path.
        return ResolvedPath(Location(root.scheme, root.authority,
                                     root.path.rstrip("/") + "/" + path), path)
    if _SCHEME.match(path):
        loc = parse_location(path)
    else:
        decoded = _decode(path, where)
        if "\x00" in decoded:
            raise CorruptLogError(f"{where} {path!r} decodes to a path with a NUL character")
        if decoded.startswith("/"):
            loc = Location(root.scheme, root.authority, normalise_segments(decoded))
        else:
            loc = Location(root.scheme, root.authority,
                           normalise_segments(root.path.rstrip("/") + "/" + decoded))
    return ResolvedPath(loc, root.child_path(loc))


def locate_data_file(root: Location, path: str, *, table: str,
                     allow_external: bool = False) -> ResolvedPath:
    """``resolve`` for reading a data file: a file outside the table is refused unless the
    caller opted in, because a log anyone can write to must not make readers (or Spark tasks)
    open arbitrary files; shallow clones legitimately point into another table."""
    resolved = resolve(root, path, table=table)
    if not resolved.inside and not allow_external:
        raise CorruptLogError(
            f"table {table}: data file {path!r} resolves to {resolved.location.uri()}, outside "
            f"the table location {root.uri()}; refusing to read it. If the table references "
            "another table's files on purpose (a shallow clone), open it with "
            "allow_external_paths=True")
    return resolved


def is_plain_relative(path: str) -> bool:
    """Whether ``path`` is already canonical and relative: no escape, no scheme, no leading
    slash, no empty, ``.`` or ``..`` segment.  The common case, checked without allocating."""
    if (not path or "%" in path or ":" in path or path[0] == "/" or path[-1] == "/"
            or "//" in path):
        return False
    if "." not in path:
        return True
    return not (path.startswith(("./", "../")) or "/./" in path or "/../" in path
                or path.endswith(("/.", "/..")) or path in (".", ".."))


def canonical_key(path: str) -> str:
    """A root-independent identity of a log path, for matching adds with removes.

    Plain relative paths are their own key.  Otherwise a relative path is decoded and
    normalised (``./x`` is ``x``), an absolute one becomes its canonical URI, so the spellings
    ``/p``, ``file:/p``, ``file:///p`` and ``file://localhost/p`` (and ``s3a://`` with
    ``s3://``) of one file share a key.  A relative path that climbs above the root keeps a
    leading ``../`` and so never equals a path inside it.
    """
    if is_plain_relative(path):
        return path
    # Lenient (a key must exist for every action the log holds): reading and vacuum resolve
    # strictly and refuse a path that does not decode.
    if _SCHEME.match(path):
        try:
            return parse_location(path).uri()
        except CorruptLogError:
            return path
    decoded = unquote(path, encoding="utf-8", errors="surrogateescape") if "%" in path else path
    if decoded.startswith("/"):
        return "file://" + normalise_segments(decoded)
    out: list[str] = []
    climbs = 0
    for seg in decoded.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            else:
                climbs += 1
            continue
        out.append(seg)
    return "../" * climbs + "/".join(out)


def file_key(path: str, deletion_vector: dict[str, object] | None = None) -> str:
    """The identity of a data file across add and remove actions.

    Paths are compared in their canonical form (``canonical_key``): writers differ in which
    characters they escape, and Delta treats ``/p`` and ``file:/p`` as one file.
    """
    key = canonical_key(path)
    if deletion_vector:
        key += "#" + str(deletion_vector.get("storageType", "")) + str(
            deletion_vector.get("pathOrInlineDv", "")) + "@" + str(deletion_vector.get("offset", ""))
    return key


def deletion_vector_path(dv: Mapping[str, object], *, table: str = "") -> str | None:
    """The log path of the file a deletion vector descriptor stores its bitmap in (relative
    for ``u``, absolute for ``p``), or None for an inline (``i``) one: the one spelling every
    reader and VACUUM resolve (with ``resolve``).

    ``u``: ``<random prefix><20 Z85 characters of a UUID>`` names
    ``<random prefix>/deletion_vector_<uuid>.bin`` below the table root (PROTOCOL.md,
    "Deletion Vector Descriptor Schema").  The prefix is a folder name, not a path: ``%41``
    or ``a:b`` in it are those characters (as Spark reads them), so it is percent-encoded
    here, where a ``:`` would otherwise read as a scheme and ``%41`` as ``A``.
    """
    storage = dv.get("storageType")
    value = dv.get("pathOrInlineDv")
    if storage == "i":
        return None
    if not isinstance(value, str) or not value:
        raise CorruptLogError(f"table {table}: deletion vector {dv!r} has no pathOrInlineDv")
    if storage == "p":
        return value
    if storage == "u":
        if len(value) < 20:
            raise CorruptLogError(f"table {table}: deletion vector id {value!r} is shorter than "
                                  "the 20 characters of a Z85-encoded UUID")
        prefix, encoded = value[:-20], value[-20:]
        try:
            raw = z85_decode(encoded)
        except CorruptLogError as e:
            raise CorruptLogError(f"table {table}: deletion vector id {value!r}: {e}") from None
        h = raw.hex()
        uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        name = f"deletion_vector_{uuid}.bin"
        return f"{quote(prefix, safe='/')}/{name}" if prefix else name
    raise CorruptLogError(f"table {table}: deletion vector {dv!r} has unknown storageType "
                          f"{storage!r}; expected 'u', 'i' or 'p'")


def _joined(root: Location, text: str) -> str | None:
    """The key inside the table of ``text`` read as a relative path without decoding and
    without looking for a scheme, or None when it is not inside."""
    if not text or text.startswith("/") or "\x00" in text:
        return None
    loc = Location(root.scheme, root.authority,
                   normalise_segments(root.path.rstrip("/") + "/" + text))
    return root.child_path(loc)


def vacuum_keys(root: Location, path: str, *, table: str = "") -> set[str]:
    """Every store key inside the table a reader might open for the log path ``path``, for
    VACUUM to keep: ``resolve``'s (the rule this library reads by; CorruptLogError when it
    cannot resolve ``path``), the key of the path taken literally (a reader that does not
    decode) and of the path decoded twice (one that decodes again, as a URL join of a
    deletion vector's prefix does).  The rule's key is always among them."""
    resolved = resolve(root, path, table=table)
    keys = {resolved.relative} if resolved.relative is not None else set()
    if "%" in path and not _SCHEME.match(path):
        for text in (path, unquote(unquote(path, errors="surrogateescape"),
                                   errors="surrogateescape")):
            key = _joined(root, text)
            if key is not None:
                keys.add(key)
    return keys
