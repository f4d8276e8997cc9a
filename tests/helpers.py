"""Helpers the tests share: the CLI as a user runs it, and the process table."""

from __future__ import annotations

import contextlib
import io
import json
import locale
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from colltune.backends.openmpi.install import OpenMPI


def tune_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `tune ...` in a fresh process (in `cwd`, else here), as a user would: forked
    from a process that has imported its heavy modules already (cli_zygote.py;
    COLLTUNE_TEST_FORK=0: started with `python -m colltune.cli` instead)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "colltune.cli", *args]
    if os.environ.get("COLLTUNE_TEST_FORK") == "0":
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=full_env, check=False, cwd=cwd)
    return _Zygote.get().run(cmd, full_env, timeout, cwd)


class _Zygote:
    """The forking process (started once per test session, ends with it)."""

    _one: _Zygote | None = None

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name(
            "cli_zygote.py"))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            bufsize=1)

    @classmethod
    def get(cls) -> _Zygote:
        if cls._one is None or cls._one.proc.poll() is not None:
            cls._one = cls()
        return cls._one

    def _answer(self) -> dict[str, int]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the CLI's forking process ended (tests/cli_zygote.py)")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, cmd: list[str], env: dict[str, str], timeout: float,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`cmd` (python -m colltune.cli ARGS) as a forked process with `env`, in `cwd`."""
        args = cmd[3:]
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with tempfile.TemporaryDirectory(prefix="colltune-cli-") as tmp:
            out, err = Path(tmp) / "out", Path(tmp) / "err"
            self.proc.stdin.write(json.dumps({"args": args, "env": env,
                                              "cwd": str(cwd or os.getcwd()),
                                              "stdout": str(out), "stderr": str(err)}) + "\n")
            self.proc.stdin.flush()
            pid = self._answer()["pid"]
            try:
                ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
                if not ready:  # as subprocess.run(timeout=) does: kill it, then say so
                    os.kill(pid, signal.SIGKILL)
                    self._answer()
                    raise subprocess.TimeoutExpired(cmd, timeout, _text(out), _text(err))
                status = self._answer()["status"]
            except subprocess.TimeoutExpired:
                raise
            except BaseException:  # interrupted (a test's timeout): no answer left behind
                for victim in (pid, self.proc.pid):
                    with contextlib.suppress(OSError):
                        os.kill(victim, signal.SIGKILL)
                _Zygote._one = None
                raise
            return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(status),
                                               _text(out), _text(err))


def rows_per_collective(db: Path) -> dict[str, int]:
    """How many measurements a store holds of each collective (what a resumed tune must
    not measure again)."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT collective, COUNT(*) FROM measurements GROUP BY "
                                "collective").fetchall())
    finally:
        con.close()


def foreign_database(path: Path, table: str) -> bytes:
    """An SQLite database that is not a colltune store (one table of its own), and its
    bytes, to show a command left it as it was."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {table} (x)")
    con.commit()
    con.close()
    return path.read_bytes()


def _text(path: Path) -> str:
    """A captured stream decoded as subprocess.run(text=True) decodes it (the locale's
    encoding, universal newlines)."""
    data = path.read_bytes() if path.exists() else b""
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)
                            ).read()


def collbench_pids() -> list[int]:
    """Kernel processes of this test session (its kernels live under the session's own
    XDG_CACHE_HOME), so other jobs running a kernel on the machine do not count: the
    program a process runs (argv[0]) is a collbench under that directory. (Matching the
    whole command line and leaving out any with "pytest" in it left out every kernel too,
    the session's directory being pytest's: the "left ranks running" checks could not
    fail.)"""
    mine = os.environ.get("XDG_CACHE_HOME", "").encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                argv0 = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if os.path.basename(argv0).startswith(b"collbench") and argv0.startswith(mine):
                out.append(int(d))
    return out


def ranks_left(before: set[int], within: float = 10.0) -> set[int]:
    """The session's kernel processes not in `before` still alive after `within` seconds
    (none: returns as soon as they are gone). A tuner killed with SIGKILL cleans nothing up:
    its mpirun dies with it (PR_SET_PDEATHSIG) and Open MPI 4.1's ranks notice and end by
    themselves, 0.7-1.0 s later here; a check one second after the kill caught some."""
    deadline = time.monotonic() + within
    while (left := set(collbench_pids()) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def rx_bytes(ns: str, dev: str) -> int:
    """Bytes the device received (its sysfs counter, read inside its namespace)."""
    return int(subprocess.run(["ip", "netns", "exec", ns, "cat",
                               f"/sys/class/net/{dev}/statistics/rx_bytes"],
                              capture_output=True, text=True, check=True).stdout)


def lo_traffic(ns: str, cmd: list[str], env: dict[str, str], timeout: float = 120
               ) -> tuple[int, list[dict]]:
    """Bytes over the namespace's loopback while `cmd` (run inside it) measures, and the
    kernel's events. The count stops at the kernel's `done` event and the job is then
    killed: MPICH 4.0.2 over UCX's TCP transport often hangs in MPI_Finalize."""
    import json
    import signal
    import time

    def lo() -> int:
        return rx_bytes(ns, "lo")

    before = lo()
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                events.append(json.loads(line))
                if events[-1]["event"] == "done":
                    break
            if time.monotonic() > deadline:
                break
        return lo() - before, events
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# Per-rank traffic of an MPI job whose messages all go through sockets (MPICH with
# MPIR_CVAR_NOLOCAL=1 and a TCP transport): strace on every rank records each send syscall
# and the bytes it moved. Hydra's PMI_RANK names the file of each rank.
SEND_CALLS = "sendmsg,sendto,sendmmsg,writev"
_SEND = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)\b.*= (\d+)$")


# what MPICH 5 moves large messages between the ranks of one node with (cross-memory
# attach: the reader's calls, a failed probe aside)
PULL_CALLS = "process_vm_readv,process_vm_writev"


def traced_command(trace_dir: Path, launcher: list[str], program: list[str],
                   calls: str = SEND_CALLS) -> list[str]:
    """`launcher program...` with every rank of the program run under strace."""
    shell = (f"exec strace -f -qq -e trace={calls} -o {trace_dir}/rank$PMI_RANK "
             '"$0" "$@"')
    return [*launcher, "sh", "-c", shell, *program]


@dataclass(frozen=True)
class RankSends:
    """What one rank sent: bytes over all send calls, and the calls of at least `big`
    bytes (message payloads, not protocol chatter)."""

    nbytes: int
    big: int


def rank_sends(trace_dir: Path, big: int = 1024) -> dict[int, RankSends]:
    out = {}
    for f in sorted(trace_dir.glob("rank*")):
        sizes = [int(m.group(2)) for m in map(_SEND.match, f.read_text().splitlines()) if m]
        out[int(f.name[4:])] = RankSends(sum(sizes), sum(s >= big for s in sizes))
    return out


# Environment modules loaded by the real interpreters, with the module commands stubbed:
# what a module sets is what these return, and anything else it would do runs for real.
_TCL_STUB = """
proc hex {s} { return [binary encode hex [encoding convertto utf-8 $s]] }
proc setenv {k v} { puts "[hex $k] [hex $v]" }
proc module-whatis {args} {}
proc conflict {args} {}
proc prereq {args} {}
proc module-info {what args} { if {$what eq "mode" && $args eq {}} { return load }; return 0 }
source [lindex $argv 0]
"""
_LUA_STUB = """
local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
function setenv(k, v) io.write(hex(k), " ", hex(v), "\\n") end
function whatis(s) end
function help(s) end
function family(s) end
function prereq(s) end
function mode() return "load" end
dofile(arg[1])
"""


def module_env(path: Path, cwd: Path | None = None, env: dict[str, str] | None = None
               ) -> dict[str, str]:
    """The variables a Tcl module (or, for *.lua, a Lua module) sets, by running it (being
    loaded; `env`: the environment it is loaded in)."""
    lua = path.suffix == ".lua"
    cmd = (["lua", "-e", _LUA_STUB.replace("arg[1]", repr(str(path)))] if lua
           else ["tclsh", "/dev/stdin", str(path)])
    res = subprocess.run(cmd, input=None if lua else _TCL_STUB, capture_output=True,
                         text=True, timeout=30, cwd=cwd, check=False, env=env)
    if res.returncode != 0:
        raise AssertionError(f"{cmd[0]} cannot load {path}: {res.stderr}")
    out = {}
    for line in res.stdout.splitlines():
        k, _, v = line.partition(" ")
        out[bytes.fromhex(k).decode()] = bytes.fromhex(v).decode()
    return out


def export_site(source: Path, site: Path, conf: str, setting: dict[str, str]) -> None:
    """`tune export --site` of `source`: the parameter file `conf` and the Tcl module hold
    every value of `setting`."""
    res = tune_cli("export", "--from", str(source), "--site", str(site))
    assert res.returncode == 0, res.stderr
    text = (site / conf).read_text()
    for k, v in setting.items():
        assert f"{k} = {v}" in text


@contextlib.contextmanager
def commands_built_once() -> Iterator[None]:
    """typer's CliRunner rebuilds the parsers of all of tune's commands at every invoke
    (about 50 ms); they are the same each time, so in here each app's are built once."""
    import functools

    import typer.main
    import typer.testing

    built = typer.testing._get_command
    typer.testing._get_command = functools.cache(typer.main.get_command)
    try:
        yield
    finally:
        typer.testing._get_command = built


def mpirun_args(mpi: OpenMPI, np: int, oversubscribe: bool, hostfile: str | None = None,
                mca: dict[str, str] | None = None) -> list[str]:
    """mpirun's command line for a kernel launch on this machine (tests only)."""
    from colltune.launchers import Layout, command

    return command("mpirun", str(mpi.mpirun), Layout(np, hostfile=hostfile,
                                                      oversubscribe=oversubscribe), mca)


def check_app_verdict(r: subprocess.CompletedProcess[str], v: dict[str, object]) -> None:
    """A verify --app result: each measure's verdict with its power (the interval and the
    smallest slowdown it could have seen), and the exit code that verdict gives."""
    measures: dict[str, dict[str, object]] = v["measures"]  # type: ignore[assignment]
    assert set(measures) == {"wall", "collectives", "command"}
    for m in measures.values():
        assert m["verdict"] in ("faster", "same", "not slower", "slower", "inconclusive"), m
        assert len(m["default_s"]) == len(m["tuned_s"]) == v["pairs"]  # type: ignore[arg-type]
        assert m["ratio"] > 0 and m["interval"][0] <= m["ratio"] <= m["interval"][1]  # type: ignore[index, operator]
        assert m["could_see"] is None or m["could_see"] > 1  # type: ignore[operator]
        if m["verdict"] == "inconclusive":
            assert m["reason"], m
        if m["verdict"] == "not slower":  # its interval below the threshold's slowdown
            assert m["interval"][1] < 1 + v["threshold"], m  # type: ignore[index, operator]
    wall = measures["wall"]["verdict"]
    assert r.returncode == {"slower": 1, "inconclusive": 5}.get(wall, 0), r.stderr[-3000:]
    assert "could see" in r.stdout and "Traceback" not in r.stderr


MELT = Path("/usr/share/lammps/examples/melt/in.melt")  # Debian's lammps-examples


def short_melt(dest: Path, steps: int = 50) -> Path:
    """LAMMPS's melt example written to `dest` (a directory) with `steps` time steps
    instead of its 250: the tests running it check what the library read back and that
    loop times were compared, not the physics, and its 250 steps took 2.5 s a run at 4
    ranks on this machine's 2 cores, a dozen runs a test."""
    text, n = re.subn(r"^run\s+\d+\s*$", f"run\t\t{steps}", MELT.read_text(), flags=re.M)
    assert n == 1, f"{MELT}: not one `run` line (the example changed?)"
    out = dest / "in.melt"
    out.write_text(text)
    return out
