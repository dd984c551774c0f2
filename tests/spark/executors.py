"""Executors as clusters have them: a Python without deltacommit, and a Spark Connect server.

``executor_python`` builds a real virtual environment that sees only what a cluster's executors
have (pyarrow, numpy, pandas and their helpers, and PySpark itself for its worker), by a ``.pth``
file listing a directory of links to exactly those packages from this environment.  deltacommit
and boto3 are not importable there.

``ConnectServer`` runs the PySpark package's own ``sbin/start-connect-server.sh --wait`` (in the
foreground, its own process group) with ``PYSPARK_PYTHON`` pointing at such a Python, and stops
it with the group.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

#: What a cluster's executors have: pyarrow and what Spark's Arrow path needs.
EXECUTOR_PACKAGES = ("pyarrow", "numpy", "pandas", "dateutil", "pytz", "tzdata", "six",
                     "pyspark", "py4j")

#: What a Spark Connect server's own Python has besides: the Connect client, which the
#: server-side worker running a streaming query's ``foreachBatch`` function talks through.
CONNECT_PACKAGES = ("grpc", "grpc_status", "google", "zstandard", "typing_extensions")


def executor_python(root: Path, extra: tuple[str, ...] = (), name: str = "executor-env") -> Path:
    """A Python interpreter whose environment lacks deltacommit (and boto3); ``extra`` names
    more packages it has (``CONNECT_PACKAGES`` for a Connect server's driver-side workers)."""
    env = root / name
    if not (env / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        deps = env / "deps"
        deps.mkdir()
        for package in EXECUTOR_PACKAGES + extra:
            spec = importlib.util.find_spec(package)
            assert spec is not None, f"{package} is not installed"
            if spec.origin is None:  # a namespace package (google): its one folder
                [folder] = list(spec.submodule_search_locations or [])
                origin = Path(folder) / "__init__.py"
            else:
                origin = Path(spec.origin)
            target = origin.parent if origin.name == "__init__.py" else origin
            (deps / target.name).symlink_to(target)
            libs = target.parent / f"{package}.libs"  # manylinux wheels' bundled shared libraries
            if libs.is_dir():
                (deps / libs.name).symlink_to(libs)
        [site] = list((env / "lib").glob("python3*/site-packages"))
        (site / "executor-deps.pth").write_text(str(deps) + "\n")
    python = env / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pyarrow, pandas, pyspark\n"
                            "import importlib.util as u\n"
                            "assert u.find_spec('deltacommit') is None\n"
                            "assert u.find_spec('boto3') is None"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConnectServer:
    """A local Spark Connect server whose Python workers run ``worker_python`` (its executors'
    and the driver-side worker that runs a streaming query's ``foreachBatch`` function), with
    ``workdir`` as its working folder and ``workdir/tmp`` as its Python workers' temp folder."""

    def __init__(self, worker_python: Path, workdir: Path) -> None:
        self.worker_python = worker_python
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def tmpdir(self) -> Path:
        """The temp folder of the server's Python workers."""
        return self.workdir / "tmp"

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def __enter__(self) -> ConnectServer:
        import pyspark

        home = Path(pyspark.__file__).parent
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": str(self.worker_python),
               "SPARK_LOG_DIR": str(self.workdir), "SPARK_PID_DIR": str(self.workdir),
               "TMPDIR": str(self.tmpdir)}
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        conf = {"spark.connect.grpc.binding.port": str(self.port),
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.sql.session.timeZone": "UTC",
                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
        args = [str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]"]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        log = open(self.workdir / "server.log", "wb")
        # The server's working folder is ``workdir``: relative paths (a streaming query's
        # checkpoint) are resolved there, not where the clients run.
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("Spark Connect server exited: "
                                   + (self.workdir / "server.log").read_text()[-2000:])
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.2)  # polling a port that is not open yet; nothing to wait on instead
        self.__exit__(None, None, None)
        raise RuntimeError("Spark Connect server did not open its port within 120 s")

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
