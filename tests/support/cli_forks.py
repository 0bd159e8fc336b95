"""Many `skewgate` CLI calls at once, each a process of its own, without each paying for its imports.

A promote process spends most of its CPU importing (mlflow alone is seconds on a 2-core machine), and the race
tests start sixty of them. Here one warm process imports the CLI and what promote loads, once, and forks a child
per call: every call is still its own process (its own pid, alive or gone, its own exit code and stderr), which is
what the contention between promotions is about; only the start-up is shared. The warm process has no threads
when it forks (MLflow's telemetry, its one background thread, is off in the tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

_WARM = r"""
import json, logging, os, sys, tempfile
import mlflow  # noqa: F401 - the point: imported once, before the forks
import skewgate.common.mlflow_log, skewgate.promote.core, skewgate.promote.run  # noqa: F401
from skewgate.cli import main

for line in sys.stdin:
    children = []
    for argv in json.loads(line):
        stderr = tempfile.TemporaryFile()
        pid = os.fork()
        if pid == 0:  # the child: one CLI call, as `skewgate ARGV` would make it
            os.dup2(stderr.fileno(), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stdout is the batch's answer: never the child's
            code = 70
            try:
                code = main(argv)
            except SystemExit as end:
                code = end.code if isinstance(end.code, int) else 2
            finally:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append((pid, stderr))
    results = []
    for pid, stderr in children:
        _, status = os.waitpid(pid, 0)
        stderr.seek(0)
        results.append([os.waitstatus_to_exitcode(status), stderr.read().decode(errors="replace")])
    print(json.dumps(results), flush=True)
"""


@dataclass(frozen=True)
class Call:
    returncode: int
    stderr: str


class Forks:
    """Runs a batch of CLI calls at once (`run`), each in a child forked from the warm process."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def run(self, argvs: Sequence[Sequence[str]]) -> list[Call]:
        """Every argv (without the `skewgate` in front) at the same time; their exit codes and stderr, in order."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps([list(a) for a in argvs]) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm CLI process ended (exit {self._process.wait()})")
        return [Call(code, stderr) for code, stderr in json.loads(line)]


@contextmanager
def warm_cli(*, deadline_s: float = 60.0) -> Iterator[Forks]:
    """A warm CLI process for the block; stopped (stdin closed, then killed after `deadline_s`) on the way out."""
    process = subprocess.Popen([sys.executable, "-c", _WARM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        yield Forks(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
