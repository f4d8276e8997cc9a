"""UCC's tuning strings as colltune reads and writes them (rules/ucc_tune.py): the strings
UCC itself ships as its defaults, refusals naming the token, and a round trip from choices
to a string and back to what each size runs. What UCC does with them is
tests/test_ucc_live.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colltune.backends.openmpi.install import OpenMPI
from colltune.rules import ucc_radix as ur
from colltune.rules import ucc_tune as u
from helpers import tune_cli

# tl/ucp's own default strings in UCC 1.8 (src/components/tl/ucp/*/*.h), as UCC fills them
DEFAULTS = [
    "allreduce:0-4k:@0#allreduce:4k-inf:@1",
    "bcast:0-inf:[2-2]:@0#bcast:0-32k:[3-inf]:@0#bcast:32k-inf:[3-inf]:@1",
    "reduce:0-32K:@0#reduce:32K-inf:@2",
    "alltoallv:host:[64-inf]:@hybrid",
    "allgatherv:0-4k:@knomial#allgatherv:4k-inf:@ring",
    "reduce_scatter:@ring",
]


@pytest.mark.parametrize("text", DEFAULTS)
def test_ucc_s_own_strings_parse_and_apply(text: str) -> None:
    for team in (2, 3, 4, 64):
        u.apply(u.parse(text), team)


def test_a_range_ends_before_its_end_as_ucc_runs_it() -> None:
    bcast = u.apply(u.parse(DEFAULTS[1]), 4)
    assert u.runs(bcast, "bcast", 32767) == "knomial"
    assert u.runs(bcast, "bcast", 32768) == "sag_knomial"  # 32k-inf holds 32k itself
    assert u.runs(u.apply(u.parse(DEFAULTS[1]), 2), "bcast", 1 << 30) == "knomial"
    assert u.runs(bcast, "allreduce", 8) is None  # left to UCC


def test_qualifiers_are_known_by_form_in_any_order_and_case() -> None:
    (t,) = u.parse("[4-inf]:@dbt:1K-1M,2M-inf:HOST:Bcast,REDUCE:10")
    assert t.colls == ("bcast", "reduce") and t.mem_types == ("host",)
    assert t.score == 10 and t.alg == "dbt" and t.teams == ((4, 2**32 - 1),)
    assert t.ranges == ((1024, 1 << 20), (2 << 20, u.INF))
    assert u.parse("##bcast::@0#") == [u.Token("bcast::@0", colls=("bcast",), alg="0")]


@pytest.mark.parametrize(("text", "token"), [
    ("bcast:0-4k:@0:@1", "@1"),  # a second algorithm
    ("bcast:bcast:@0", "bcast"),  # a second list of collectives
    ("bcst:@0", "bcst"),  # no such collective
    ("bcast:0-4q:@0", "0-4q"),  # no such unit
    ("bcast:4k:@0", "4k"),  # a size is not a range
    ("bcast:0-1-2:@0", "0-1-2"),
    ("bcast:[4-x]:@0", "[4-x]"),
    ("bcast:[8-4]:@0", "[8-4]"),
    ("bcast:@0:7:9", "9"),  # a second score
])
def test_what_ucc_cannot_read_is_refused_naming_the_qualifier(text: str, token: str) -> None:
    with pytest.raises(u.UccTuneError) as e:
        u.apply(u.parse(text), 4)
    assert e.value.token == token


@pytest.mark.parametrize(("text", "why"), [
    ("bcast:@ring", "bcast has no algorithm @ring (it has knomial, sag_knomial, dbt)"),
    ("bcast:@3", "bcast has no algorithm @3 (ids 0-2"),
    ("@1", "has no algorithm"),  # every collective: barrier has one algorithm only
    ("scatter:@0", "scatter has no algorithm to choose"),
    ("bcast:0-4k:@0#bcast:1k-8k:@1", "overlaps 0-4096"),
    ("bcast:4k-1k:@0", "does not end after its start"),
])
def test_what_a_team_refuses_is_said_with_why(text: str, why: str) -> None:
    with pytest.raises(u.UccTuneError) as e:
        u.apply(u.parse(text), 4)
    assert why in e.value.why


def test_a_team_size_outside_the_token_skips_it_and_silent_drops_are_said() -> None:
    assert u.apply(u.parse("bcast:[8-16]:@9"), 4).ranges == {}  # never looked at
    with pytest.raises(u.UccTuneError):
        u.apply(u.parse("bcast:[8-16]:@9"), 8)
    # only a token's last range decides: an earlier bad one is dropped without an error
    a = u.apply(u.parse("bcast:0-4k:@0#bcast:1k-2k,8k-16k:@1"), 4)
    assert u.runs(a, "bcast", 10000) == "sag_knomial" and u.runs(a, "bcast", 1500) == "knomial"
    assert any("drops" in i for i in a.ignored)
    assert "ignores it" in u.apply(u.parse("bcast:0-4k"), 4).ignored[0]


def test_memory_units_as_ucx_reads_them() -> None:
    assert [u.memunits(t) for t in ("0", "4k", "4KB", "1M", "1g", "inf", "00012", "4kbb")] \
        == [0, 4096, 4096, 1 << 20, 1 << 30, u.INF, 12, 4096]
    assert all(u.memunits(t) is None for t in ("1.5k", "4kk", "k", "", "1e3", "4 ", "4Kx"))


choices = st.dictionaries(
    st.sampled_from(["allgather", "allreduce", "alltoall", "bcast", "reduce"]),
    st.lists(st.integers(1, 1 << 31), min_size=1, max_size=6, unique=True), min_size=1)


@settings(max_examples=60, deadline=None)
@given(choices, st.randoms(use_true_random=False))
def test_a_written_string_runs_each_choice_from_its_first_size_on(
        starts: dict[str, list[int]], rnd: object) -> None:
    picked = {c: sorted((s, rnd.choice(u.TL_UCP_ALGS[c]))  # type: ignore[attr-defined]
                        for s in ss) for c, ss in starts.items()}
    picked = {c: [(1 if i == 0 else s, a) for i, (s, a) in enumerate(v)]
              for c, v in picked.items()}
    applied = u.apply(u.parse(u.render(picked, (2, 64))), 4)
    assert not applied.ignored
    for c, v in picked.items():
        for i, (first, alg) in enumerate(v):
            assert u.runs(applied, c, first) == alg
            end = v[i + 1][0] - 1 if i + 1 < len(v) else 1 << 40
            assert u.runs(applied, c, end) == alg
    assert u.apply(u.parse(u.render(picked, (8, 64))), 4).ranges == {}  # not this team


def test_team_spans_cover_every_team_size_once() -> None:
    toks = u.parse("bcast:[8-16]:@0#bcast:[12-inf]:@1#reduce:[4]:@0")
    spans = u.team_spans(toks)
    assert spans == [(1, 3), (4, 4), (5, 7), (8, 11), (12, 16), (17, 2**32 - 1)]
    assert u.team_spans(u.parse("bcast:@0")) == [(1, 2**32 - 1)]


def test_an_environment_file_of_strings_is_this_format_and_nothing_else() -> None:
    text = "# for the job\nexport UCC_TL_UCP_TUNE='bcast:0-4k:@0#bcast:4k-inf:@1'\n" \
           "UCC_CL_BASIC_TUNE=allreduce:inf\n"
    assert u.env_lines(text) == [(2, "UCC_TL_UCP_TUNE", "bcast:0-4k:@0#bcast:4k-inf:@1"),
                                 (3, "UCC_CL_BASIC_TUNE", "allreduce:inf")]
    assert u.env_lines(text + "OMPI_MCA_coll_ucc_enable=1\n") is None  # not only strings
    assert u.env_lines("# nothing\n") is None and u.env_lines("UCC_TLS=ucp\n") is None


def _check(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    f = tmp_path / "ucc.env"
    f.write_text(text)
    r = tune_cli("check", str(f), "--json", str(tmp_path / "c.json"))
    return r, json.loads((tmp_path / "c.json").read_text())


def test_tune_check_reads_a_file_of_strings_as_ucc_does_for_every_team(tmp_path: Path
                                                                       ) -> None:
    """`tune check` of a job's UCC strings: each refusal names the line, the team sizes
    UCC refuses it for, the token and why; what UCC drops quietly is a warning; the
    strings UCC ships as its own defaults pass. (That UCC refuses exactly these:
    tests/test_ucc_live.py.)"""
    r, doc = _check(tmp_path, "".join(f"UCC_TL_UCP_TUNE={s}\n" for s in DEFAULTS[:1]))
    assert r.returncode == 0 and doc["format"] == "ucc-tune", r.stdout + r.stderr
    assert doc["strings"] == [{"variable": "UCC_TL_UCP_TUNE", "line": 1, "tokens": 2}]
    assert not doc["warnings"]
    r, doc = _check(tmp_path, "# mine\nUCC_TL_UCP_TUNE=bcast:0-4k:@dbt#bcast:1k-8k:@1\n")
    assert r.returncode == 1 and doc["line"] == 2, r.stderr
    assert "teams of 1-inf ranks at 'bcast:1k-8k:@1'" in doc["reason"], doc
    assert "overlaps 0-4096" in doc["reason"] and "UCC's own choice" in doc["reason"]
    # only where both tokens reach a team: 12 to 16 ranks
    r, doc = _check(tmp_path, "UCC_TL_UCP_TUNE=bcast:0-4k:[8-16]:@dbt#"
                              "bcast:1k-8k:[12-inf]:@1\n")
    assert r.returncode == 1 and "teams of 12-16 ranks" in doc["reason"], doc
    assert "teams of 8" not in doc["reason"] and "17" not in doc["reason"]
    r, doc = _check(tmp_path, "UCC_TL_UCP_TUNE=bcast:0-4k:@dbt#bcast:1k-2k,8k-16k:@1\n")
    assert r.returncode == 0 and len(doc["warnings"]) == 1, doc
    assert "UCC drops this range and reads on" in doc["warnings"][0]
    r, doc = _check(tmp_path, "UCC_TL_UCP_TUNE=bcast:@sag\n")
    assert r.returncode == 1 and "has no algorithm @sag" in doc["reason"], doc
    # another component's algorithms are not known here: said, its ranges still checked
    r, doc = _check(tmp_path, "UCC_CL_HIER_TUNE=allreduce:0-4k:@x#allreduce:1k-inf:@y\n")
    assert r.returncode == 1 and "overlaps" in doc["reason"], doc
    r, doc = _check(tmp_path, "UCC_CL_HIER_TUNE=allreduce:0-4k:@x\n")
    assert r.returncode == 0 and "not checked" in doc["warnings"][0], doc


def test_check_says_when_the_installation_never_hands_a_collective_to_ucc(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Debian's Open MPI 4.1.4 has no coll/ucc: a site handing its jobs these strings
    changes nothing, and `tune check --mpi` says so (coll/ucc off, or below another
    component: tests/test_ucc_live.py, on an Open MPI built with it)."""
    f = tmp_path / "ucc.env"
    f.write_text("UCC_TL_UCP_TUNE=bcast:0-4k:@knomial#bcast:4k-inf:@dbt\n")
    r = tune_cli("check", str(f), "--mpi", str(ompi41.prefix), env=ompi41.tool_env())
    assert r.returncode == 0, r.stderr
    assert "has no coll/ucc component: its collectives never reach UCC" in r.stderr, r.stderr


@pytest.mark.parametrize("text, default, at", [
    ("auto", None, {0: None, 1 << 30: None}),
    ("4", 4, {0: 4}),
    ("0-4k:host:2,auto", None, {0: 2, 4096: 2, 4097: None}),  # both ends included
    ("host:8,3", 3, {0: 8, u.INF: 8}),
    ("0-4095:2,4096-inf:host:4,AUTO", None, {4095: 2, 4096: 4, u.INF: 4}),
    ("0-1k:cuda:2,4", 4, {0: 4}),  # another memory type's range: not a host call's
    ("0-1k:2,0-64k:4,auto", None, {1024: 2, 1025: 4}),  # the first that holds it wins
    (",,0-1k::2,,auto,", None, {512: 2}),  # empty parts and fields vanish (strtok)
])
def test_a_radix_setting_reads_as_ucc_reads_it(text: str, default: object,
                                               at: dict[int, object]) -> None:
    """UCC 1.8's per-range radix (ucc_config_sscanf_uint_ranged): parts by ',', fields by
    ':', the first range that holds a size and memory type gives its radix, both ends
    included (unlike a tuning string's ranges); `auto` alone is the default. Held to UCC
    itself (`ucc_info -c`) by tests/test_ucc_live.py."""
    r = ur.parse_radix(text)
    assert r.default == default
    for size, k in at.items():
        assert r.at(size) == k, (text, size)


@pytest.mark.parametrize("text, token", [
    ("0-4k:host:auto", "0-4k:host:auto"),  # auto is the default's alone
    ("0-4k:host", "0-4k:host"),  # the last field is the radix
    ("0-4k:foo:2", "0-4k:foo:2"),
    ("1:0-4k:host:2", "1:0-4k:host:2"),  # four fields
    ("4k-:2,auto", "4k-:2"),  # one end: no range
    ("", ""),
])
def test_a_radix_setting_ucc_rejects_is_refused_naming_the_part(text: str, token: str
                                                                ) -> None:
    with pytest.raises(u.UccTuneError) as e:
        ur.parse_radix(text)
    assert e.value.token == token


def test_what_ucc_takes_in_a_radix_setting_but_runs_otherwise_is_said() -> None:
    said = ur.radix_problems(ur.parse_radix("0-64k:host:4,0-4k:host:2,1k-0:3,1"))
    assert any("inside 0-65536, which comes first" in s for s in said), said
    assert any("ends before it starts" in s for s in said), said
    assert any("default radix 1" in s for s in said), said
    assert any("no default" in s for s in ur.radix_problems(ur.parse_radix("0-4k:host:2")))
    assert not ur.radix_problems(ur.parse_radix("0-4k:host:2,4k-inf:host:4,auto"))


def test_a_written_radix_setting_gives_each_range_its_radix() -> None:
    """Written from (first size, end excluded, radix) rows with both ends included, host
    memory and UCC's own radix (auto) elsewhere: each row's first and last size, and the
    size after it, read back as meant."""
    rows = [(0, 4096, 2), (4096, 65536, 4), (1 << 20, u.INF, 3)]
    text = ur.render_radix(rows)
    assert text == "0-4095:host:2,4K-65535:host:4,1M-inf:host:3,auto", text
    r = ur.parse_radix(text)
    assert not ur.radix_problems(r)
    for lo, hi, k in rows:
        assert r.at(lo) == k and r.at(hi - 1 if hi != u.INF else hi) == k
        assert r.at(lo, "cuda") is None
    assert r.at(65536) is None and r.at((1 << 20) - 1) is None


def test_tune_check_reads_radix_settings_beside_the_string(tmp_path: Path) -> None:
    f = tmp_path / "ucc.env"
    f.write_text("UCC_TL_UCP_TUNE='allreduce:0-4k:@knomial'\n"
                 "UCC_TL_UCP_ALLREDUCE_KN_RADIX='0-4095:host:2,auto'\n")
    r = tune_cli("check", str(f))
    assert r.returncode == 0 and "UCC_TL_UCP_ALLREDUCE_KN_RADIX" in r.stdout, r.stdout
    for bad, why in (("0-4k:host:auto", "UCC rejects the setting at '0-4k:host:auto'"),
                     ("0-4k:host:1,auto", "radix 1 (a k-nomial tree needs 2 or more)")):
        f.write_text(f"UCC_TL_UCP_ALLGATHER_KN_RADIX='{bad}'\n")
        r = tune_cli("check", str(f))
        assert r.returncode == 1 and why in " ".join(r.stderr.split()), r.stderr
        assert "ucc.env:1:" in r.stderr
    f.write_text("UCC_TL_UCP_BCAST_SAG_KN_RADIX=0-4k:host:2\n")  # no default: a warning
    r = tune_cli("check", str(f))
    assert r.returncode == 0 and "no default" in " ".join((r.stdout + r.stderr).split())
