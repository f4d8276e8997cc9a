"""The test cluster's links shaped like Ethernet (issue 85, item 1): every node's port, both
ways, as a named profile says (tests/testcluster.py, LINKS), proven by the kernel's own
queueing counters (tc -s) while real traffic crosses them; memory-speed veth again after."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import check_app_verdict
from testcluster import LINKS, REPO, Cluster

SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n = 0
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    n += len(b)
print(n, flush=True)
"""

CLIENT = """
import socket, sys, time
for _ in range(100):
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        break
    except OSError:
        time.sleep(0.05)
t0 = time.perf_counter()
s.sendall(b"x" * int(sys.argv[3]))
s.close()
print(time.perf_counter() - t0)
"""

BYTES = 16 << 20


def _sent(text: str) -> tuple[int, int]:
    """(bytes sent, overlimits) of a tbf qdisc as tc -s says them."""
    m = re.search(r"Sent (\d+) bytes \d+ pkt \(dropped \d+, overlimits (\d+)", text)
    assert m, text
    return int(m.group(1)), int(m.group(2))


def _transfer(cluster: Cluster) -> float:
    """BYTES over TCP from node1 to node2; the sender's seconds."""
    server = subprocess.Popen([*cluster.enter("node2"), sys.executable, "-c", SERVER,
                               cluster.addr("node2"), "5201"], stdout=subprocess.PIPE,
                              text=True, env=cluster.env())
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        r = cluster.on("node1", [sys.executable, "-c", CLIENT, cluster.addr("node2"), "5201",
                                 str(BYTES)], timeout=120)
        assert r.returncode == 0, r.stderr
        assert int(server.stdout.readline()) == BYTES
        return float(r.stdout)
    finally:
        server.kill()
        server.wait()


def test_every_port_is_shaped_both_ways_as_its_profile_says(gigabit: Cluster) -> None:
    link = LINKS["1gbit"]
    ports = gigabit.qdiscs()
    assert len(ports) == 2 * gigabit.nodes
    for dev, text in ports.items():
        assert "qdisc tbf" in text and "rate 1Gbit" in text, (dev, text)
    node1_out = f"{gigabit.tag}v1"  # node1's end: what node1 sends leaves through it
    to_node2 = f"{gigabit.tag}p2"  # the switch's end of node2's port: what node2 receives
    before = {d: _sent(gigabit.qdiscs()[d]) for d in (node1_out, to_node2)}
    started = time.perf_counter()
    seconds = _transfer(gigabit)
    after = {d: _sent(gigabit.qdiscs()[d]) for d in (node1_out, to_node2)}
    for d in (node1_out, to_node2):
        sent, over = after[d][0] - before[d][0], after[d][1] - before[d][1]
        # every byte crossed both buckets, and they held it back (what a bucket does when
        # the traffic is faster than its rate)
        assert sent >= BYTES and over > 0, (d, sent, over)
    print(f"{BYTES / seconds / 1e6:.0f} MB/s node1 -> node2 through {link.name} "
          f"({time.perf_counter() - started:.2f} s)")


def test_the_links_are_memory_speed_again_after(cluster: Cluster) -> None:
    cluster.shape(LINKS["10gbit"])
    assert all("rate 10Gbit" in t for t in cluster.qdiscs().values())
    cluster.shape(None)
    assert not any("qdisc tbf" in t for t in cluster.qdiscs().values())
    assert cluster.link is None


def test_each_node_can_have_cores_of_its_own(cluster: Cluster) -> None:
    """The machine's cores split among the nodes (issue 85: a per-node core share): what is
    started on a node runs only on its cores, as the kernel says (Cpus_allowed_list)."""
    def allowed(name: str) -> str:
        r = cluster.on(name, ["grep", "Cpus_allowed_list", "/proc/self/status"])
        assert r.returncode == 0, r.stderr
        return r.stdout.split()[-1]

    try:
        split = cluster.split_cores()
        assert [allowed(n) for n in cluster.names] == [split[n] for n in cluster.names]
        assert len(set(split.values())) == min(cluster.nodes, len(os.sched_getaffinity(0)))
    finally:
        cluster.cores = {}
    everything = allowed(cluster.names[0])
    assert all(allowed(n) == everything for n in cluster.names)


# alone: the other worker's ranks on the same two cores slow every sender, and a port
# that fills more slowly overflows less (a CI run at two workers saw timeouts but no stall
# in the sweep's few calls); 15 calls a mode in the sweep for the same reason
@pytest.mark.alone
def test_where_the_default_stalls_tune_and_verify_decide_by_means(gigabit: Cluster) -> None:
    """All-to-all of 1 MiB per rank, 2 nodes x 2 ranks, on Gigabit ports: the library's
    default posts every exchange at once, the switch port's buffer overflows and TCP
    waits out retransmission timeouts (the nodes' own counters). The tune's sweep sees
    those calls as stalls; it measures the default and what stalls less again, 30 calls a
    mode at least, and where one stalls significantly less often proposes it by its mean:
    every stall is what an application pays (docs/methodology.md, "Where the default
    stalls, the mean decides").

    Then `tune verify` of a file running pairwise there: verify reads a file, not the
    decisions behind it, so it finds the size where the arms' calls stall differently by
    itself and judges it by launch means, saying how often each arm stalled; by medians
    such a size reads "same" whatever an application pays. The tune's own confirmation
    pairs are these (confirm.for_means, sequential.run(means=...)), so the tune here runs
    without them (--confirm-rounds 0), and with 1 s points: the stage that measures the
    default again stretches them 8 times for three configurations."""
    from colltune.collectives import get_collective
    from colltune.rules import ompi_classic as classic
    from colltune.store import Store
    from colltune.tuner.sequential import stalls_differ

    work = gigabit.home / "stalls"
    work.mkdir(exist_ok=True)
    env = gigabit.env(PYTHONPATH=os.pathsep.join([str(REPO / "src"), *sys.path]))
    over = ["--np", "4", "--hostfile", gigabit.hostfile(2), "--ppn", "2", "--launcher-args",
            f"--mca plm_rsh_agent {gigabit.agent} --bind-to none", "--mpi", "/usr",
            "--sizes", "1M"]
    # another tune, from a fresh store, where the one before saw neither what it judges:
    # the default's calls stalling (its sweep, a handful of calls a point, may miss the
    # congestion the link's counters show: one CI run in several; in one, at commit
    # c859c07, two tunes in a row) nor a configuration its medians prefer; the test checks
    # what the tune does with the stalls it sees. A tune that sees them ends the loop, so
    # the third costs time only where two saw none
    for attempt in (1, 2, 3):
        for old in ("db.sqlite", "s.json", "a.conf"):
            (work / old).unlink(missing_ok=True)
        before = gigabit.tcp()
        r = gigabit.on("node1", [
            sys.executable, "-m", "colltune.cli", "alltoall", *over, "--db", "db.sqlite",
            "--out", "a.conf", "--summary-json", "s.json", "--min-reps", "15", "--point-time",
            "1", "--confirm-rounds", "0"], env=env, cwd=work, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        grew = {k: v - before[k] for k, v in gigabit.tcp().items()}
        assert grew["TCPTimeouts"] > 0, grew  # the premise: the link congests
        said = r.stdout + r.stderr
        (d,) = [d for d in json.loads((work / "s.json").read_text())["collectives"]
                ["alltoall"]["4"] if d["size"] == 1 << 20]
        if "the default stalls at 1 size(s)" in said or d["chosen"]["algorithm"]:
            break
        assert attempt < 3, ("three tunes saw no stall and kept the default by medians", d)
    store = Store(work / "db.sqlite", readonly=True)
    (ms,) = [store.measurements(c) for c in store.contexts()]
    default = next(m for m in ms if m.config.algorithm == 0)
    # measured again where the sweep's medians keep the default; where they already
    # choose another (pairwise 1.6x in a CI run) there is nothing to mend, and the
    # decision is theirs. Up to CALLS calls a mode within the stage's stretched time (a
    # call that waits out timeouts ends a point at that time, with fewer), and the tune
    # says what the calls it got could see: the default's stalls out of all its calls
    # (both modes, as the store holds them) and the fewest that would have told it from
    # a configuration that never stalls
    power = re.findall(r"1048576 B: the default stalled in \d+ of (\d+) calls, .* in \d+ "
                       r"of \d+ \((?:\d+ of \d+ would have|no count in so few calls "
                       r"would have) told it from one that never stalls", said)
    assert "Config(" not in said  # each configuration by its name, as the tables say it
    if "the default stalls at 1 size(s)" in said:
        pooled = sum(len(v) for v in default.series.values())
        assert power and all(int(n) == pooled for n in power), (power, pooled)
        assert pooled > 2 * 15, pooled  # the sweep's 15 calls a mode and more
    else:
        assert not power and d["statistic"] == "median" and d["chosen"]["algorithm"], d
    # proposed by its mean exactly where a configuration stalls significantly less often
    # (whether one does in these calls is the network's: pairwise in most runs here, none
    # in some), said as such
    assert (d["statistic"] == "mean") == ("(means)" in said), d
    if d["statistic"] == "mean":
        assert d["chosen"]["algorithm"] != 0 and "the default stalled in" in d["reason"], d

    # the file verify judges runs pairwise at 1 MiB, what stalls least here in most runs
    # (the tune's own pick varies with the network: modified Bruck in one run, which
    # stalled as often as the default)
    rf = classic.RulesFile()
    rf.set_section(classic.COLLTYPE["alltoall"], classic.CommRule(4, [
        classic.MsgRule(0, 0),
        classic.MsgRule(classic.lookup_size(get_collective("alltoall"), 1 << 19, 4) + 1, 2)]))
    (work / "v.conf").write_text(classic.render(rf))
    # a second verify where the first's calls of the default saw no stall although the
    # link's timeouts grew (twice on the machine of 2026-12-04, one of them in CI); where
    # neither saw one, what is checked is that verify judged by medians and said nothing
    # of means
    for _ in (1, 2):
        before = gigabit.tcp()
        r = gigabit.on("node1", [
            sys.executable, "-m", "colltune.cli", "verify", "v.conf", *over, "-c",
            "alltoall", "--rounds", "3", "--max-rounds", "6", "--json", "v.json",
            "--allow-inconclusive"], env=env, cwd=work, timeout=900)
        assert r.returncode in (0, 1), r.stderr[-3000:]  # a verdict, either way
        grew = {k: v - before[k] for k, v in gigabit.tcp().items()}
        assert grew["TCPTimeouts"] > 0, grew  # the premise: the default congests the link
        (check,) = json.loads((work / "v.json").read_text())["collectives"]
        (row,) = [k for k in check["kernel"] if k["size"] == 1 << 20]
        kd, nd, kt, nt = row["stalls"]
        if kd > 0:  # the default stalls (whether the file's choice does less is the
            break  # network's to say: 5 of 6 runs here, 11-22 stalls of 128 calls vs 0-5)
    # judged by means exactly where the stall counts tell the arms apart
    differ = stalls_differ((kd, nd, kt, nt))
    assert (row["statistic"] == "mean") == differ, row
    said = r.stdout + r.stderr
    assert ("each launch summed up by its mean" in said) == differ, said[-3000:]
    if differ:
        assert f"the default stalled in {kd} of {nd} calls" in row["note"], row


# its `tune app` took 50 to over 550 s in CI runs: where PME's all-to-all stalls, the
# stage that measures the default again took 30 calls a point whatever a call cost, and a
# call that waits out retransmission timeouts takes seconds (tuner/stalls.py, issue 85: a
# point now ends at the stage's stated time). alone: the whole test took 42 s with the
# machine to itself and 280 s beside the other worker (CI at commit 05ab446), whose ranks
# share the two cores with GROMACS's and the tune's
@pytest.mark.alone
@pytest.mark.timeout(1500)
def test_the_application_loop_on_gromacs_across_gigabit_ports(gigabit: Cluster) -> None:
    """GROMACS (tests/gmx_app.py: Debian's gmx_mpi, PME water), 2 nodes x 2 ranks on
    Gigabit ports, the application seed 002 tuned: its profile puts the run's collective
    time in PME's all-to-all at 256 KiB a rank pair (where the shaped links separate the
    algorithms: docs/benchmarks.md, "GROMACS on Gigabit ports"); `tune app` measures that
    group in the profiled layout across the nodes and writes a file; `tune verify --app`
    judges it on GROMACS's own runs, each verdict with its power."""
    from gmx_app import mdrun, prepare

    work = gigabit.home / "gmx"
    tpr = prepare(work, steps=20)  # 40 transposes: the profile's groups, a short run
    launch = ["mpirun", "-np", "4", "--hostfile", gigabit.hostfile(2), "--map-by",
              "ppr:2:node", "--bind-to", "none", "--mca", "plm_rsh_agent", gigabit.agent,
              *mdrun(tpr)]
    env = gigabit.env(PYTHONPATH=os.pathsep.join([str(REPO / "src"), *sys.path]))

    def tune(*argv: str) -> subprocess.CompletedProcess[str]:
        return gigabit.on("node1", [sys.executable, "-m", "colltune.cli", *argv], env=env,
                          cwd=work, timeout=900)

    r = tune("profile", "-o", "p.json", "--mpi", "/usr", "--", *launch)
    assert r.returncode == 0, r.stderr[-3000:]
    prof = json.loads((work / "p.json").read_text())
    top = max(prof["entries"], key=lambda e: e["time_s"]["mean"])
    assert (top["collective"], top["comm_size"], top["size"]) == ("alltoall", 4, 1 << 18), top
    r = tune("app", "p.json", "--db", "db.sqlite", "--out", "r.conf", "--json", "app.json",
             "--min-share", "0.05", "--hostfile", gigabit.hostfile(2), "--launcher-args",
             f"--mca plm_rsh_agent {gigabit.agent} --bind-to none", "--mpi", "/usr",
             "--point-time", "0.5", "--quiet",
             # confirmation is proven elsewhere (test_app_loop.py; by means, the stalls
             # test above): where the default stalls its pairs take up to 8 rounds of
             # 0.75 s stretches of calls that each may wait out a retransmission (a run
             # here: 422 s); here, where the group runs and what GROMACS's runs say
             "--confirm-rounds", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    groups = json.loads((work / "app.json").read_text())["groups"]
    (a2a,) = [g for g in groups if g["collective"] == "alltoall"]
    assert a2a["status"] == "measured" and a2a["layout"] == "2x2", groups
    r = tune("verify", "--app", "--rules", "r.conf", "--pairs", "2", "--max-rounds", "2",
             "--mpi", "/usr", "--json", "v.json", "--", *launch)
    check_app_verdict(r, json.loads((work / "v.json").read_text()))
