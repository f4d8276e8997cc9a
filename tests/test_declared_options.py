"""Options declared once (issue 87, item 2): a request's field carries its flag, default,
bound and help (core/setting); the CLI's option, the request's default and the refusal of a
value out of range all come from it; the C layer refuses a plan line that is missing or out
of range instead of running on a value of its own."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import typer

from colltune.apploop.online.request import OnlineRequest
from colltune.backends.openmpi.install import OpenMPI
from colltune.core.setting import Declared
from helpers import tune_cli


def _declared() -> list[tuple[str, object, Declared]]:
    return [(f.name, f.default, f.metadata["option"]) for f in dataclasses.fields(OnlineRequest)
            if "option" in f.metadata]


def test_the_cli_takes_each_option_from_its_declaration() -> None:
    """tune online's typer options are the request's declarations: same flags, default and
    help (a default said twice could drift)."""
    from colltune.cli import app

    command = typer.main.get_command(app)
    online = command.commands["online"]  # type: ignore[attr-defined]
    params = {p.name: p for p in online.params}
    declared = _declared()
    assert len(declared) >= 9
    for name, default, d in declared:
        p = params[name]
        flags = [f for f in d.flags[0].split("/")]
        assert set(flags) <= set(p.opts) | set(p.secondary_opts), (name, p.opts)
        assert p.default == default and p.help == d.help, name


@pytest.mark.parametrize("argv,said", [
    (["--explore-share", "0.9"], "--explore-share 0.9: a share of calls between 0 and 0.5"),
    (["--samples", "600"], "--samples 600: needs 1 <= --samples <= 512"),
    (["--first-calls", "0"], "--first-calls 0: needs 1 <= --first-calls <= 512"),
    (["--first-calls", "40"], "--first-calls 40, --samples 32: need first <= samples"),
    (["--min-calls", "-1"], "--min-calls -1: needs 0 <= --min-calls"),
    (["--timeout", "0"], "--timeout 0.0: needs 0 < --timeout"),
], ids=["share", "samples", "first", "first-over-samples", "min-calls", "timeout"])
def test_a_value_out_of_its_bounds_is_one_line_naming_the_default(
        tmp_path: Path, argv: list[str], said: str) -> None:
    r = tune_cli("online", "-o", str(tmp_path / "r.conf"), "--mpi", "/usr", *argv, "--",
                 "mpirun", "-np", "2", "./nothing")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"error: {said}", r.stderr
    assert lines[1].startswith("  what to do: the default"), r.stderr
    assert not (tmp_path / "r.conf").exists()


@pytest.mark.mpi
@pytest.mark.parametrize("drop,why", [
    ("first", "the plan's line first (1 <= F <= samples) is missing or out of range"),
    ("switch", "the plan's line switch (dup or call) is missing or out of range"),
    ("share=2", "the plan's line share (0 < S <= 1) is missing or out of range"),
    ("batch=1000", "the plan's line batch (1 <= B <= 256) is missing or out of range"),
])
def test_the_layer_refuses_a_plan_line_missing_or_out_of_range(
        ompi41: OpenMPI, tmp_path: Path, drop: str, why: str) -> None:
    """The layer used to substitute its own value (share 0.1, batch 32, ...) for a line
    missing or out of range: a plan another version wrote ran on settings nobody chose.
    Now the job stops at MPI_Init with the line named."""
    from colltune.kernel.build import build_kernel
    from test_online import _build, plan_head

    exe = _build(ompi41, tmp_path)
    lib = build_kernel(ompi41, name="collonline")
    head = plan_head()
    if "=" in drop:
        key, value = drop.split("=")
        head = plan_head(**{key: value})
    else:
        head = "".join(ln + "\n" for ln in head.splitlines() if not ln.startswith(drop))
    plan, d = tmp_path / "plan", tmp_path / "dir"
    plan.write_text(head)
    d.mkdir(mode=0o700)
    r = subprocess.run([str(ompi41.mpirun), "-np", "2", "--oversubscribe", "-x",
                        f"LD_PRELOAD={lib}", "-x", f"COLLTUNE_ONLINE_PLAN={plan}", "-x",
                        f"COLLTUNE_ONLINE_DIR={d}", str(exe), "20", "0"],
                       capture_output=True, text=True, env=ompi41.tool_env(), timeout=120,
                       check=False)
    assert r.returncode != 0 and f"colltune online: {why}" in r.stderr, r.stderr[-1500:]
    assert not list(d.glob("schedule.*"))


def test_the_measuring_options_every_command_shares_are_declared_once() -> None:
    """--timing, --window, --objective and --cutoff: tune, tune app and tune verify take
    them from MeasureSettings' fields, whose defaults are what a run measures with."""
    from colltune.cli import app
    from colltune.options import MeasureSettings

    command = typer.main.get_command(app)
    defaults = MeasureSettings()
    for name in ("reduce", "app", "verify"):
        params = {p.name: p for p in command.commands[name].params}  # type: ignore[attr-defined]
        shared = [f for f in ("timing", "window", "objective", "cutoff") if f in params]
        assert len(shared) >= (3 if name == "verify" else 4), (name, shared)
        for field in shared:
            assert params[field].default == getattr(defaults, field), (name, field)


# flags a request declares that a command also declares for itself, because there they
# mean something else: (module, flag) -> what the flag means there
OTHER_MEANING = {
    ("apps.py", "--timeout"): "tune profile: seconds before the application is stopped",
    ("compare.py", "--timeout"): "tune compare: seconds per launch",
    ("runtime.py", "--timeout"): "tune runtime: seconds per launch",
    ("runtime.py", "--budget"): "tune runtime: screening launches",
    ("runtime.py", "--pairs"): "tune runtime: fresh launch pairs per finalist",
    ("verifying.py", "--pairs"): "tune verify --app: default/rules pairs of the application",
    ("verifying.py", "--point-time"): "tune verify: seconds per size and launch",
}


def test_a_flag_a_request_declares_is_declared_nowhere_else() -> None:
    """tune's and tune app's options that a request declares (MeasureSettings, TuneOptions,
    OnlineRequest) come from `declared` only: a typer.Option anywhere in the CLI naming
    such a flag is a second declaration, allowed only where the flag means something else
    there (OTHER_MEANING, each said)."""
    import ast

    import colltune.cli
    from colltune.options import MeasureSettings, TuneOptions

    flags = {flag for cls in (MeasureSettings, TuneOptions, OnlineRequest)
             for f in dataclasses.fields(cls) if "option" in f.metadata
             for flag in f.metadata["option"].flags}
    assert {"--confirm-rounds", "--point-time", "--strategy", "--timeout"} <= flags
    again = set()
    for path in Path(colltune.cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Option":
                again |= {(path.name, a.value) for a in node.args[1:]
                          if isinstance(a, ast.Constant) and a.value in flags}
    assert again == set(OTHER_MEANING), again ^ set(OTHER_MEANING)


def test_tune_and_tune_app_take_their_defaults_from_the_request() -> None:
    """What a tune is given when an option is left out is what TuneOptions and
    MeasureSettings declare, in `tune COLLECTIVE` and `tune app` alike (and each option's
    help is the declaration's unless the command says more)."""
    from colltune.cli import app
    from colltune.options import MeasureSettings, TuneOptions

    command = typer.main.get_command(app)
    declared = {f.name: (f.default, f.metadata["option"])
                for cls in (TuneOptions, MeasureSettings) for f in dataclasses.fields(cls)
                if "option" in f.metadata}
    for name, least in (("reduce", 24), ("app", 10)):
        params = {p.name: p for p in command.commands[name].params}  # type: ignore[attr-defined]
        shared = [n for n in params if n in declared]
        assert len(shared) >= least, (name, shared)
        for n in shared:
            default, d = declared[n]
            assert params[n].default == default, (name, n)
            assert set(d.flags) <= set(params[n].opts), (name, n)
        if name == "reduce":
            assert all(params[n].help == declared[n][1].help or not declared[n][1].help
                       for n in shared)
