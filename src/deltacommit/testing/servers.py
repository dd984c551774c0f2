"""Local S3 and DynamoDB servers for tests, benchmarks and stress runs.

moto serves S3 and DynamoDB on one port, but its conditional writes check and then write with
no lock between: served on threads (as ``moto_server`` always does), racing ``If-None-Match``
puts or conditional ``PutItem`` calls can both succeed.  Everything here that relies on mutual
exclusion therefore runs moto on a single thread, in its own process, where requests are handled
one at a time.  dynalite is a second, independent DynamoDB implementation, so DynamoDB code is
shown not to depend on one emulator's quirks.

Servers bind port 0 themselves and report the port they got, so parallel test runs never race
for a port; each server process exits when its parent closes its stdin or dies, so no server
outlives the run that started it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 60.0

#: Environment for processes that talk to the local servers: dummy credentials, a fixed region,
#: no instance-metadata lookups (the metadata endpoint is unreachable and each lookup would
#: stall), and no developer profile or endpoint leaking in from the shell.
TEST_AWS_ENV: Mapping[str, str] = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
#: Variables removed from a test environment because they would redirect or re-authenticate.
TEST_AWS_ENV_REMOVED: tuple[str, ...] = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ALLOW_HTTP",
    "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_S3_LOCKING_PROVIDER",
    "AWS_CONDITIONAL_PUT", "DELTA_DYNAMO_TABLE_NAME",
)


def apply_test_aws_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Point AWS SDKs (boto3, deltalake, obstore) at dummy credentials and no real account."""
    env = os.environ if environ is None else environ
    for name in TEST_AWS_ENV_REMOVED:
        env.pop(name, None)
    env.update(TEST_AWS_ENV)


class S3Bucket(NamedTuple):
    """A bucket on a local server and the storage options that reach it."""

    name: str
    storage_options: dict[str, str]

    @property
    def uri(self) -> str:
        return f"s3://{self.name}"


class S3Implementation(NamedTuple):
    """One S3 server of a test run: its name (moto, localstack), endpoint and a boto3 client."""

    name: str
    endpoint: str
    client: Any


def s3_storage_options(endpoint: str, *, region: str = "us-east-1") -> dict[str, str]:
    """deltalake-style options for a local endpoint with the rig's dummy credentials."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": region,
        "AWS_ACCESS_KEY_ID": TEST_AWS_ENV["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": TEST_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        "AWS_ALLOW_HTTP": "true",
    }


def unique_name(prefix: str) -> str:
    """A bucket or table name no other test uses (lower case, valid for S3 and DynamoDB)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


# --------------------------------------------------------------------------- server processes


class ServerStartError(RuntimeError):
    """A local server did not start; the message carries its log."""


def proc_stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, CPU seconds of the process, CPU seconds of its reaped children) from
    ``/proc`` (Linux); None where it cannot be read (gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    # Fields 4 (ppid) and 14-17 (utime, stime, cutime, cstime) of proc(5), counted after the
    # command name, which may itself hold spaces and parentheses.
    fields = text[text.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks,
            (int(fields[13]) + int(fields[14])) / ticks)


class ServerProcess:
    """A server in a child process that prints its port on the first line of stdout."""

    name = "server"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port: int | None = None

    # Subclasses say how to run themselves.
    def command(self) -> list[str]:
        raise NotImplementedError

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        apply_test_aws_environment(env)
        return env

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.name} is not running")
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def cpu_seconds(self) -> float | None:
        """CPU time the server process has used so far (user + system), where ``/proc`` tells
        (Linux); None elsewhere.  A benchmark against a single-threaded server reads how busy
        the server was from it: near 1 per second of wall time, the server is what limits."""
        stat = None if self._proc is None else proc_stat(self._proc.pid)
        return None if stat is None else stat[1]

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self._log = tempfile.TemporaryFile(prefix=f"deltacommit-{self.name}-")  # noqa: SIM115
        self._proc = subprocess.Popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=self.child_env(), close_fds=True)
        try:
            self.port = self._read_port(self._proc)
            self._wait_answering()
        except BaseException:
            self.stop()
            raise

    def _read_port(self, proc: subprocess.Popen[bytes]) -> int:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerStartError(f"{self.name} did not report its port within "
                                       f"{START_TIMEOUT_SECONDS:.0f} s; log:\n{self.log()}")
            ready, _, _ = select.select([proc.stdout], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 64)
            if not chunk:
                proc.wait(timeout=10)
                raise ServerStartError(
                    f"{self.name} exited with status {proc.returncode} before it listened; "
                    f"command {' '.join(self.command())!r}; log:\n{self.log()}")
            line += chunk
        # The child writes nothing more on stdout; closing our end keeps no pipe to fill.
        proc.stdout.close()
        try:
            return int(line.strip())
        except ValueError:
            raise ServerStartError(f"{self.name} printed {line!r} instead of its port; "
                                   f"log:\n{self.log()}") from None

    def _wait_answering(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=5):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer means it serves requests
            except OSError as e:
                if not self.running or time.monotonic() > deadline:
                    raise ServerStartError(f"{self.name} at {self.endpoint} does not answer "
                                           f"({e}); log:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        """What the server wrote on stderr (for failure messages)."""
        if self._log is None or self._log.closed:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-8000:]

    def stop(self) -> None:
        """Stop the server and wait until its process has exited and its port is closed."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the child exits when its stdin closes
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None and not proc.stdout.closed:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.endpoint if self.port is not None and self.running else "stopped"
        return f"{type(self).__name__}({where})"


# The child keeps a thread blocked on stdin: EOF means the parent closed it or died.
#
# After each response werkzeug's development server waits up to 10 ms for the client to send
# more or hang up, to discard a request body the application did not read.  Its one thread
# serves no one meanwhile: a client that closes late (a Python thread waiting its turn for the
# interpreter, a process waiting for a core) stalls every other client, which S3 never does.
# moto reads every body it is sent, so the child discards only what has already arrived.
_MOTO_CHILD = """
import logging, os, selectors, sys, threading, types
logging.getLogger("werkzeug").setLevel(logging.ERROR)
import werkzeug.serving
class _Arrived(selectors.DefaultSelector):
    def select(self, timeout=None):
        return super().select(0)
werkzeug.serving.selectors = types.SimpleNamespace(
    DefaultSelector=_Arrived, EVENT_READ=selectors.EVENT_READ)
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app)
app = DomainDispatcherApplication(create_backend_app)
# threaded=False: one request at a time, which makes moto's check-then-write conditional
# operations atomic.
server = make_server("127.0.0.1", 0, app, threaded=False, processes=1,
                     request_handler=MotoRequestHandler)
os.environ["MOTO_PORT"] = str(server.server_port)
def _watch_parent():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=_watch_parent, daemon=True).start()
sys.stdout.write(f"{server.server_port}\\n")
sys.stdout.flush()
server.serve_forever()
"""


class MotoServer(ServerProcess):
    """moto's S3 and DynamoDB on one loopback port, serving one request at a time."""

    name = "moto"

    def __init__(self, python: str | None = None) -> None:
        super().__init__()
        self.python = python or sys.executable

    def command(self) -> list[str]:
        return [self.python, "-c", _MOTO_CHILD]

    def reset(self) -> None:
        """Forget every bucket, object and table (one request; for tests sharing a server)."""
        self._post("/moto-api/reset", b"")

    def set_auth(self, enforce: bool) -> None:
        """Make moto check credentials and signatures (IAM users only) from now on, or stop."""
        self._post("/moto-api/reset-auth", b"0" if enforce else b"inf")

    def _post(self, path: str, body: bytes) -> None:
        # Not form-encoded: moto reads the raw body, which Flask empties for form posts.
        request = urllib.request.Request(self.endpoint + path, data=body, method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def __enter__(self) -> MotoServer:
        self.start()
        return self


_DYNALITE_CHILD = """
const dynalite = require(process.argv[1]);
const server = dynalite({createTableMs: 50, deleteTableMs: 50, updateTableMs: 50});
server.listen(0, '127.0.0.1', () => { process.stdout.write(server.address().port + '\\n'); });
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
"""

DYNALITE_VERSION = "4.0.0"
DYNALITE_INSTALL_HINT = (
    f"dynalite is not installed: run `make test`, which installs it into .tools "
    f"(or `npm install --prefix .tools dynalite@{DYNALITE_VERSION}` in the repository root)")


def tools_dirs(start: Path | None = None) -> list[Path]:
    """Where ``make`` may have installed the rig's tools (``.tools``), most specific first.

    ``DELTACOMMIT_TOOLS_DIR`` names the ``.tools`` folder explicitly; otherwise the search starts
    at ``start`` (default: the working directory) and at this package's source folder, and goes
    upwards.
    """
    candidates: list[Path] = []
    explicit = os.environ.get("DELTACOMMIT_TOOLS_DIR")
    if explicit:
        candidates.append(Path(explicit))
    for origin in (start or Path.cwd(), Path(__file__).resolve()):
        for directory in (origin, *origin.parents):
            candidates.append(directory / ".tools")
    return candidates


def find_dynalite(start: Path | None = None) -> Path | None:
    """The ``dynalite`` package folder under ``.tools/node_modules`` (see ``tools_dirs``)."""
    for tools in tools_dirs(start):
        package = tools / "node_modules" / "dynalite"
        if (package / "package.json").is_file():
            return package
    return None


class DynaliteNotInstalledError(ServerStartError):
    pass


class Dynalite(ServerProcess):
    """dynalite (in memory) on a loopback port; tables become ACTIVE after 50 ms."""

    name = "dynalite"

    def __init__(self, package_dir: str | Path | None = None, node: str | None = None) -> None:
        super().__init__()
        found = Path(package_dir) if package_dir is not None else find_dynalite()
        if found is None or not (found / "package.json").is_file():
            raise DynaliteNotInstalledError(DYNALITE_INSTALL_HINT)
        self.package_dir = found.resolve()
        node_path = node or shutil.which("node")
        if node_path is None:
            raise DynaliteNotInstalledError("node is not on PATH; dynalite needs Node.js")
        self.node = node_path

    def command(self) -> list[str]:
        return [self.node, "-e", _DYNALITE_CHILD, str(self.package_dir)]

    def __enter__(self) -> Dynalite:
        self.start()
        return self


# --------------------------------------------------------------------------- LocalStack's S3

LOCALSTACK_VERSION = "2026.3.0"
#: LocalStack 2026.3 runs on this Python only; ``make test`` installs it into its own venv.
LOCALSTACK_PYTHON = (3, 13)
LOCALSTACK_VENV = "localstack-venv"
LOCALSTACK_INSTALL_HINT = (
    f"LocalStack {LOCALSTACK_VERSION} is not installed: run `make test`, which installs it into "
    f".tools/{LOCALSTACK_VENV} with Python {'.'.join(map(str, LOCALSTACK_PYTHON))} (or `make "
    f".tools/.localstack-{LOCALSTACK_VERSION}` in the repository root)")


def find_python(version: tuple[int, int], *, search_pyenv: bool = True) -> str | None:
    """An interpreter of ``version`` that runs: ``pythonX.Y`` on the PATH (a pyenv shim that
    selects no such version does not run), else one of pyenv's installed versions."""
    name = f"python{version[0]}.{version[1]}"
    candidates = [shutil.which(name)]
    if search_pyenv:
        root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
        pattern = f"{version[0]}.{version[1]}*/bin/{name}"
        candidates += [str(p) for p in sorted((root / "versions").glob(pattern))]
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == str(version):
            return candidate
    return None


def find_localstack(start: Path | None = None) -> Path | None:
    """The Python of the LocalStack venv ``make`` installed (its stamp file written only once
    the install succeeded), or None."""
    for tools in tools_dirs(start):
        python = tools / LOCALSTACK_VENV / "bin" / "python"
        if (tools / f".localstack-{LOCALSTACK_VERSION}").is_file() and python.is_file():
            return python
    return None


class LocalStackUnavailableError(ServerStartError):
    """No LocalStack to start: ``reason`` says whether Python 3.13 or the install is missing,
    and ``installable`` whether ``make`` could install it on this machine."""

    def __init__(self, reason: str, *, installable: bool) -> None:
        super().__init__(reason)
        self.installable = installable


# Runs under the LocalStack venv's Python.  It picks a free port, gives S3 objects a folder of
# this server's own (LocalStack's default is one fixed folder that every instance would share),
# runs LocalStack's runtime in this process, and prints the port once S3 answers; it exits when
# its parent closes its stdin or dies, as the other servers here do.
_LOCALSTACK_CHILD = """
import json, os, runpy, socket, sys, threading, time, urllib.request
# LocalStack prints a banner on stdout: the port goes to the parent on the original stdout,
# everything LocalStack prints to the log (stderr).
report = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ["GATEWAY_LISTEN"] = f"127.0.0.1:{port}"
import localstack.services.s3.provider as provider
provider.DEFAULT_S3_TMP_DIR = os.path.join(sys.argv[1], "s3-objects")
def _watch_parent():
    sys.stdin.buffer.read()
    os._exit(0)
def _report_port():
    url = f"http://127.0.0.1:{port}/_localstack/health"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if json.loads(r.read()).get("services", {}).get("s3") in ("available", "running"):
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    report.write(f"{port}\\n")
    report.close()
threading.Thread(target=_watch_parent, daemon=True).start()
threading.Thread(target=_report_port, daemon=True).start()
sys.argv = ["localstack"]
runpy.run_module("localstack.runtime.main", run_name="__main__", alter_sys=True)
"""


class LocalStackS3(ServerProcess):
    """LocalStack's own S3 provider (not moto's) on a loopback port, without Docker.

    A second S3 implementation: its conditional writes (``If-None-Match``, ``If-Match``) are its
    own code, so a test passing on both servers does not rest on one emulator's quirks.  Its
    multipart completion refuses an existing key but is not atomic under a race (two racing
    completions of one key can both succeed), so that race is checked on moto only.
    Everything it keeps (objects, state, logs) lives in a temporary folder removed when it
    stops.
    """

    name = "localstack"

    def __init__(self, python: str | Path | None = None) -> None:
        super().__init__()
        if python is None:
            found = find_localstack()
            if found is None:
                raise localstack_unavailable()
            python = found
        self.python = str(python)
        self._root: str | None = None

    def command(self) -> list[str]:
        assert self._root is not None
        return [self.python, "-c", _LOCALSTACK_CHILD, self._root]

    def child_env(self) -> dict[str, str]:
        env = super().child_env()
        assert self._root is not None
        env.update({
            "SERVICES": "s3", "PERSISTENCE": "0", "DNS_ADDRESS": "0",
            "SKIP_SSL_CERT_DOWNLOAD": "1", "OVERRIDE_IN_DOCKER": "0",
            "FILESYSTEM_ROOT": os.path.join(self._root, "filesystem"),
            "LOCALSTACK_VOLUME_DIR": os.path.join(self._root, "volume"),
            "DISABLE_EVENTS": "1", "LS_LOG": "warn",
        })
        for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
            env.pop(name, None)  # the child runs its own venv, not the caller's
        return env

    @property
    def root(self) -> str | None:
        """The folder holding everything this server keeps (None when stopped)."""
        return self._root

    def start(self) -> None:
        self._root = tempfile.mkdtemp(prefix="deltacommit-localstack-")
        super().start()

    def stop(self) -> None:
        super().stop()
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> LocalStackS3:
        self.start()
        return self


def localstack_unavailable() -> LocalStackUnavailableError:
    """Why LocalStack cannot be started here: no Python 3.13 (a skip), or not installed yet."""
    wanted = ".".join(map(str, LOCALSTACK_PYTHON))
    if find_python(LOCALSTACK_PYTHON) is None:
        return LocalStackUnavailableError(
            f"Python {wanted} is not available on this machine, and LocalStack "
            f"{LOCALSTACK_VERSION} needs it: the tests against LocalStack's S3 are skipped "
            "(install Python 3.13, then `make test` installs LocalStack)", installable=False)
    return LocalStackUnavailableError(LOCALSTACK_INSTALL_HINT, installable=True)


# --------------------------------------------------------------------------- the newest deltalake

#: The newest deltalake release the suite runs as a peer, in a venv of its own (the test extras
#: pin 1.6.0, the last release with the DynamoDB log store).  From 1.6.1 on deltalake ignores
#: ``AWS_S3_LOCKING_PROVIDER=dynamodb`` and commits by S3 conditional put.
DELTALAKE_LATEST_VERSION = "1.6.6"
DELTALAKE_LATEST_VENV = f"deltalake-{DELTALAKE_LATEST_VERSION}-venv"
DELTALAKE_LATEST_INSTALL_HINT = (
    f"deltalake {DELTALAKE_LATEST_VERSION} is not installed: run `make test`, which installs it "
    f"into .tools/{DELTALAKE_LATEST_VENV} (or `make .tools/.deltalake-{DELTALAKE_LATEST_VERSION}` "
    "in the repository root)")


def find_deltalake_latest(start: Path | None = None) -> Path | None:
    """The Python of the venv holding the newest deltalake (see ``DELTALAKE_LATEST_VERSION``)."""
    for tools in tools_dirs(start):
        python = tools / DELTALAKE_LATEST_VENV / "bin" / "python"
        if (tools / f".deltalake-{DELTALAKE_LATEST_VERSION}").is_file() and python.is_file():
            return python
    return None


def port_is_open(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0
