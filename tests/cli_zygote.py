"""Runs `python -m colltune.cli ARGS` for the tests as a fresh process forked from this one,
which has already imported numpy, scipy.stats, typer, rich and colltune below its CLI:
about 1 s a command here, paid by hundreds of `tune` commands a suite runs. Each command
is its own process (its pid, its environment, its working directory, stdin from
/dev/null, stdout and stderr to files), and colltune's CLI is imported in it, after its
environment is set, as `-m` would.

Protocol (one request at a time, JSON lines): the parent writes {"args", "env", "cwd",
"stdout", "stderr"}; this answers {"pid"} once forked, then {"status"} (the wait status)."""

from __future__ import annotations

import json
import os
import sys

# no BLAS threads: a process that forks must not hold threads another one owns
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"

import numpy  # noqa: E402,F401
import rich.console  # noqa: E402,F401
import rich.progress  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
import typer  # noqa: E402,F401

# colltune below its CLI (no module of these reads the environment or a terminal at import;
# colltune.cli.common builds its consoles from both, so the CLI is imported in each child)
import colltune.backends.registry  # noqa: E402,F401
import colltune.tuner.run  # noqa: E402,F401


def _child(req: dict) -> None:  # type: ignore[type-arg]
    code = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        sys.path[0] = os.getcwd()  # as `python -m` has it
        sys.argv = ["-m", *req["args"]]
        import runpy

        try:
            runpy.run_module("colltune.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        import atexit

        atexit._run_exitfuncs()  # what interpreter shutdown would run (temp dirs, ...)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 (a closed stream: nothing left to write)
                pass
        os._exit(code & 0xFF)


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main()
