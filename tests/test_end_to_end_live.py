"""`tune` against real Open MPI 4.1 and 5.0: the rules file it writes is accepted by `tune
check` and Open MPI really runs, at a size inside each rule, the configuration the rule names.
Proof is Open MPI's own traffic (pml monitoring), not what colltune believes it asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, under_rules
from colltune.backends.openmpi.install import OpenMPI, read_catalog
from colltune.collectives import get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG
from colltune.core.config import Config
from colltune.outfile import write_atomic
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE, block_for_lookup, lookup_size
from helpers import tune_cli

pytestmark = pytest.mark.mpi

SIZES = "8,512,16K,256K"


def _size_inside(coll_name: str, np: int, sec: rules.CommRule, i: int) -> int:
    """A per-rank block whose lookup size falls inside rule i's range."""
    coll = get_collective(coll_name)
    lo = sec.rules[i].msgsize
    hi = sec.rules[i + 1].msgsize - 1 if i + 1 < len(sec.rules) else lo * 2 + 64
    block = block_for_lookup(coll, max(lo, 1), np)
    assert lo <= lookup_size(coll, block, np) <= hi
    return block


@pytest.mark.parametrize("coll_name", ["reduce", "allgather"])
def test_rules_written_by_tune_are_obeyed(ompi: OpenMPI, coll_name: str, tmp_path: Path) -> None:
    out = tmp_path / "rules.conf"
    summary = tmp_path / "summary.json"
    r = tune_cli(coll_name, "--boundaries", "midpoint",
                 "--np", "4", "--mpi", str(ompi.prefix), "--db",
                 str(tmp_path / "db.sqlite"), "--out", str(out), "--sizes", SIZES,
                 "--summary-json", str(summary), "--point-time", "0.02", "--quiet",
                 # two segment sizes: segmented and fan-out rules have their own test below
                 "--segsizes", "0,32K",
                 "--confirm-rounds", "0")  # unconfirmed choices are written too: more to obey
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    # format follows the detected version: 4.1.4 has no header, 5.0.11 may (>= 5.0.7)
    assert text.startswith("rule-file-version-2\n") == (ompi.version_tuple >= (5, 0, 7))
    chk = tune_cli("check", str(out), "--mpi", str(ompi.prefix))
    assert chk.returncode == 0, chk.stdout + chk.stderr

    doc = json.loads(summary.read_text())
    assert doc["mpi"]["version"] == ompi.version
    decided = doc["collectives"][coll_name]["4"]
    assert len(decided) == len(SIZES.split(","))

    cat = read_catalog(ompi)
    coll = get_collective(coll_name)
    rf = rules.read(out)
    # communicators below 4 ranks keep Open MPI's own choice (nothing measured there)
    lead, sec = rf.collectives[COLLTYPE[coll.name]]
    assert (lead.comsize, [(r.msgsize, r.alg) for r in lead.rules]) == (1, [(0, 0)])
    assert sec.comsize == 4
    for i, rule in enumerate(sec.rules):
        size = _size_inside(coll_name, 4, sec, i)
        cfg = Config.of(rule.alg, {SEG: rule.segsize, FAN: rule.faninout, MAXREQ: rule.maxreq or 0})
        got = under_rules(ompi, coll, 4, size, out)
        want = forced(ompi, coll, 4, size, cfg, cat)
        assert got == want, f"rule {i} ({cfg}) at {size} B: Open MPI ran something else"
        # the comparison can fail: some other algorithm leaves different traffic here
        others = [Config(a) for a in cat.algorithms[coll_name] if a != rule.alg][:4]
        assert any(forced(ompi, coll, 4, size, o, cat) != want for o in others), \
            f"no algorithm distinguishable from {cfg} at {size} B"


def test_open_mpi_drops_or_misreads_what_check_rejects(ompi: OpenMPI, tmp_path: Path) -> None:
    """Each defect is shown twice: Open MPI's traffic under the file, and `tune check`."""
    cat = read_catalog(ompi)
    reduce = get_collective("reduce")
    linear = forced(ompi, reduce, 4, 80, Config(1), cat)
    default = forced(ompi, reduce, 4, 80, Config(0), cat)
    assert linear != default
    v2 = ompi.version_tuple >= (5, 0, 7)
    head, tail = ("rule-file-version-2\n", " 0") if v2 else ("", "")
    files = {
        # name: (text, what Open MPI runs at 80 B, whether check accepts)
        "valid": (f"{head}1\n11\n1\n4\n1\n0 1 0 0{tail}\n", linear, True),
        "first_rule_not_zero": (f"{head}1\n11\n1\n4\n1\n1 1 0 0{tail}\n", default, False),
        # a human reads 100; Open MPI reads octal 0100 = 64, so 80 B falls in the linear rule
        "zero_padded": (f"{head}1\n11\n1\n4\n2\n0 0 0 0{tail}\n0100 1 0 0{tail}\n", linear,
                        False),
        "bracketed_header": ("[rule-file-version-2]\n1\n11\n1\n4\n1\n0 1 0 0\n", default, False),
    }
    if not v2:
        files["v2_header_on_old_open_mpi"] = ("rule-file-version-2\n1\n11\n1\n4\n1\n0 1 0 0 0\n",
                                              default, False)
    for name, (text, expected, accepted) in files.items():
        f = tmp_path / f"{name}.conf"
        f.write_text(text)
        got = under_rules(ompi, reduce, 4, 80, f)
        assert got == expected, f"{name}: Open MPI did not behave as documented"
        chk = tune_cli("check", str(f), "--mpi", str(ompi.prefix))
        assert (chk.returncode == 0) == accepted, f"{name}: {chk.stdout}{chk.stderr}"
        if not accepted:
            assert f"{f}:" in chk.stderr and "Traceback" not in chk.stderr


def test_tune_all_writes_every_collective_for_every_np(ompi41: OpenMPI, tmp_path: Path) -> None:
    out = tmp_path / "all.conf"
    r = tune_cli("all", "--boundaries", "midpoint",
                 "--np", "2,3", "--mpi", str(ompi41.prefix), "--db",
                 str(tmp_path / "db.sqlite"), "--out", str(out), "--sizes", "8,4K",
                 "--segsizes", "0", "--point-time", "0.02", "--min-reps", "5",
                 "--confirm-rounds", "0", "--quiet")  # confirmation: test_confirm
    assert r.returncode == 0, r.stderr
    assert tune_cli("check", str(out), "--mpi", str(ompi41.prefix)).returncode == 0
    rf = rules.read(out)
    assert sorted(rf.collectives) == sorted(COLLTYPE[c.name] for c in
                                            map(get_collective, [
                                                "allgather", "allgatherv", "allreduce",
                                                "alltoall", "alltoallv", "barrier", "bcast",
                                                "exscan", "gather", "reduce", "reduce_scatter",
                                                "reduce_scatter_block", "scan", "scatter"]))
    for secs in rf.collectives.values():
        assert [s.comsize for s in secs] == [2, 3]
    # size-independent collectives get exactly one rule per communicator size
    for name in ("barrier", "alltoallv", "scan", "exscan"):
        assert all(len(s.rules) == 1 for s in rf.collectives[COLLTYPE[get_collective(name).name]])


@pytest.mark.parametrize("coll_name,choices", [
    ("reduce", {8: Config(1), 4096: Config.of(4, {SEG: 1024}),
                262144: Config.of(2, {SEG: 32768, FAN: 2})}),
    ("bcast", {64: Config.of(3, {SEG: 1024}), 65536: Config.of(2, {SEG: 8192, FAN: 2})}),
    ("allgather", {8: Config(2), 4096: Config(4)}),
])
def test_writer_output_for_segmented_and_fanout_rules_is_obeyed(
        ompi: OpenMPI, coll_name: str, choices: dict[int, Config], tmp_path: Path) -> None:
    """Non-default configurations (segment sizes, chain fanouts) go through the same writer
    as `tune`, whatever the timings of the day choose, and Open MPI must run exactly them."""
    from colltune.backends.openmpi.backend import choose_rules_version
    from colltune.backends.openmpi.tuned_rules import build_rules, section
    from colltune.core.records import Decision

    cat = read_catalog(ompi)
    coll = get_collective(coll_name)
    ds = [Decision(s, lookup_size(coll, s, 4), c, c, 1.0, 2.0, 0.0, True)
          for s, c in choices.items()]
    version = choose_rules_version(ompi, None)
    rf = build_rules(None, version, {coll_name: {4: ds}}, ompi, cat)
    assert [s.comsize for s in rf.collectives[COLLTYPE[coll.name]]] == [1, 4]
    assert rf.collectives[COLLTYPE[coll.name]][1].rules == section(4, ds).rules
    out = tmp_path / "r.conf"
    write_atomic(out, rules.render(rf))
    assert tune_cli("check", str(out), "--mpi", str(ompi.prefix)).returncode == 0
    default_differs = 0
    for size, cfg in choices.items():
        got = under_rules(ompi, coll, 4, size, out)
        assert got == forced(ompi, coll, 4, size, cfg, cat), f"{cfg} at {size} B not applied"
        default_differs += got != forced(ompi, coll, 4, size, Config(0), cat)
    assert default_differs > 0, "every choice looked like the default: the test proves nothing"
