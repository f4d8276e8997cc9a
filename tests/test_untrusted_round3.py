"""Files from others, round three (issue 73): findings 6 to 11, each reproduced
as the review found it (findings 1-5, the private cache and job directory:
tests/test_private.py). Each test fails without its fix."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.impi.install import IntelMPI
from colltune.backends.impi.install import catalog as impi_catalog
from colltune.backends.impi.splice import Splicer, record_of
from colltune.backends.mpich.install import MPICH, builtin_table, library_path
from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.kernel.build import build_kernel
from colltune.rules import impi_table
from colltune.rules.impi_table import Node
from colltune.rules.impi_tuning import LIBRARY, Rules
from colltune.store import Context, Store
from conftest import get_mpich
from helpers import tune_cli


def test_an_open_mpi_6_file_with_a_key_twice_is_never_installed(tmp_path: Path) -> None:
    """Finding 6: check (as Open MPI) read the first of two equal keys and export installed
    Python's reading, the last: the installed file ran another algorithm than the one
    checked. Now check warns and export refuses."""
    rule = '{"comm_size_min": 4, "comm_size_max": 4, "rules": [{"msg_size_min": 0, ' \
           '"alg": 1, "alg": 2}]}'
    path = tmp_path / "rules.json"
    path.write_text('{"collectives": {"bcast": [' + rule + ']}}\n')
    r = tune_cli("check", str(path))
    assert r.returncode == 0 and "key 'alg' twice: Open MPI reads the first" in r.stderr, \
        r.stderr
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(path), "--site", str(site))
    assert r.returncode == 2 and "key 'alg' twice" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not site.exists()


@pytest.mark.parametrize("deep", ["[" * 200_000 + "]" * 200_000,
                                  '{"a": ' * 200_000 + "1" + "}" * 200_000],
                         ids=["arrays", "objects"])
def test_json_nested_200k_deep_is_one_line_in_every_reader(tmp_path: Path, deep: str) -> None:
    """Finding 9: a deeply nested object ended in a RecursionError traceback in check,
    verify and export --from (arrays were read as a broken classic file)."""
    path = tmp_path / "deep.json"
    path.write_text(deep)
    for argv in (("check", str(path)), ("check", str(path), "--mpi", "/usr"),
                 ("verify", str(path), "--np", "2", "--mpi", "/usr"),
                 ("export", "--from", str(path), "--site", str(tmp_path / "site"))):
        r = tune_cli(*argv)
        assert r.returncode in (1, 2, 3) and "Traceback" not in r.stderr, (argv, r.stderr)
        assert "RecursionError" not in r.stderr and r.stderr.startswith("error: "), r.stderr
        assert r.stderr.count("\n") <= 2, r.stderr  # the error and what to do
    assert not (tmp_path / "site").exists()


def test_hostfiles_are_read_as_bounded_text_with_slots_as_a_word(tmp_path: Path) -> None:
    """Finding 10: non-UTF-8 gave a traceback, a FIFO hung, /dev/zero was read without
    bound, and `max_slots=8 slots=1` was read as 8 slots (mpirun then failed three times).
    Each is now one line before anything is launched."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe node1\n")
    maxslots = tmp_path / "maxslots"
    maxslots.write_text("localhost max_slots=8 slots=1\n")
    cases = {str(fifo): "not a regular file", "/dev/zero": "not a regular file",
             str(binary): "not UTF-8 text", str(maxslots): "more than the 1 slots"}
    for hostfile, why in cases.items():
        r = tune_cli("reduce", "--np", "4", "--mpi", "/usr", "--hostfile", hostfile,
                     "--sizes", "8", "--out", str(tmp_path / "r.conf"), timeout=60)
        assert r.returncode == 2 and why in r.stderr, (hostfile, r.stderr)
        error = r.stderr[r.stderr.index("error: "):]  # after the note naming the family
        assert "Traceback" not in r.stderr and error.count("\n") <= 2, r.stderr
    assert not (tmp_path / "r.conf").exists()


def test_report_plots_a_bounded_number_of_contexts(tmp_path: Path) -> None:
    """Finding 11: four plot files per context without bound (a 20-context store took
    31 s and wrote 83 files). Now the first --max-plots contexts are plotted and every
    context keeps its table and CSV rows, said on the page and on the terminal."""
    db = tmp_path / "many.db"
    s = Store(db)
    for np_ in range(2, 8):
        ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "node1", np_, np_, 1,
                      "reduce", "openmpi")
        for size in (8, 1024):
            for cfg, t in ((Config(0), 2e-6), (Config(2), 1e-6)):
                xs = [t * (1 + 0.01 * i) for i in range(9)]
                s.add(ctx, cfg, PointResult(0, size, "ok", n=9, median=xs[4], ci_lo=xs[2],
                                            ci_hi=xs[6], mean=sum(xs) / 9, min=xs[0],
                                            max=xs[-1], samples=xs), "mpit")
    s.close()
    out = tmp_path / "rep"
    r = tune_cli("report", "--db", str(db), "--out", str(out), "--max-plots", "2")
    assert r.returncode == 0, r.stderr
    assert "plotted the first 2 of 6 contexts" in r.stderr
    assert len(list(out.glob("*.png"))) == 2 * 2 and len(list(out.glob("*.svg"))) == 2 * 2
    page = (out / "index.html").read_text()
    assert "Plots for the first 2 of 6 contexts" in page
    assert page.count("<h2 id=") == 6  # every context's section and table
    rows = (out / "decisions.csv").read_text().splitlines()
    assert {line.split(",")[4] for line in rows[1:]} == {str(n) for n in range(2, 8)}, rows[:3]


def _init_exits(mpich: MPICH, tuning_file: Path) -> int:
    """Whether a real 2-rank job of this MPICH starts with the file: the library's word."""
    prog = tuning_file.parent / "init"
    if not prog.exists():
        (tuning_file.parent / "init.c").write_text(
            "#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); "
            "MPI_Finalize(); return 0; }\n")
        subprocess.run([str(mpich.mpicc), "-o", str(prog), str(tuning_file.parent / "init.c")],
                       check=True, env={**os.environ, **mpich.tool_env()})
    r = subprocess.run([str(mpich.mpirun), "-n", "2", str(prog)], capture_output=True,
                       timeout=120, check=False,
                       env={**os.environ, **mpich.tool_env(),
                            "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(tuning_file)})
    return r.returncode


LEAF = {"algorithm=MPIR_Bcast_intra_binomial": {}}
MPICH_FILES = {
    "comm_avg_ppn": {"comm_avg_ppn<=2": LEAF, "comm_avg_ppn=any": LEAF},
    "unknown algorithm": {"comm_size=any": {"algorithm=MPIR_Bcast_intra_nosuch": {}}},
    "unknown key": {"weird_key<=3": LEAF, "comm_size=any": LEAF},
    "valid": {"comm_size=any": LEAF},
}


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["mpich40", "mpich50"])
def test_an_mpich_file_its_mpich_aborts_on_never_passes(tmp_path: Path, which: str) -> None:
    """Finding 8: files that make MPICH abort in MPI_Init passed `check --mpi` and export.
    Each is now started by the named MPICH (one process) before it passes; a real 2-rank
    job of that MPICH is the judge that the refusal is right: 4.0.2 aborts on
    comm_avg_ppn, which 5.0.2 takes."""
    mpich = get_mpich(which)
    # as colltune writes them: MPICH's own table, bcast's intra-communicator subtree
    # replaced (a file must cover every collective: 5.0.2 aborts on one that does not)
    library = library_path(build_kernel(mpich))
    assert library is not None
    for name, intra in MPICH_FILES.items():
        table = builtin_table(library)
        assert table is not None and "comm_type=intra" in table["collective=bcast"]
        table["collective=bcast"]["comm_type=intra"] = intra
        path = tmp_path / name.replace(" ", "_") / "t.json"
        path.parent.mkdir()
        path.write_text(json.dumps(table))
        aborts = _init_exits(mpich, path) != 0
        assert aborts == (name != "valid" and not (name == "comm_avg_ppn" and
                                                   mpich.version_tuple >= (4, 2))), name
        r = tune_cli("check", str(path), "--mpi", str(mpich.prefix))
        site = path.parent / "site"
        e = tune_cli("export", "--from", str(path), "--site", str(site), "--mpi",
                     str(mpich.prefix))
        if aborts:
            for res in (r, e):
                assert res.returncode == 2 and "aborts in MPI_Init" in res.stderr, res.stderr
            assert not site.exists()
        else:
            assert r.returncode == 0 and e.returncode == 0, r.stderr + e.stderr


@pytest.mark.mpi
def test_an_intel_mpi_table_is_checked_by_its_content(impi: IntelMPI, tmp_path: Path) -> None:
    """Finding 7: a `.dat` table was judged by its shape and the `.rules` record beside it:
    an empty table, or Intel MPI's own with every leaf set to a preset that does not exist,
    passed check as "1 collective tuned" and was installed. Now the table is built again
    from the record (the installation's own, the record's rules spliced in) and must be
    that table, node for node: what is checked is what export installs."""
    placement = registry.named("impi").place(4)
    presets = sorted(impi_catalog(impi, ["bcast"]).algorithms["bcast"])
    splicer = Splicer(impi, placement, {"bcast": presets})
    layers = {placement.ppn: {"bcast": {4: Rules([(1024, presets[0]), (None, LIBRARY)])}}}
    good = splicer.table(layers)
    leaves = impi_table.decode(good)

    def unknown(n: Node) -> None:  # every leaf runs an algorithm Intel MPI does not have
        if n.records is not None:
            n.records = [(r[0], 99, *r[2:]) for r in n.records]  # type: ignore[misc]
        for k in n.kids:
            unknown(k)

    unknown(leaves)
    tables = {"spliced": good, "empty": impi_table.encode(Node(0, 4, 65536, [])),
              "unknown presets": impi_table.encode(leaves)}
    for name, data in tables.items():
        d = tmp_path / name.replace(" ", "_")
        d.mkdir()
        dat = d / "t.dat"
        dat.write_bytes(data)
        record_of(dat).write_text(impi_table.render_rules(layers, str(dat)))
        # each judgement launches Intel MPI twice (its own table, then each preset's entry):
        # once a table; export checks what it installs
        argv = ("check", str(dat)) if name == "empty" else \
            ("export", "--from", str(dat), "--site", str(d / "site"))
        r = tune_cli(*argv, "--mpi", str(impi.prefix))
        if name == "spliced":
            assert r.returncode == 0, r.stderr
            assert (d / "site" / "colltune-impi.dat").read_bytes() == data
            continue
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "own table with the rules of its record spliced in" in r.stderr, r.stderr
        assert not (d / "site").exists()
