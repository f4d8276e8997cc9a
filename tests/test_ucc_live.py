"""What UCC itself does with a tuning string, against what rules/ucc_tune.py says it does:
its algorithm table (`ucc_info -A`), and, call by call, which tl/ucp init function ran
(breakpoints on UCC's own symbols in rank 0 under gdb), for strings UCC takes, rejects
whole, or takes with a range dropped.

Then through Open MPI with coll/ucc: who serves (coll/ucc only where it is switched on,
as `tune check` says), and colltune's kernel running what a written string says.

UCC is built by hand (docs/ucc.md: no registry serves it, and Debian 12's UCX is too old
for UCC 1.8): these tests skip unless COLLTUNE_UCC_PREFIX names a UCC built with
`--with-mpi` (its ucc_perftest, bootstrapped here by Debian's Open MPI 4.1.4), and
COLLTUNE_OMPI_UCC_PREFIX an Open MPI 5.0 built with it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from colltune.backends.openmpi import serving
from colltune.backends.openmpi.install import OpenMPI, find_openmpi
from colltune.rules import ucc_config as uc
from colltune.rules import ucc_radix as ur
from colltune.rules import ucc_tune as u
from colltune.slots import place
from helpers import tune_cli
from testcluster import REPO, Cluster

pytestmark = pytest.mark.mpi

MPIRUN = "/usr/bin/mpirun.openmpi"
INITS = {"knomial": "ucc_tl_ucp_bcast_knomial_init", "sag_knomial":
         "ucc_tl_ucp_bcast_sag_knomial_init", "dbt": "ucc_tl_ucp_bcast_dbt_init"}


def _prefix(variable: str, what: str) -> str:
    """The hand-built prefix `variable` names; unset: skip, saying what to build."""
    prefix = os.environ.get(variable)
    if not prefix:
        pytest.skip(f"no {what}: set {variable} to its prefix (docs/ucc.md); CI cannot "
                    "build one")
    return prefix


@pytest.fixture(scope="module")
def ucc() -> Path:
    prefix = _prefix("COLLTUNE_UCC_PREFIX", "UCC 1.8 built --with-mpi")
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
    from colltune.backends.openmpi.ucc import parse_info

    assert parse_info(text) == u.TL_UCP_ALGS  # what --tune-ucc reads, in id order


RADIX_SETTINGS = ["auto", "4", "0-4k:host:2,auto", "host:8,3", ",,0-1k::2,,auto,",
                  "0-4095:2,4096-inf:host:4,AUTO", "0-1k:cuda^host:2,0-64k:4,auto",
                  "0-4k:host:auto", "0-4k:foo:2", "1:0-4k:host:2", "4k-:2,auto", "0-4k:host"]


@pytest.mark.parametrize("setting", RADIX_SETTINGS)
def test_ucc_reads_a_radix_setting_as_the_reading_says(ucc: Path, setting: str) -> None:
    """UCC's own reading of a per-range radix setting (`ucc_info -caf` prints what it
    parsed, or UCX's parser says it is invalid and tl/ucp's configuration fails) against
    rules/ucc_radix.parse_radix: the same accepted, the same ranges and default."""
    env = {**os.environ, "UCC_TL_UCP_ALLREDUCE_KN_RADIX": setting}
    r = subprocess.run([str(ucc / "bin" / "ucc_info"), "-caf"], capture_output=True,
                       text=True, timeout=60, env=env)
    printed = re.search(r"^UCC_TL_UCP_ALLREDUCE_KN_RADIX=(.*)$", r.stdout, re.M)
    try:
        mine = ur.parse_radix(setting)
    except u.UccTuneError:
        assert printed is None and "Invalid value for ALLREDUCE_KN_RADIX" in r.stdout + \
            r.stderr, (setting, r.stdout[-2000:], r.stderr[-2000:])
        return
    assert printed is not None, (setting, r.stderr[-2000:])
    theirs = ur.parse_radix(printed.group(1))  # UCC prints it back in its own grammar
    assert theirs == mine, (setting, printed.group(1))


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
    # and `tune check` of the job's file refuses it exactly where UCC did (these strings
    # read alike for every team size)
    env = tmp_path / "ucc.env"
    env.write_text(f"UCC_TL_UCP_TUNE={tune}\n")
    r = tune_cli("check", str(env))
    assert r.returncode == (1 if refused else 0), r.stdout + r.stderr


@pytest.fixture(scope="module")
def ompi_ucc() -> OpenMPI:
    """Open MPI 5.0 built by hand --with-ucx --with-ucc (docs/ucc.md)."""
    prefix = _prefix("COLLTUNE_OMPI_UCC_PREFIX", "Open MPI 5.0 built --with-ucc")
    mpi = find_openmpi(prefix)
    if "MCA coll: ucc" not in subprocess.run([str(mpi.ompi_info)], capture_output=True,
                                             text=True, timeout=60).stdout:
        pytest.fail(f"COLLTUNE_OMPI_UCC_PREFIX={prefix} has no coll/ucc component")
    return mpi


UCC_ON = {"OMPI_MCA_coll_ucc_enable": "1", "OMPI_MCA_coll_ucc_priority": "100"}


def _check(mpi: OpenMPI, path: Path, **env: str) -> str:
    """What `tune check PATH --mpi` warns for jobs with `env` (it must pass)."""
    r = tune_cli("check", str(path), "--mpi", str(mpi.prefix), env={**mpi.tool_env(), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stderr


def test_coll_ucc_counts_above_tuned_only_where_it_is_on(ompi_ucc: OpenMPI,
                                                         tmp_path: Path) -> None:
    """coll/ucc is off by default (coll_ucc_enable 0): its priority raised alone, it serves
    nothing and `tune check` says nothing; switched on, the check names both settings and
    a launch shows coll/ucc served (its entry, counted under gdb)."""
    rules = tmp_path / "r.conf"
    rules.write_text("1\n7\n1\n4\n1\n0 1 0 0\n")
    assert "coll/ucc" not in _check(ompi_ucc, rules, OMPI_MCA_coll_ucc_priority="100")
    said = _check(ompi_ucc, rules, **UCC_ON)
    assert "coll/ucc (coll_ucc_priority 100, set in the environment and coll_ucc_enable 1, " \
        "set in the environment) is above coll/tuned's" in said, said
    two = place(2)
    assert serving.served_by(ompi_ucc, two, "bcast", {})[0] != "ucc"
    who, calls = serving.served_by(ompi_ucc, two, "bcast", UCC_ON)
    assert who == "ucc", calls


def test_check_says_whether_the_jobs_reach_ucc(ompi_ucc: OpenMPI, tmp_path: Path) -> None:
    """The same strings checked for the Open MPI built with coll/ucc: off by default (said),
    switched on below coll/tuned (said, naming it), on and above every other (nothing
    said; the launch that shows UCC then serving: the test above)."""
    f = tmp_path / "ucc.env"
    f.write_text("UCC_TL_UCP_TUNE=bcast:0-4k:@knomial#bcast:4k-inf:@dbt\n")
    assert "coll/ucc is off (coll_ucc_enable 0)" in _check(ompi_ucc, f)
    said = _check(ompi_ucc, f, OMPI_MCA_coll_ucc_enable="1")
    assert "coll/tuned (coll_tuned_priority 30) is above coll/ucc" in said, said
    assert "warning" not in _check(ompi_ucc, f, **UCC_ON)


def test_a_string_reaches_ucc_through_open_mpi(ompi_ucc: OpenMPI, tmp_path: Path) -> None:
    """The kernel's bcast on Open MPI with coll/ucc on and a written string: UCC's own init
    functions (rank 0 under gdb) ran what the string says at each size."""
    from colltune.backends.openmpi.install import launch_command, launch_env
    from colltune.kernel.build import build_kernel
    from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel

    tune = u.render({"bcast": [(1, "knomial"), (4096, "dbt"), (65536, "sag_knomial")]})
    script = tmp_path / "count.gdb"
    script.write_text("set breakpoint pending on\nset pagination off\n" + "".join(
        f"break {fn}\ncommands\nsilent\nprintf \"RAN {alg} %lu\\n\", "
        "coll_args->args.src.info.count\ncontinue\nend\n"
        for alg, fn in INITS.items()) + "run\n")
    wrap = ("r=${OMPI_COMM_WORLD_RANK:-0}; if [ \"$r\" = 0 ]; then exec gdb -q -batch -x "
            f"{script} --args \"$@\"; fi; exec \"$@\"")
    sizes = [1000, 4095, 4096, 65535, 65536]
    plan = KernelPlan("bcast", [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(warmup=0, min_reps=2, max_reps=2), dup_always=False)
    cmd = [*launch_command(ompi_ucc, place(4)), "/bin/sh", "-c", wrap, "sh"]
    out = run_kernel(cmd, build_kernel(ompi_ucc), plan,
                     launch_env({**UCC_ON, "UCC_TL_UCP_TUNE": tune}), runs_on=ompi_ucc)
    assert out.status == "ok", (out.message, out.stderr[-2000:])
    ran = {(int(m.group(2)), m.group(1)) for m in
           re.finditer(r"^RAN (\w+) (\d+)$", "\n".join(out.other_lines), re.M)}
    applied = u.apply(u.parse(tune), 4)
    assert ran == {(s, u.runs(applied, "bcast", s)) for s in sizes}, (tune, ran)


# per collective, (first per-rank block, tl/ucp algorithm) at 4 ranks: every algorithm
# this test can run on host memory (not allreduce's sliding_window or alltoall's onesided,
# which need one-sided memory setup), ranges meeting inside the kernel's sizes
WRITTEN = {"bcast": [(8, "knomial"), (4096, "dbt"), (65536, "sag_knomial")],
           "allreduce": [(8, "knomial"), (1024, "sra_knomial"), (16384, "dbt"),
                         (65536, "ring")],
           "reduce": [(8, "knomial"), (2048, "dbt"), (32768, "srg")],
           "allgather": [(8, "ring"), (512, "bruck"), (2048, "knomial"),
                         (8192, "neighbor")],
           "alltoall": [(8, "pairwise"), (1024, "bruck")]}


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


@pytest.mark.parametrize("form", ["parameter file", "configuration file",
                                  "configuration file exported"])
def test_every_range_runs_through_the_file_written(ompi_ucc: OpenMPI, tmp_path: Path,
                                                   form: str) -> None:
    """A string written as --tune-ucc writes it, handed to the job only by the MCA
    parameter file written beside it, or only by the UCC configuration file (named in the
    job's environment, or installed by `tune export` and named by its parameter file, over
    the UCC_CONFIG_FILE every launch here sets): at both edges
    of every range, rank 0 initialised and started the algorithm the string names and no
    other tl/ucp one. Allgather's and alltoall's ranges are on the whole receive buffer
    (4 blocks here), as UCC counts."""
    from colltune.backends.openmpi import ucc, ucc_proof
    from colltune.backends.openmpi.ucc_backend import ucc_installation
    from colltune.collectives import get_collective
    from colltune.core.config import Config
    from colltune.core.records import Decision

    mpi = ucc_installation(str(ompi_ucc.prefix))
    table, _ = ucc.algorithms(mpi)
    cat = ucc.catalog(table, list(WRITTEN))
    sections = {}
    for coll, rows in WRITTEN.items():
        c = get_collective(coll)
        ds = [Decision(s, ucc.msg_size(c, s, 4), Config(table[coll].index(a) + 1), None,
                       None, None, None, False) for s, a in rows]
        sections[(coll, 4)] = ucc.section(cat, coll, ds)
    value = ucc.render(sections)
    if form == "parameter file":
        frag = tmp_path / "ucc-mca-params.conf"
        frag.write_text(ucc.mca_fragment(value, []))
        job = {"OMPI_MCA_mca_base_param_files": str(frag)}
    else:
        conf = tmp_path / "ucc.conf"
        conf.write_text(ucc.config_file(sections, {4}, []))
        job = {"UCC_CONFIG_FILE": str(conf)}
    if form == "configuration file exported":
        site = tmp_path / "site"
        r = tune_cli("export", "--from", str(conf), "--site", str(site))
        assert r.returncode == 0, r.stderr
        job = {"OMPI_MCA_mca_base_param_files": str(site / "openmpi-mca-params.conf")}
    at = ucc.says(value)
    for coll, rows in WRITTEN.items():
        c = get_collective(coll)
        # both sides of each switch the string makes, as per-rank blocks: the largest whose
        # UCC message size is below it, the smallest at or above it; blocks of whole
        # elements per rank (allreduce's ring refuses a count the team does not divide, and
        # UCC then starts knomial: seen at 32776 B, 4097 doubles on 4 ranks)
        g, per = c.granularity * 4, ucc.msg_size(c, 1, 4)
        blocks = sorted({s for s, _ in rows} | {
            b for lo, _, _ in sections[(coll, 4)] if lo
            for b in ((lo - 1) // per // g * g, _round_up(_round_up(lo, per) // per, g))})
        blocks = [b for b in blocks if b > 0]
        got = ucc_proof.ran(mpi, place(4), c, blocks, job, table)
        wrong = {b: got[b] for b in blocks
                 if not ucc_proof.runs_alone(coll, str(at(c, 4, b)), got[b])}
        assert not wrong, (coll, value, {b: at(c, 4, b) for b in wrong}, wrong)


def test_the_algorithms_left_out_do_not_run_on_host_buffers(ompi_ucc: OpenMPI) -> None:
    """Why --tune-ucc leaves out allreduce's sliding_window and alltoall's onesided: forced,
    their init is entered and UCC runs something else (another algorithm's start, or the
    component below coll/ucc); the proof that says "applied" says it is not them."""
    from colltune.backends.openmpi import ucc, ucc_proof
    from colltune.backends.openmpi.ucc_backend import ucc_installation
    from colltune.collectives import get_collective

    mpi = ucc_installation(str(ompi_ucc.prefix))
    table, _ = ucc.algorithms(mpi)
    for coll, alg in sorted(ucc.HOST_REFUSED):
        got = ucc_proof.ran(mpi, place(4), get_collective(coll), [64, 65536],
                      {u.TL_UCP: f"{coll}:0-inf:@{alg}"}, table)
        for size, what in got.items():
            assert alg in what and not ucc_proof.runs_alone(coll, alg, what), (coll, size, what)


def test_tune_ucc_writes_what_ucc_runs_and_verify_proves_it(ompi_ucc: OpenMPI,
                                                            tmp_path: Path) -> None:
    """tune --tune-ucc end to end on 4 ranks: the string, the parameter file and the
    configuration file written, `tune check` takes them, and `tune verify` of the string and
    of the configuration file (UCC's own functions at every size they change) says each was
    applied."""
    out = tmp_path / "ucc.env"
    r = tune_cli("bcast", "--np", "4", "--tune-ucc", "--mpi", str(ompi_ucc.prefix),
                 "--sizes", "1K,64K,256K", "--out", str(out), "--db", str(tmp_path / "s.db"),
                 env=ompi_ucc.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    frag = tmp_path / "ucc-mca-params.conf"
    assert "coll_ucc_enable = 1" in frag.read_text()
    # the string, and a radix setting where a k-nomial's radix was chosen (sag_knomial)
    lines = u.env_lines(out.read_text()) or []
    assert lines[0][1] == u.TL_UCP and all(n in u.RADIX_VARS.values() for _, n, _ in lines[1:])
    value = lines[0][2]
    assert "mca_base_env_list = " + ";".join(f"{n}={v}" for _, n, v in lines) + "\n" in \
        frag.read_text()
    assert tune_cli("check", str(out)).returncode == 0
    assert tune_cli("check", str(tmp_path / "ucc-sections.conf")).returncode == 0
    if not value:  # UCC's own choice kept everywhere: nothing for verify to prove (the
        return  # test above proves every range of a written string)
    for path in (out, tmp_path / "ucc-sections.conf"):  # the string; the file's section
        r = tune_cli("verify", str(path), "--np", "4", "--mpi", str(ompi_ucc.prefix),
                     env=ompi_ucc.tool_env())
        assert "applied: UCC initialised the string's algorithm" in r.stdout + r.stderr, \
            (path.name, r.stdout + r.stderr[-3000:])
    # a team no section serves: refused, nothing launched
    r = tune_cli("verify", str(tmp_path / "ucc-sections.conf"), "--np", "2", "--mpi",
                 str(ompi_ucc.prefix), env=ompi_ucc.tool_env())
    assert r.returncode == 2 and "nothing to verify" in " ".join(r.stderr.split()), r.stderr


def test_a_string_in_the_environment_wins_over_the_configuration_file(
        ompi_ucc: OpenMPI, tmp_path: Path) -> None:
    """What `tune check` of a configuration file says: where the job's environment sets
    UCC_TL_UCP_TUNE too, UCC 1.8 takes the environment's (its source reads as if the
    file's section replaced it: the run decides)."""
    from colltune.backends.openmpi import ucc, ucc_proof
    from colltune.backends.openmpi.ucc_backend import ucc_installation
    from colltune.collectives import get_collective

    mpi = ucc_installation(str(ompi_ucc.prefix))
    table, _ = ucc.algorithms(mpi)
    conf = tmp_path / "ucc.conf"
    conf.write_text(f"[team_size=4]\n{u.TL_UCP}=bcast:0-inf:@dbt\n")
    bcast = get_collective("bcast")
    alone = ucc_proof.ran(mpi, place(4), bcast, [1000], {"UCC_CONFIG_FILE": str(conf)}, table)
    both = ucc_proof.ran(mpi, place(4), bcast, [1000], {"UCC_CONFIG_FILE": str(conf),
                                                  u.TL_UCP: "bcast:0-inf:@sag_knomial"},
                   table)
    assert ucc_proof.runs_alone("bcast", "dbt", alone[1000]), alone
    assert ucc_proof.runs_alone("bcast", "sag_knomial", both[1000]), both


def test_verify_proves_the_string_across_shaped_nodes(ompi_ucc: OpenMPI,
                                                      gigabit: Cluster) -> None:
    """`tune verify` of a UCC string on 2 nodes x 2 ranks, every port shaped like Gigabit
    Ethernet, UCX on TCP over the nodes' ports, run from node 1 as a user there: its proof
    that UCC ran the string (the algorithm's init entered, rank 0 under gdb) says applied,
    and the calls crossed the link. (Breakpoints on an algorithm's progress function, entered
    on every poll while a call waits on the link, stalled this launch before.)"""
    cluster = gigabit
    env_file = cluster.home / "ucc-verify.env"
    env_file.write_text("export UCC_TL_UCP_TUNE='allreduce:0-8937:[4-inf]:@knomial'\n")
    before = cluster.rx_bytes("node2")
    r = cluster.on("node1", [
        sys.executable, "-m", "colltune.cli", "verify", str(env_file), "--np", "4",
        "--mpi", str(ompi_ucc.prefix), "--hostfile", cluster.hostfile(2), "--ppn", "2",
        "--launcher-args", f"--mca plm_rsh_agent {cluster.agent} -x UCX_TLS "
        "-x UCX_NET_DEVICES", "--sizes", "4K", "--rounds", "3", "--max-rounds", "3",
        "--allow-inconclusive"], timeout=600, cwd=cluster.home, env=cluster.env(
            PYTHONPATH=os.pathsep.join([str(REPO / "src"), *sys.path]),
            UCX_TLS="tcp,self", UCX_NET_DEVICES=cluster.net_devices))
    said = r.stdout + r.stderr
    assert "allreduce, 4 ranks: applied: UCC initialised the string's algorithm" in said, \
        said[-3000:]
    # 4 KiB calls over some seconds: far more than the launches' own start-up traffic
    assert cluster.rx_bytes("node2") - before > 1 << 20, said[-3000:]


def test_verify_proves_the_radix_ucc_ran(ompi_ucc: OpenMPI, tmp_path: Path) -> None:
    """A radix per message range beside the string (allreduce's knomial with radix 2 below
    4 KiB and 3 above): `tune verify` proves each size's radix by the first and the last
    rank's sends (UCX's send function, counted under gdb) against launches forcing each
    radix up to the team size (rank 0 alone sends as often with radix 3 as with 4). A job
    not handed the radix setting runs knomial's own radix: the proof says "not applied"
    there, naming the counts."""
    from colltune.backends.openmpi import ucc, ucc_proof
    from colltune.backends.openmpi.ucc_backend import ucc_installation
    from colltune.collectives import get_collective

    mpi = ucc_installation(str(ompi_ucc.prefix))
    sections: ucc.Sections = {("allreduce", 4): [(0, "knomial", 2), (4096, "knomial", 3)]}
    value, radix = ucc.render(sections), ucc.radix_settings(sections)
    assert list(radix) == ["UCC_TL_UCP_ALLREDUCE_KN_RADIX"], radix
    f = tmp_path / "ucc.env"
    f.write_text(ucc.env_file(value, [], radix))
    conf = tmp_path / "ucc-sections.conf"  # the radix in the section of the team's span
    conf.write_text(ucc.config_file(sections, {4}, [uc.CONFIG_HEADER]))
    for path in (f, conf):
        r = tune_cli("verify", str(path), "--np", "4", "--sizes", "1K,64K", "--mpi",
                     str(ompi_ucc.prefix), env=ompi_ucc.tool_env())
        said = " ".join((r.stdout + r.stderr).split())
        assert "UCC ran the file's radix at each of 2 size(s)" in said, (path.name,
                                                                         said[-3000:])
    table, _ = ucc.algorithms(mpi)
    status, why = ucc_proof.proof(mpi, place(4), value, table, {u.TL_UCP: value}, radix)(
        get_collective("allreduce"), 4, [1024, 65536])
    assert status == "not applied" and "the radix UCC ran is not the file's" in why, why
