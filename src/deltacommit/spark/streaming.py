"""Structured Streaming into a Delta table, each micro-batch committed exactly once.

Spark records a micro-batch as done in its own commit log only after the sink returns, so a
query that crashes between the Delta commit and that record replays the batch on restart, with
the same batch id.  Each batch therefore commits through ``write(..., app_id=A,
app_version=batch_id)``: the commit carries the ``txn`` action ``(A, batch_id)``, and a replayed
batch finds it and is skipped before any Spark job runs.

``A`` is the streaming query's id, as Spark's own Delta sink takes it (delta-io/delta,
``sources/DeltaSink.scala``: ``queryId`` is the ``sql.streaming.queryId`` local property, a
batch is skipped when ``txn.txnVersion(queryId) >= batchId``, and the commit carries
``SetTransaction(queryId, batchId)``).  Spark keeps that id in the checkpoint, in
``<checkpoint>/metadata`` (JSON with ``"id"``), made when a query first starts from an empty
checkpoint and read back on every restart (apache/spark, ``StreamExecution.scala``: ``id`` is
``UUID.fromString(streamMetadata.id)``, set as ``QUERY_ID_KEY`` on the stream's thread).  So:

* a restart from the same checkpoint has the same id, and a replayed batch is skipped;
* a checkpoint deleted to start the stream again from scratch gets a new id, so its batches
  0, 1, ... are new work and are committed (an id derived from the checkpoint's location would
  call them already written and lose them);
* two queries have two ids whatever their checkpoints are called: nothing is derived from a
  location string, which Python and Spark would resolve against different working folders.

Where the id comes from: on a classic session the batch function runs on the stream's own thread,
which carries the local property.  Over Spark Connect the function runs in a Python worker of the
Connect server, which is told only the batch id; there the id is read from
``<checkpoint>/metadata`` through Spark (so the location is resolved exactly as the query
resolved it, on the server), once per run, as Spark reads it once when the query starts.  That
worker often lacks deltacommit (a cluster installs only what its executors need), so the batch
function carries the zip of the client's deltacommit (``shipping.py``) and installs it in a
private folder of the worker before anything of deltacommit is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltacommit.errors import DeltaCommitError, InvalidArgumentError, TableNotFoundError
from deltacommit.protocol.log.paths import parse_location
from deltacommit.spark.shipping import is_connect, package, shipping_enabled
from deltacommit.spark.writer import write
from deltacommit.table import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from deltacommit.table import DeltaTable

#: Output modes a Delta sink can honour with appends; Spark's "complete" and "update" rewrite
#: or upsert earlier results, which needs an overwrite or a MERGE per batch.
_MODES = ("append",)

#: The local property a streaming query's thread carries its id in (Spark's
#: ``StreamExecution.QUERY_ID_KEY``).
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class BatchSink:
    """A ``foreachBatch`` function appending each micro-batch once, under the ``txn`` action
    ``(app id, batch id)``; the app id is ``app_id`` if given, else the query's id."""

    def __init__(self, table_or_uri: DeltaTable | str, *, app_id: str | None = None,
                 checkpoint_location: str | None = None,
                 partition_by: Sequence[str] | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 configuration: Mapping[str, str] | None = None,
                 target_file_rows: int | None = None, carry_package: bool = True,
                 legacy_app_id: str | None = None) -> None:
        if isinstance(table_or_uri, DeltaTable):
            self.table: DeltaTable | None = table_or_uri
            self.uri = table_or_uri.uri
            self.storage_options = dict(table_or_uri.storage_options)
        else:
            self.table = None
            self.uri = table_or_uri
            self.storage_options = dict(storage_options or {})
        self.app_id = app_id
        self.checkpoint_location = checkpoint_location
        self.partition_by = list(partition_by) if partition_by is not None else None
        self.configuration = dict(configuration) if configuration is not None else None
        self.target_file_rows = target_file_rows
        #: Whether the function, when pickled for a Spark Connect server, carries deltacommit.
        self.carry_package = carry_package
        #: The app id earlier releases gave this checkpoint (``_legacy_stream_app_id``).
        self.legacy_app_id = legacy_app_id
        #: The query id of this run, where it had to be read from the checkpoint (Connect): a
        #: function object is unpickled afresh for each run there.
        self._run_query_id: str | None = None
        self._first_batch = True

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch_id = int(batch_id)
        app_id = self.app_id or self.query_id(batch)
        first, self._first_batch = self._first_batch, False
        if first and self._written_by_earlier_release(app_id, batch_id):
            return
        write(batch, self.table if self.table is not None else self.uri, mode="append",
              partition_by=self.partition_by, app_id=app_id, app_version=batch_id,
              storage_options=self.storage_options, configuration=self.configuration,
              target_file_rows=self.target_file_rows)

    def query_id(self, batch: DataFrame) -> str:
        """The id of the streaming query ``batch`` belongs to (see the module's docstring)."""
        session = batch.sparkSession
        connect = is_connect(session)
        if not connect:
            found = session.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
            if found:
                return str(found)
        elif self._run_query_id is not None:
            return self._run_query_id
        if not self.checkpoint_location:
            where = "over Spark Connect" if connect else "on this thread"
            raise InvalidArgumentError(
                f"table {self.uri}: the streaming query's id cannot be read {where}; pass the "
                "query's checkpoint_location (or an app_id naming the query) to "
                "dcs.foreach_batch")
        found = read_query_id(session, self.checkpoint_location, self.uri)
        if connect:
            self._run_query_id = found
        return found

    def _written_by_earlier_release(self, app_id: str, batch_id: int) -> bool:
        """Whether the first batch of this run was committed by an earlier release of
        ``write_stream``, which named the query by a digest of its checkpoint's location.

        Only a restart from an intact checkpoint can begin with a batch id above 0 (a new or
        emptied checkpoint starts at 0), so only such a first batch is looked up under the old
        id, and only while the query has committed nothing under its own id: it is skipped if
        the old id recorded exactly this batch, the replay of a batch committed just before a
        crash.  A batch 0 is always committed."""
        if self.legacy_app_id is None or batch_id <= 0:
            return False

        try:
            table = DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return False
        return (table.app_version(app_id) is None
                and table.app_version(self.legacy_app_id) == batch_id)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (for a Spark Connect server's foreachBatch worker) as a small function,
        pickled by value, that installs the carried deltacommit zip in the worker and then
        makes this sink again; nothing in the pickle needs deltacommit to load."""
        config = {"table_or_uri": self.uri, "app_id": self.app_id,
                  "checkpoint_location": self.checkpoint_location,
                  "partition_by": self.partition_by, "storage_options": self.storage_options,
                  "configuration": self.configuration,
                  "target_file_rows": self.target_file_rows,
                  "carry_package": self.carry_package, "legacy_app_id": self.legacy_app_id}
        if self.carry_package:
            pkg = package()
            return (_sink_loader(), (config, pkg.data, pkg.digest))
        return (_sink_loader(), (config, None, None))


def _sink_loader() -> Callable[..., Any]:
    """The function that remakes a ``BatchSink`` in a process that may lack deltacommit.

    It is made inside this function so that cloudpickle pickles it by value, and it refers to
    nothing but the standard library: the zip it is given (checked against its SHA-256) is
    written with an exclusive create into a new folder of mode 0700 and put first on
    ``sys.path``, unless deltacommit is already imported in that process.  The folder is
    removed when the process exits, also when a Connect server ends it with SIGTERM."""

    def load_batch_sink(config: dict[str, Any], package: bytes | None,
                        digest: str | None) -> Any:
        import atexit
        import hashlib
        import os
        import shutil
        import signal
        import sys
        import tempfile
        import threading

        if ("SPARK_CONNECT_LOCAL_URL" in os.environ
                and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
            # A Connect server's foreachBatch worker, which the server ends with SIGTERM when
            # the query stops: exit through SystemExit, so that the exit handlers remove this
            # process's private folders (the carried zip, the one shipped to executors).
            def stop(signum: int, frame: Any) -> None:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one while exiting
                raise SystemExit(128 + signum)

            signal.signal(signal.SIGTERM, stop)
        if package is not None and digest is not None and "deltacommit" not in sys.modules:
            if hashlib.sha256(package).hexdigest() != digest:
                raise RuntimeError("the deltacommit package carried by the foreachBatch "
                                   "function does not match its digest")
            folder = tempfile.mkdtemp(prefix="deltacommit-sink-")
            maker = os.getpid()

            def remove() -> None:  # by this process only, not by a forked child
                if os.getpid() == maker:
                    shutil.rmtree(folder, ignore_errors=True)

            atexit.register(remove)
            path = os.path.join(folder, f"deltacommit-{digest[:16]}.zip")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(package)
            sys.path.insert(0, path)
        from deltacommit.spark.streaming import BatchSink

        return BatchSink(**config)

    return load_batch_sink


def read_query_id(spark: Any, checkpoint_location: str, uri: str) -> str:
    """The query id Spark keeps in ``<checkpoint_location>/metadata``, read through ``spark``
    so that the location is resolved as the query resolved it (relative to the Spark driver's
    working folder, with its file systems and credentials), with globbing off."""
    path = checkpoint_location.rstrip("/") + "/metadata"
    try:
        rows = spark.read.option("__globPaths__", "false").text(path).collect()
        doc = json.loads(rows[0][0])
        found = str(doc["id"])
        uuid.UUID(found)
    except Exception as e:  # any failure here means: no usable metadata
        raise DeltaCommitError(
            f"table {uri}: cannot read the streaming query's id from {path} (Spark writes it "
            f"when the query starts): {type(e).__name__}: {str(e)[:300]}") from e
    return found


def _legacy_stream_app_id(checkpoint_location: str) -> str:
    """The ``txn`` app id earlier releases derived from a checkpoint's location; read only to
    recognise a batch they committed just before a crash (``BatchSink``)."""

    location = checkpoint_location
    if "://" not in location and not location.startswith("file:"):
        location = os.path.abspath(location)
    canonical = parse_location(location).uri().rstrip("/")
    return "deltacommit-stream-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]


def foreach_batch(table_or_uri: DeltaTable | str, *, app_id: str | None = None,
                  checkpoint_location: str | None = None,
                  partition_by: Sequence[str] | None = None,
                  storage_options: Mapping[str, str] | None = None,
                  configuration: Mapping[str, str] | None = None,
                  target_file_rows: int | None = None) -> BatchSink:
    """A function for ``DataFrame.writeStream.foreachBatch`` that appends each micro-batch
    once: batch ``n`` commits with the ``txn`` action ``(query id, n)`` and a replay of it is
    skipped.

    The query id is the streaming query's own (Spark keeps it in the checkpoint), so a query
    restarted from its checkpoint skips what it committed, and one restarted from an emptied
    checkpoint commits its batches again.  Over Spark Connect pass ``checkpoint_location`` (the
    query's): the id is read from there.  ``app_id`` replaces the query id with a name of the
    caller's (as Delta's ``txnAppId``): it must stay the same across restarts, and change when
    the checkpoint is replaced, or the new query's first batches are skipped as written."""
    if app_id is not None and not app_id:
        raise InvalidArgumentError(
            "foreach_batch: app_id must name the streaming query (leave it out to use the "
            "query's own id)")
    return BatchSink(table_or_uri, app_id=app_id, checkpoint_location=checkpoint_location,
                     partition_by=partition_by, storage_options=storage_options,
                     configuration=configuration, target_file_rows=target_file_rows)


def write_stream(df: DataFrame, table_or_uri: DeltaTable | str, *, checkpoint_location: str,
                 mode: str = "append", partition_by: Sequence[str] | None = None,
                 trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 configuration: Mapping[str, str] | None = None) -> StreamingQuery:
    """Start a streaming query appending ``df`` to a Delta table, exactly once per batch.

    ``trigger`` takes ``DataStreamWriter.trigger``'s keywords as a dict, e.g.
    ``{"availableNow": True}`` or ``{"processingTime": "10 seconds"}``.  The query's batches
    are committed under its id (``StreamingQuery.id``).
    """
    uri = table_or_uri if isinstance(table_or_uri, str) else table_or_uri.uri
    if mode not in _MODES:
        raise InvalidArgumentError(
            f"table {uri}: streaming output mode {mode!r} is not supported; a Delta sink here "
            "appends each micro-batch (mode='append'); for 'complete' or 'update' write each "
            "batch yourself in foreachBatch (for example dcs.write(batch, uri, mode='overwrite'))")
    if not getattr(df, "isStreaming", False):
        raise InvalidArgumentError(
            f"table {uri}: write_stream needs a streaming DataFrame (spark.readStream...); "
            "use dcs.write for a batch DataFrame")
    if not checkpoint_location:
        raise InvalidArgumentError(f"table {uri}: write_stream needs a checkpoint_location")
    session = df.sparkSession
    sink = BatchSink(table_or_uri, checkpoint_location=checkpoint_location,
                     partition_by=partition_by, storage_options=storage_options,
                     configuration=configuration,
                     carry_package=is_connect(session) and shipping_enabled(session),
                     legacy_app_id=_legacy_stream_app_id(checkpoint_location))
    writer = (df.writeStream.outputMode("append")
              .option("checkpointLocation", checkpoint_location)
              .foreachBatch(sink))
    if trigger:
        writer = writer.trigger(**dict(trigger))
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
