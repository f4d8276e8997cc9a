"""Intel MPI's files as colltune writes and reads them: the JSON tuning file with a profile
naming it (`--format impi`), the same frozen to Intel MPI's binary form with a profile
naming that (`--format impi-bin`, impi_freeze.py), or one profile of I_MPI_ADJUST_*
variables (`--format impi-env`, for users who prefer variables). Never a file and
variables in one profile (impi_env.check)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from colltune import __version__
from colltune.backends.base import write_file
from colltune.backends.impi_freeze import BIN_VAR, SUFFIX, source_of
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.rules import impi_env, impi_tuning
from colltune.rules.impi_tuning import ImpiFormatError, Tuning

FORMATS = ("impi", "impi-env", "impi-bin")
T = TypeVar("T")


def env_path(out: Path) -> Path:
    return out.with_suffix(".env") if out.suffix in (".json", SUFFIX) else \
        out.with_name(out.name + ".env")


def read_files(source: Path, refusal: str = "will not export"
               ) -> tuple[str, impi_env.ImpiProfile]:
    """The tuning (as the JSON tuning file's text) and the profile, from either file `tune
    --format impi` wrote or the profile `--format impi-env` wrote. A tuning file's path
    inside a profile is read as data, never run."""
    frozen = source.suffix == SUFFIX  # a frozen file: its JSON source holds the rules
    try:
        text = read_text(source_of(source) if frozen else source)
        if text.lstrip().startswith("{"):
            beside = env_path(source)
            prof = impi_env.parse(read_text(beside)) if beside.exists() else \
                impi_env.ImpiProfile()
            json_text = text
        else:
            prof = impi_env.parse(text)
            if prof.adjusts():
                json_text = impi_tuning.render(impi_env.to_tuning(prof.adjusts()))
            elif impi_env.TUNING_VAR in prof.settings:
                json_text = read_text(Path(prof.settings[impi_env.TUNING_VAR]))
            elif BIN_VAR in prof.settings:
                json_text = read_text(source_of(Path(prof.settings[BIN_VAR])))
            else:
                raise ImpiFormatError(f"it sets neither {impi_env.TUNING_VAR}, {BIN_VAR} "
                                      "nor an I_MPI_ADJUST_* variable")
        impi_tuning.parse(json_text)
    except (OSError, FormatError, ImpiFormatError) as e:
        raise ColltuneError(f"{refusal} {source}: {e}",
                            f"keep the JSON it was frozen from beside it ({source_of(source)})"
                            if frozen else "pass the tuning file or profile `tune --format "
                            "impi` (or impi-env, impi-bin) wrote") from None
    return json_text, prof


def tuned_env(source: Path, prof: impi_env.ImpiProfile) -> dict[str, str]:
    """What a job sets to run the file: its variables, or the variable naming the file
    (I_MPI_TUNING, or I_MPI_TUNING_BIN for a frozen one)."""
    named = {k: v for k, v in prof.settings.items() if k in (impi_env.TUNING_VAR, BIN_VAR)}
    if source.suffix == SUFFIX and not named:
        named = {BIN_VAR: str(source.resolve())}
    return prof.adjusts() or named or {impi_env.TUNING_VAR: str(source.resolve())}


def _merge_base(out: Path, parse: Callable[[str], T]) -> T | None:
    """What --out holds, read to merge into (None: nothing there); unreadable: refused."""
    if not out.exists():
        return None
    try:
        return parse(read_text(out))
    except (OSError, FormatError, ImpiFormatError) as e:
        raise ColltuneError(f"will not merge into {out}: {e}",
                            "move that file or choose another --out; it was not "
                            "changed") from None


def write_tuning(out: Path, t: Tuning, comments: list[str], notes: list[str],
                 summary: dict[str, object], frozen: Callable[[Path], Path] | None = None
                 ) -> None:
    """The tuning file at `out` (merged into what it holds) and the profile beside it;
    `frozen`: the JSON's binary dump is made (it returns where), and the profile names it."""
    old: Tuning = _merge_base(out, impi_tuning.parse) or {}
    for c, per in t.items():
        old.setdefault(c, {}).update(per)
    comments = [f"Intel MPI tuning written by colltune {__version__}", comments[0],
                f"use: source this file; the tuning file is {out.resolve()}"] + comments[1:]
    comments += [f"note: {n}" for n in notes]
    settings = {impi_env.TUNING_VAR: str(out.resolve())} if old else {}
    if old:
        write_file(out, impi_tuning.render(old), "--out")
        if frozen is not None:
            dat = frozen(out)
            settings = {BIN_VAR: str(dat.resolve())}
            comments[2] = (f"use: source this file; the binary tuning file is {dat.resolve()}"
                           f", frozen from {out.resolve()} (keep both)")
    else:  # an empty tuning file is no file Intel MPI documents: set nothing
        comments.append(f"note: nothing tuned, so no tuning file was written at {out}")
        summary["wrote"] = {"what": "Intel MPI profile that sets nothing", "also": None,
                            "use": "nothing to install: Intel MPI's own choice was kept",
                            "notes": notes}
    write_file(env_path(out), impi_env.render(impi_env.ImpiProfile(comments, settings)),
               "--out")


def write_adjusts(out: Path, t: Tuning, comments: list[str], notes: list[str],
                  summary: dict[str, object]) -> None:
    """One profile of I_MPI_ADJUST_* variables at `out`; the variables it held for other
    collectives are kept (a profile naming a tuning file is not merged into)."""
    prof = _merge_base(out, impi_env.parse) or impi_env.ImpiProfile()
    if not prof.adjusts() and prof.settings:
        raise ColltuneError(f"will not merge into {out}: it names a tuning file, and one "
                            "profile never holds both",
                            "choose another --out; it was not changed")
    old = prof.adjusts()
    try:
        settings = {**old, **impi_env.from_tuning(t)}
    except ImpiFormatError as e:
        raise ColltuneError(f"--format impi-env cannot carry this: {e}",
                            "tune one --np, or write the tuning file (--format impi)") from None
    comments = [f"Intel MPI collectives tuned by colltune {__version__}", comments[0],
                "use: source this file before mpirun (no I_MPI_TUNING beside it)"] + comments[1:]
    comments += [f"note: {n}" for n in notes]
    if not settings:
        comments.append("note: nothing tuned: this profile sets nothing")
    summary["wrote"] = {"what": "Intel MPI profile of I_MPI_ADJUST_* variables" if settings
                        else "Intel MPI profile that sets nothing", "also": None,
                        "use": f"source {out} before mpirun" if settings else
                        "nothing to install: Intel MPI's own choice was kept", "notes": notes}
    write_file(out, impi_env.render(impi_env.ImpiProfile(comments, settings)), "--out")
