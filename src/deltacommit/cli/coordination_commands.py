"""The ``deltacommit coordination`` command."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Nothing registered yet."""
