"""Generated files are code: nothing a profile, rules file or path holds may run when a user
loads an exported module or sources a profile (issue: safe to install for every user,
findings 1 and 2). Each generated file is loaded by its real interpreter."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colltune.errors import ColltuneError
from colltune.export import _modules
from colltune.rules import mpich_env
from colltune.rules.safe import SAFE_VALUE, check_env
from helpers import module_env, tune_cli

EXAMPLES = int(os.environ.get("COLLTUNE_FUZZ_EXAMPLES", "150"))
RULES = "1\n7\n1\n4\n1\n0 1 0 0\n"  # reduce, linear at every size

ATTACKS = {
    "tcl": "a} [exec touch PWNED] {b",
    "lua": 'a", os.execute("touch PWNED"), "b',
    "shell": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "newline": "a\ntouch PWNED",
}


@pytest.mark.parametrize("how", sorted(ATTACKS))
def test_mpich_profile_value_that_would_run_code_is_refused(how: str, tmp_path: Path) -> None:
    value = ATTACKS[how]
    prof = tmp_path / "tuning.env"
    (tmp_path / "t.json").write_text('{"collective=reduce": {"composition=alpha": {}}}')
    quoted = "'" + value.replace("'", "'\\''") + "'"
    prof.write_text(f"export MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0\n"
                    f"export MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={tmp_path}/t.json\n"
                    f"export MPIR_CVAR_REDUCE_INTRA_ALGORITHM={quoted}\n")
    check = tune_cli("check", str(prof))
    assert check.returncode != 0, check.stdout
    r = tune_cli("export", "--from", str(prof), "--site", str(tmp_path / "site"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "site").exists()
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_mvapich2_profile_value_that_would_run_code_is_refused(tmp_path: Path) -> None:
    prof = tmp_path / "mv2.conf"
    prof.write_text(f"MV2_SHOW_ENV_INFO = {ATTACKS['tcl']}\n")
    check = tune_cli("check", str(prof))
    assert check.returncode != 0
    assert "has characters no MVAPICH2 variable takes" in check.stdout + check.stderr
    r = tune_cli("export", "--from", str(prof), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and not (tmp_path / "site").exists()


def test_a_newline_in_a_path_never_reaches_a_generated_file(tmp_path: Path) -> None:
    """The stamp names the resolved --from path: through a symlink whose directory name
    holds a newline, that used to put `touch X` on a line of its own in every file."""
    evil = tmp_path / "dir\ntouch PWNED\n#"
    evil.mkdir()
    (evil / "rules.conf").write_text(RULES)
    link = tmp_path / "rules.conf"
    link.symlink_to(evil / "rules.conf")
    r = tune_cli("export", "--from", str(link), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and "cannot be written into module files" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()
    # the same through --site
    (tmp_path / "ok.conf").write_text(RULES)
    for site in (tmp_path / "s\nplm_rsh_agent = evil", tmp_path / 's"q', tmp_path / "s\\b"):
        r = tune_cli("export", "--from", str(tmp_path / "ok.conf"), "--site", str(site))
        assert r.returncode == 2 and "--site" in r.stderr, r.stderr
        assert not site.exists()


def test_mpich_profile_with_an_unclosed_quote_is_a_clean_error(tmp_path: Path) -> None:
    prof = tmp_path / "p.env"
    prof.write_text("export MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE='0\n")
    r = tune_cli("check", str(prof))
    assert r.returncode != 0 and "Traceback" not in r.stderr


values = st.text(st.characters(codec="utf-8"), max_size=40)
names = st.sampled_from(["OMPI_MCA_coll_tuned_use_dynamic_rules", "MV2_FOO", "X"])


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(names, values, min_size=1, max_size=3))
def test_modules_run_nothing_and_set_exactly_the_values(env: dict[str, str],
                                                        tmp_path: Path) -> None:
    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    try:
        tcl, lua = _modules(env, "colltune", src)
    except ColltuneError:
        assert not all(SAFE_VALUE.fullmatch(v) for v in env.values())
        return
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    for name, text in (("tuned", tcl), ("tuned.lua", lua)):
        path = tmp_path / name
        path.write_text(text)
        assert module_env(path, cwd=work) == env
    assert not list(work.iterdir())


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_shell_profile_sets_exactly_the_value(value: str, tmp_path: Path) -> None:
    """The MPICH profile (sourced by bash) either refuses the value or sets it exactly."""
    prof = mpich_env.EnvProfile(collectives=["reduce"], algorithms={"reduce": value},
                                comments=[f"a comment with {value}"])
    try:
        check_env(prof.variables(), "the MPICH profile")
    except ColltuneError:
        return
    path = tmp_path / "p.env"
    path.write_text(mpich_env.render(prof))
    out = subprocess.run(["bash", "-c", 'set -eu; source "$1"; printf %s '
                                        '"$MPIR_CVAR_REDUCE_INTRA_ALGORITHM"', "-", str(path)],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0 and out.stdout == value
    assert mpich_env.parse(path.read_text()).algorithms == {"reduce": value}
