"""Issue 61: every parser is linear in its input. Each file colltune reads for a library, and
each benchmark output it imports, is given shapes that make a backtracking pattern or a
per-line rescan quadratic (long runs of blanks inside a value, long numbers, many empty
lines, one long line), 100 KB each: a linear reader answers in well under a second, a
quadratic one in over a minute (20,000 blanks took 3 s before; 100,000 would take 75 s,
past the 30 s the test allows). `tune check` and the importers must answer with a result
or one short error line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from colltune.cli import app

N = 100_000
B = " " * N

# what `tune check` reads: each text claimed by the family it imitates (registry.for_file)
CHECKED = {
    "classic-trailing-blanks": "1\n11\n1\n4\n1\n0 1 0 0" + B + "x\n",
    "classic-empty-lines": "1\n11\n1\n4\n" + "\n" * N + "1\n0 1 0 0\n",
    "classic-long-number": "1\n11\n1\n4\n1\n0 1 0 " + "9" * N + "\n",
    "classic-one-long-line": "1 11 1 4 " + "1 " * N + "\n",
    "ompi-runtime-blank-run": "# Open MPI runtime parameters written by colltune\n"
                              "coll_tuned_priority = a" + B + "b\n",
    "ompi-runtime-long-name": "# Open MPI runtime parameters written by colltune\n"
                              + "coll_" + "a" * N + " = 1\n",
    "mvapich2-blank-run": "MV2_USE_SHMEM_COLL=a" + B + "b\n",
    "mvapich2-many-ranges": "MV2_INTER_BCAST_TUNING=" + "1:0-8," * (N // 6) + "\n",
    "mvapich2-export-blanks": "export" + B + "MV2_X=1\n",
    "mpich-env-long-value": "export MPIR_CVAR_BCAST_INTRA_ALGORITHM=" + "a" * N + "\n",
    "mpich-runtime-blank-run": "# MPICH runtime parameters written by colltune\n"
                               "export MPIR_CVAR_X=a" + B + "b\n",
    "mpich-json-long-bound": '{"collective=bcast": {"comm_size<=' + "1" * N + '": {}}}',
    "mpich-json-long-key": '{"collective=' + "b" * N + '": {}}',
    "mpich-json-blanks": "{" + B + '"collective=bcast"' + B + ": {}}",
    "impi-env-rules": "export I_MPI_ADJUST_BCAST=" + "1:0-8;" * (N // 6) + "\n",
    "impi-env-long-number": "export I_MPI_ADJUST_BCAST=1:0-" + "9" * N + "\n",
    "impi-env-blank-run": "export I_MPI_ADJUST_BCAST=1" + B + "x\n",
    "impi-json-long-ppn": '{"coll=Bcast": {"ppn=' + "1" * N + '": {}}}',
    "impi-json-blanks": "{" + B + '"coll=Bcast"' + B + ": {}}",
    "han-blank-run": "# global_communicator\n0\n" + B + "x\n",
    "ucc-env-long-string": "UCC_TL_UCP_TUNE=" + "bcast:0-4k:@dbt#" * (N // 16) + "\n",
    "ucc-config-empty-lines": "[team_size=4]\n" + "\n" * N + "UCC_TL_UCP_TUNE=bcast:@dbt\n",
    "ucc-config-long-header": "[team_size=" + "4" * N + "]\nUCC_TL_UCP_TUNE=bcast:@dbt\n",
    "ucc-env-long-numbers": "UCC_TL_UCP_TUNE=bcast:0-" + "9" * N + ":[" + "9" * N + "]:"
                            + "9" * N + ":@" + "9" * N + "\n",
}

# what the importers read: benchmark outputs from anywhere
IMPORTED = {
    "osu-header-words": ("import-osu", "# OSU MPI Reduce Latency Test v7.0\n# "
                         + "a " * N + "latency-\n"),
    "osu-long-number": ("import-osu", "# OSU MPI Reduce Latency Test v7.0\n"
                        "# Size       Avg Latency(us)\n" + "4" * N + "  1.0\n"),
    "osu-blank-run": ("import-osu", "# OSU MPI Reduce Latency Test v7.0\n"
                      "# Size" + B + "Avg Latency(us)\n8 1.0\n"),
    "imb-long-number": ("import-imb", "# Benchmarking Reduce\n# #processes = 2\n"
                        "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n"
                        "            0 " + "1" * N + " 0.1 0.1 0.1\n"),
    "imb-blank-run": ("import-imb", "# Benchmarking Reduce\n# #processes = 2\n"
                      "       #bytes" + B + "#repetitions t_min[usec] t_max[usec] "
                      "t_avg[usec]\n"),
    "imb-long-procs": ("import-imb", "# Benchmarking Reduce\n# #processes = " + "2" * N
                       + "\n"),
    "imb-empty-lines": ("import-imb", "# Benchmarking Reduce\n" + "\n" * N
                        + "# #processes = 2\n"),
}

runner = CliRunner()


def _one_short_answer(r: object, name: str) -> None:
    out = r.output  # type: ignore[attr-defined]
    exc = r.exception  # type: ignore[attr-defined]
    assert exc is None or isinstance(exc, SystemExit), (name, exc)
    assert "Traceback" not in out, name
    # a refusal names the reason in a line a terminal shows, not the 100 KB that caused it
    assert all(len(line) < 900 for line in out.splitlines()), (name, max(map(len,
                                                                             out.splitlines())))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(CHECKED))
def test_tune_check_reads_crafted_files_in_linear_time(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(CHECKED[name])
    r = runner.invoke(app, ["check", str(path)], env={"COLUMNS": "200"})
    _one_short_answer(r, name)
    assert r.exit_code in (0, 1, 2), (name, r.exit_code, r.output[-500:])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(IMPORTED))
def test_importers_read_crafted_outputs_in_linear_time(tmp_path: Path, name: str) -> None:
    cmd, text = IMPORTED[name]
    path = tmp_path / f"{name}.txt"
    path.write_text(text)
    r = runner.invoke(app, [cmd, str(path), "--np", "2", "--db", str(tmp_path / "db.sqlite"),
                            "--host", "h"], env={"COLUMNS": "200"})
    _one_short_answer(r, name)
    assert r.exit_code in (1, 2, 4), (name, r.exit_code, r.output[-500:])


def test_a_large_rules_file_is_read_in_memory_proportional_to_it(tmp_path: Path) -> None:
    """A 4 MB classic file took about 400 MB to check (a list of lists of token objects);
    its numbers are now kept in arrays: reading it grows the reader's resident memory by
    under 40 bytes a byte read (21 measured; 75 before), in a process of its own."""
    lines = ["1", "11", "300"]
    for c in range(300):
        lines += [str(c + 2), "1000"]
        lines += [f"{r * 64} {1 + r % 6} 0 {r % 3 * 1024}" for r in range(1000)]
    path = tmp_path / "big.conf"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 4_000_000
    code = ("import resource, sys\n"
            "from colltune.rules import ompi_classic\n"
            "text = open(sys.argv[1]).read()\n"
            "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
            "before = rss()\n"
            "rf = ompi_classic.parse(text)\n"
            "print(sum(len(s.rules) for s in rf.collectives[11]), (rss() - before) / len(text))")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       check=True, timeout=120)
    rules, per_byte = r.stdout.split()
    assert int(rules) == 300_000
    assert float(per_byte) < 40, per_byte
