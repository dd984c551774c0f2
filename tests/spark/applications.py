"""Runs several Spark applications (writer_app.py, each its own process and SparkSession,
standing for separate hosts) against one table, started together, and collects what each
acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

APP = Path(__file__).with_name("writer_app.py")


def run_writer_apps(uri: str, envs: Sequence[Mapping[str, str]], logs: Sequence[Path], *,
                    commits: int, rows: int, timeout: float = 240) -> list[dict[str, Any]]:
    """Start one application per environment, release them together once all are ready, and
    return the JSON lines they printed (one per acknowledged commit, then one per window).

    Each application writes ``commits`` batches of ``rows`` rows as writer ``w`` (its index).
    Spark's logs go to files: a full stderr pipe would stall an application.  A failed or
    silent application fails the caller with the tail of its log.
    """
    apps = [subprocess.Popen(
        [sys.executable, str(APP), "--uri", uri, "--writer", str(w), "--commits", str(commits),
         "--rows", str(rows)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=log.open("w"), text=True, env=dict(env))
        for w, (env, log) in enumerate(zip(envs, logs, strict=True))]
    try:
        for app, log in zip(apps, logs, strict=True):
            assert app.stdout is not None
            line = app.stdout.readline()
            assert line.strip() == "ready", \
                f"application did not start: {line!r}\n{log.read_text()[-3000:]}"
        for app in apps:
            assert app.stdin is not None
            app.stdin.write("go\n")
            app.stdin.flush()
        outputs = [app.communicate(timeout=timeout)[0] for app in apps]
    finally:
        for app in apps:
            if app.poll() is None:
                app.kill()
                app.wait()
    for app, log in zip(apps, logs, strict=True):
        assert app.returncode == 0, log.read_text()[-3000:]
    return [json.loads(x) for out in outputs for x in out.splitlines() if x.startswith("{")]
