"""deltacommit's own code, sent to the Spark executors that run its tasks.

Write and read tasks are deltacommit classes; an executor unpickling one imports deltacommit.
Clusters rarely have it installed (their executors have pyarrow and pandas, which Spark's Arrow
path needs, and nothing the job brings), so before its first job on a session deltacommit sends
itself: the package is pure Python, zipped once per process from the installed source and added
with ``SparkContext.addPyFile`` on a classic session or ``SparkSession.addArtifacts(...,
pyfile=True)`` over Spark Connect.  Either puts the zip on the executors' ``sys.path``.

The zip's name carries a digest of its contents, so a session that already has this exact code
is not sent it again, and a session that has an older zip of another name simply gains the new
one.  Setting the session's ``spark.deltacommit.shipPackage`` to ``false`` turns this off, for
clusters that install deltacommit themselves.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltacommit.errors import DeltaCommitError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHIP_SETTING = "spark.deltacommit.shipPackage"

_lock = threading.Lock()
_zip: Path | None = None
_shipped: set[tuple[str, str]] = set()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM in this process)."""
    module = type(spark).__module__
    return module.startswith("pyspark.sql.connect")


def package_zip() -> Path:
    """The zip of this process's deltacommit package (built on first use)."""
    global _zip
    with _lock:
        if _zip is not None and _zip.exists():
            return _zip
        root = Path(__file__).resolve().parent.parent
        files = sorted(p for p in root.rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix in (".py", ".typed"))
        digest = hashlib.sha256()
        for p in files:
            digest.update(p.relative_to(root).as_posix().encode())
            digest.update(p.read_bytes())
        target = Path(tempfile.gettempdir()) / f"deltacommit-{digest.hexdigest()[:16]}.zip"
        if not target.exists():
            fd, tmp = tempfile.mkstemp(suffix=".zip", dir=target.parent)
            os.close(fd)
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
                for p in files:
                    zf.write(p, "deltacommit/" + p.relative_to(root).as_posix())
            os.replace(tmp, target)
        _zip = target
        return target


def _session_key(spark: SparkSession) -> str:
    if is_connect(spark):
        return "connect:" + str(getattr(spark, "session_id", id(spark)))
    return "classic:" + str(spark.sparkContext.applicationId)


def ship_package(spark: SparkSession) -> None:
    """Make deltacommit importable on ``spark``'s executors (once per session and code)."""
    if (spark.conf.get(SHIP_SETTING, "true") or "true").lower() == "false":
        return
    path = package_zip()
    key = (_session_key(spark), path.name)
    with _lock:
        if key in _shipped:
            return
        if is_connect(spark):
            spark.addArtifacts(str(path), pyfile=True)
        else:
            spark.sparkContext.addPyFile(str(path))
        _shipped.add(key)


def missing_module_error(error: BaseException, uri: str) -> DeltaCommitError | None:
    """A clear error for a Spark job that failed because an executor could not import what
    deltacommit's tasks need; None for any other failure."""
    text = str(error)
    for module, fix in (
            ("deltacommit", f"leave {SHIP_SETTING} unset (deltacommit then sends itself to the "
                            "executors) or install deltacommit on the cluster"),
            ("pyarrow", "install pyarrow on the cluster's executors (Spark's Arrow path needs "
                        "it too)")):
        if f"No module named '{module}" in text:
            return DeltaCommitError(
                f"writing to or reading table {uri}: the Spark executors cannot import "
                f"{module!r}; {fix}")
    return None


def run_tasks(frame: Any, task: Any, result_ddl: str, uri: str) -> list[Any]:
    """Run ``task`` over ``frame``'s rows on the executors (``mapInArrow``) and collect what it
    returns: the package is sent first, and a job whose executors cannot import what the task
    needs fails with the clear error of ``missing_module_error``."""
    ship_package(frame.sparkSession)
    try:
        rows: list[Any] = frame.mapInArrow(task, result_ddl).collect()
    except Exception as e:
        clear = missing_module_error(e, uri)
        if clear is not None:
            raise clear from e
        raise
    return rows
