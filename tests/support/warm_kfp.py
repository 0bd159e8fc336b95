"""kfp.local's subprocess runner, each task forked from one warm process instead of started as a new Python.

`SubprocessRunner` runs every task as `sh -ec '… python -m kfp.dsl.executor_main …' SOURCE ARGS…`: a new
interpreter that imports kfp, then mlflow, torch and ONNX Runtime as the step's body asks, seconds of CPU per task
on a 2-core machine before the step does anything, and the release-gate tests run dozens of tasks. Here one warm
process imports those once and forks a child per task, which does what that shell line does: writes SOURCE to
`ephemeral_component.py` in a new temporary folder and runs `kfp.dsl.executor_main` with `_KFP_RUNTIME=true`, the
task's environment and working directory. kfp.local's orchestration, the executor, the step code and every
output file are the real ones; only the interpreter start is shared. A command of any other shape runs as
kfp.local would run it. The demo (`make demo`, run by CI before the tests) and the README's quickstart test run
the pipelines with no fork at all.

Like `cli_forks`, the warm process forks with no Python thread running (MLflow's telemetry is off in the tests);
the native pools that numpy, torch and the allocator start at import have fork handlers of their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tests.support.warm_process import WarmProcess

_WARM = r"""
import json, os, sys, tempfile, threading, traceback
import kfp.dsl.executor_main
import matplotlib
matplotlib.use("Agg")
# what the steps' bodies import (measured: the modules a task's child added to sys.modules), but tritonclient's
# gevent, which probe alone uses
import matplotlib.pyplot, mlflow, mlflow.onnx, mlflow.pyfunc, mlflow.tracking, numpy, onnx, onnxruntime
import onnxruntime.transformers.float16, onnxscript, pandas, PIL.Image, pyarrow, scipy.stats, torch, torch.onnx
import skewgate.common.mlflow_log, skewgate.common.recording, skewgate.common.kfp_io
assert threading.active_count() == 1, f"a thread would not survive the forks: {threading.enumerate()}"

for line in sys.stdin:
    task = json.loads(line)
    output = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the child: what `sh -ec SCRIPT SOURCE ARGS...` does, without starting Python again
        code = 1
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the warm process's stdin carries the tasks
            os.dup2(output.fileno(), 1)
            os.dup2(output.fileno(), 2)
            os.chdir(task["cwd"])
            os.environ.clear()
            os.environ.update(task["env"], _KFP_RUNTIME="true")
            program = tempfile.mkdtemp()
            module = os.path.join(program, "ephemeral_component.py")
            with open(module, "w", encoding="utf-8") as handle:
                handle.write(task["source"])
            sys.argv = ["executor_main", "--component_module_path", module, *task["args"]]
            kfp.dsl.executor_main.executor_main()
            code = 0
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    output.seek(0)
    print(json.dumps([os.waitstatus_to_exitcode(status), output.read().decode(errors="replace")]), flush=True)
"""

_EXECUTOR = "-m kfp.dsl.executor_main"


class WarmExecutor:
    """Runs kfp.local tasks (`run`, the signature of `kfp.local.subprocess_task_handler.run_local_subprocess`)
    in children of a warm process started on the first task."""

    def __init__(self, fallback: Callable[..., int]) -> None:
        self._fallback = fallback
        self._warm = WarmProcess(_WARM)

    def run(self, full_command: list[str], env_vars: Mapping[str, str] | None = None) -> int:
        if len(full_command) < 4 or full_command[:2] != ["sh", "-ec"] or _EXECUTOR not in full_command[2]:
            return self._fallback(full_command, env_vars)
        code, output = self._warm.ask({"source": full_command[3], "args": full_command[4:], "cwd": os.getcwd(),
                                       "env": {**os.environ, **(env_vars or {})}})
        print(output, end="")  # where kfp.local prints a task's log: run_locally sends it to its log file
        print("\n")
        return int(code)

    def close(self) -> None:
        self._warm.close()


@contextmanager
def warm_kfp_tasks(monkeypatch: Any) -> Iterator[WarmExecutor]:
    """kfp.local's subprocess runner runs its tasks through a `WarmExecutor` for the block (`monkeypatch`: a
    `pytest.MonkeyPatch`, undone by its owner)."""
    from kfp.local import subprocess_task_handler

    executor = WarmExecutor(subprocess_task_handler.run_local_subprocess)
    monkeypatch.setattr(subprocess_task_handler, "run_local_subprocess", executor.run)
    try:
        yield executor
    finally:
        executor.close()
