"""The shipped pipelines run as a user runs them: ``make demo``'s script on a local table, and the
S3 + DynamoDB example against a local moto, each a separate process with its own Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--writers", "3", "--stages", "4", "--rows", "300"]


def run_example(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *SMALL, *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.spark
@pytest.mark.parametrize("script,args", [("demo.py", ()),
                                         ("s3_dynamodb_pipeline.py", ("--local-servers",))])
def test_example_pipeline_verifies(script: str, args: tuple[str, ...]) -> None:
    out = run_example(script, *args)
    writers = [line for line in out.splitlines() if line.strip().startswith("writer s")]
    assert len(writers) == 3 and all("FAILED" not in w and "4 commits" in w for w in writers), out
    assert "exactly-once: re-running stage 3 of s0 -> skipped" in out
    assert "final version 13 (1 create + 12 stage commits)" in out
    assert "verification: OK" in out
