"""A local SparkSession configured for deltacommit's examples, tests and benchmarks.

Two settings are easy to miss and each costs an afternoon: Python workers must run the driver's
interpreter (PySpark otherwise starts ``python3`` from PATH, which may lack pyarrow and
deltacommit), and the driver must bind to loopback on machines whose host name does not resolve.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What every local session gets unless ``config`` overrides it.
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
}


#: JVM options for short-lived sessions (tests, demos): the client compiler only and the serial
#: collector start a session in about half the time and run small jobs as fast; long jobs run
#: slower, so benchmarks leave them out.
QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(app_name: str = "deltacommit", master: str = "local[2]",
                  config: Mapping[str, str] | None = None, *, quick_start: bool = False,
                  log_level: str = "ERROR") -> SparkSession:
    """Start (or return the running) local SparkSession with deltacommit's settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(LOCAL_DEFAULTS)
    if quick_start:
        settings["spark.driver.extraJavaOptions"] = QUICK_START_JAVA_OPTIONS
    for key, value in {**settings, **(config or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
