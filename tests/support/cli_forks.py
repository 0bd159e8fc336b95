"""Many `skewgate` CLI calls at once, each a process of its own, without each paying for its imports.

A promote process spends most of its CPU importing (mlflow alone is seconds on a 2-core machine), and the race
tests start sixty of them. Here one warm process imports the CLI and what promote loads, once, and forks a child
per call: every call is still its own process (its own pid, alive or gone, its own exit code and stderr), which is
what the contention between promotions is about; only the start-up is shared. The warm process has no threads
when it forks (MLflow's telemetry, its one background thread, is off in the tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.warm_process import WarmProcess

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

    def __init__(self, process: WarmProcess) -> None:
        self._process = process

    def run(self, argvs: Sequence[Sequence[str]]) -> list[Call]:
        """Every argv (without the `skewgate` in front) at the same time; their exit codes and stderr, in order."""
        return [Call(code, stderr) for code, stderr in self._process.ask([list(a) for a in argvs])]


@contextmanager
def warm_cli(*, deadline_s: float = 60.0) -> Iterator[Forks]:
    """A warm CLI process for the block; stopped (stdin closed, then killed after `deadline_s`) on the way out."""
    process = WarmProcess(_WARM)
    try:
        yield Forks(process)
    finally:
        process.close(deadline_s=deadline_s)
