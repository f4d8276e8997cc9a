"""What UCC itself does with a tuning string, against what rules/ucc_tune.py says it does:
its algorithm table (`ucc_info -A`), and, call by call, which tl/ucp init function ran
(breakpoints on UCC's own symbols in rank 0 under gdb), for strings UCC takes, rejects
whole, or takes with a range dropped.

UCC is built by hand (docs/ucc.md: no registry serves it, and Debian 12's UCX is too old
for UCC 1.8): these tests skip unless COLLTUNE_UCC_PREFIX names a UCC built with
`--with-mpi` (its ucc_perftest), bootstrapped here by Debian's Open MPI 4.1.4."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from colltune.rules import ucc_tune as u

pytestmark = pytest.mark.mpi

MPIRUN = "/usr/bin/mpirun.openmpi"
INITS = {"knomial": "ucc_tl_ucp_bcast_knomial_init", "sag_knomial":
         "ucc_tl_ucp_bcast_sag_knomial_init", "dbt": "ucc_tl_ucp_bcast_dbt_init"}


@pytest.fixture(scope="module")
def ucc() -> Path:
    prefix = os.environ.get("COLLTUNE_UCC_PREFIX")
    if not prefix:
        pytest.skip("no UCC: set COLLTUNE_UCC_PREFIX to a UCC 1.8 prefix built --with-mpi "
                    "(docs/ucc.md); CI cannot build one")
    root = Path(prefix)
    for tool in ("ucc_info", "ucc_perftest"):
        if not (root / "bin" / tool).is_file():  # named on purpose: a broken setup
            pytest.fail(f"COLLTUNE_UCC_PREFIX={prefix} has no bin/{tool}")
    if shutil.which("gdb") is None or not Path(MPIRUN).exists():
        pytest.fail("needs gdb and Debian's Open MPI 4.1.4 (mpirun.openmpi)")
    return root


def test_the_algorithm_table_is_the_version_built(ucc: Path) -> None:
    text = subprocess.run([str(ucc / "bin" / "ucc_info"), "-A"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    ucp = text.split("tl/ucp algorithms:", 1)[1].split("\n\n", 1)[0]
    table: dict[str, list[str]] = {}
    coll = ""
    for line in ucp.splitlines():
        if m := re.fullmatch(r"  (\w+)", line):
            coll = m.group(1).lower()
        elif m := re.fullmatch(r"\s+(\d+) :\s+(\w+) :.*", line):
            assert int(m.group(1)) == len(table.setdefault(coll, []))
            table[coll].append(m.group(2))
    assert {c: tuple(a) for c, a in table.items()} == u.TL_UCP_ALGS


def _ran(ucc: Path, tmp: Path, tune: str, size: int) -> tuple[Counter[str], str]:
    """The bcast init functions rank 0 entered for `size` B calls, and UCC's errors."""
    script = tmp / "count.gdb"
    script.write_text("set breakpoint pending on\nset pagination off\n" + "".join(
        f"break {fn}\ncommands\nsilent\nprintf \"RAN {alg}\\n\"\ncontinue\nend\n"
        for alg, fn in INITS.items()) + "run\n")
    wrap = tmp / "rank0.sh"
    wrap.write_text("#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then "
                    f"exec gdb -q -batch -x {script} --args \"$@\"; fi\nexec \"$@\"\n")
    wrap.chmod(0o755)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    r = subprocess.run([MPIRUN, "-np", "4", "--oversubscribe", "-x", f"UCC_TL_UCP_TUNE={tune}",
                        str(wrap), str(ucc / "bin" / "ucc_perftest"), "-c", "bcast", "-d",
                        "uint8", "-b", str(size), "-e", str(size), "-n", "3", "-w", "0"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    ran = Counter(m.group(1) for m in re.finditer(r"^RAN (\w+)$", r.stdout, re.M))
    errors = "\n".join(line for line in (r.stdout + r.stderr).splitlines()
                       if "UCC  ERROR" in line)
    return ran, errors


STRINGS = [
    "bcast:0-4k:@knomial#bcast:4k-inf:@dbt",  # a bound: 4096 runs the second range
    "bcast:0-4095:@dbt#bcast:4095-inf:@sag_knomial",
    "bcast:0-4k:@dbt#bcst:@0",  # rejected whole: UCC's own choice runs
    "bcast:0-4k:@dbt#bcast:1k-8k:@1",  # overlapping: rejected whole
    "bcast:0-4k:@dbt#bcast:1k-2k,8k-16k:@1",  # 1k-2k dropped, the rest taken
    "bcast:[8-16]:@sag_knomial#bcast:[2-4]:@dbt",  # only the team's own token
]


@pytest.mark.parametrize("tune", STRINGS)
def test_ucc_runs_what_the_reading_says_at_each_bound(ucc: Path, tmp_path: Path,
                                                      tune: str) -> None:
    default = u.apply(u.parse("bcast:0-inf:[2-2]:@0#bcast:0-32k:[3-inf]:@0#"
                              "bcast:32k-inf:[3-inf]:@1"), 4)  # tl/ucp's own (UCC 1.8)
    try:
        applied, refused = u.apply(u.parse(tune), 4), False
    except u.UccTuneError:
        applied, refused = default, True
    for size in (1500, 4095, 4096):
        ran, errors = _ran(ucc, tmp_path, tune, size)
        want = u.runs(applied, "bcast", size) or u.runs(default, "bcast", size)
        assert ran == Counter({want: 3}), (tune, size, ran, errors)
        # UCC says it rejected the string (and runs its own choice) only where it did
        assert ("failed to parse UCC_*_TUNE" in errors) == refused, errors
