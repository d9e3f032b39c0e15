"""The supervisor's lines in the job's log (its stderr, which the batch script's output holds)."""

from __future__ import annotations

import subprocess
import sys
import time


def log(text: str) -> None:
    """One line of the job's log, as the job script's ``ck_log`` writes it."""
    print(f"clusterkit: {time.strftime('%H:%M:%S', time.gmtime())} {text}", file=sys.stderr, flush=True)


def say(text: str) -> None:
    print(f"clusterkit: {text}", file=sys.stderr, flush=True)


def relay(answer: subprocess.CompletedProcess[str]) -> None:
    """A client's own words (its stderr, bounded and cleaned by slurmclient), in the job's log."""
    if answer.stderr.strip():
        print(answer.stderr.rstrip("\n"), file=sys.stderr, flush=True)
