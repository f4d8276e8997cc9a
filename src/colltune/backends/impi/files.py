"""Intel MPI's files as colltune writes and reads them: the JSON tuning file with a profile
naming it (`--format impi`), Intel MPI's own binary table with the rules spliced in, colltune's
record of them beside it and a profile naming it (`--format impi-bin`, impi_splice.py), or
one profile of I_MPI_ADJUST_* variables (`--format impi-env`, for users who prefer
variables). Never a file and variables in one profile (impi_env.check)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from colltune import __version__
from colltune.backends.base import Written, write_file
from colltune.backends.files import ExportRequest, Installable
from colltune.backends.impi.proof import describe
from colltune.backends.impi.splice import BIN_VAR, SUFFIX, Splicer, read_back, record_of
from colltune.backends.impi.standin import Prints
from colltune.errors import ColltuneError, FormatError, read_bytes, read_text
from colltune.outfile import Planned, destination
from colltune.rules import impi_env, impi_table, impi_tuning
from colltune.rules.impi_tuning import ImpiFormatError, Layers, Tuning
from colltune.rules.safe import check_env

if TYPE_CHECKING:
    from colltune.slots import Placement

FORMATS = ("impi", "impi-env", "impi-bin")
T = TypeVar("T")


def env_path(out: Path) -> Path:
    return out.with_suffix(".env") if out.suffix in (".json", SUFFIX) else \
        out.with_name(out.name + ".env")


def read_files(source: Path, refusal: str = "will not export"
               ) -> tuple[Layers, impi_env.ImpiProfile, str | None]:
    """The rules, a layer per ranks a node (None: any), the profile, and the JSON tuning
    file's text (None for a spliced table: its rules are read from colltune's record beside
    it), from any file `tune` wrote for Intel MPI or the profile beside it. A path inside a
    profile is read as data, never run."""
    table = source.suffix == SUFFIX
    try:
        if table:
            return _table_rules(source), _profile_beside(source), None
        text = read_text(source)
        if text.lstrip().startswith("{"):
            prof, json_text = _profile_beside(source), text
        else:
            prof = impi_env.parse(text)
            if prof.adjusts():
                json_text = impi_tuning.render(impi_env.to_tuning(prof.adjusts()))
            elif impi_env.TUNING_VAR in prof.settings:
                json_text = read_text(Path(prof.settings[impi_env.TUNING_VAR]))
            elif BIN_VAR in prof.settings:
                return _table_rules(Path(prof.settings[BIN_VAR])), prof, None
            else:
                raise ImpiFormatError(f"it sets neither {impi_env.TUNING_VAR}, {BIN_VAR} "
                                      "nor an I_MPI_ADJUST_* variable")
        return impi_tuning.parse_layers(json_text), prof, json_text
    except (OSError, FormatError, ImpiFormatError) as e:
        raise ColltuneError(f"{refusal} {source}: {e}",
                            f"keep colltune's record of its rules beside it "
                            f"({record_of(source)})" if table else "pass the tuning file or "
                            "profile `tune --format impi` (or impi-env, impi-bin) wrote"
                            ) from None


def _profile_beside(source: Path) -> impi_env.ImpiProfile:
    """The profile `tune` wrote beside a tuning file or table (empty if there is none)."""
    beside = env_path(source)
    return impi_env.parse(read_text(beside)) if beside.exists() else impi_env.ImpiProfile()


def _table_rules(table: Path) -> Layers:
    """The rules colltune's record beside a spliced table holds, once the table is checked
    to be one (a path from a profile is another user's data: a table's name, never a
    profile read again)."""
    if table.suffix != SUFFIX:
        raise ImpiFormatError(f"{BIN_VAR} names {table}, not a {SUFFIX} tuning table")
    impi_table.decode(read_bytes(table))  # a table, as far as can be read
    return impi_table.parse_rules(read_text(record_of(table)))


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


def _header(kind: str, comments: list[str], use: str, notes: list[str]) -> list[str]:
    return [f"Intel MPI {kind} by colltune {__version__}", comments[0], f"use: {use}",
            *comments[1:], *(f"note: {n}" for n in notes)]


def write_tuning(out: Path, layers: Layers, comments: list[str], notes: list[str]
                 ) -> Written | None:
    """The tuning file at `out` (merged into what it holds, layer by layer: ranks a node,
    None for any) and the profile beside it; what was written where it is not the tuning
    file (None)."""
    old = impi_tuning.merged(_merge_base(out, impi_tuning.parse_layers) or {}, layers)
    comments = _header("tuning written", comments,
                       f"source this file; the tuning file is {out.resolve()}", notes)
    settings = {impi_env.TUNING_VAR: str(out.resolve())} if old else {}
    written = None
    if old:
        write_file(out, impi_tuning.render_layers(old), "--out")
    else:  # an empty tuning file is no file Intel MPI documents: set nothing
        written = _nothing(out, comments, notes)
    write_file(env_path(out), impi_env.render(impi_env.ImpiProfile(comments, settings)),
               "--out")
    return written


def _nothing(out: Path, comments: list[str], notes: list[str]) -> Written:
    comments.append(f"note: nothing tuned, so no tuning file was written at {out}")
    return Written("Intel MPI profile that sets nothing", None,
                   "nothing to install: Intel MPI's own choice was kept", notes)


def write_table(out: Path, layers: Layers, splicer: Splicer, comments: list[str],
                notes: list[str]) -> Written | None:
    """Intel MPI's own table with `layers` (and the rules the record at `out` held, layer by
    layer: ranks a node) spliced in, at `out` once the library has read it back as written;
    the record and the profile beside it."""
    record = record_of(out)
    old = impi_tuning.merged(_merge_base(record, impi_table.parse_rules) or {}, layers)
    comments = _header("tuning table written", comments,
                       f"source this file; the tuning table is {out.resolve()}", notes)
    settings = {BIN_VAR: str(out.resolve())} if old else {}
    if old:
        try:
            data = splicer.table(old)
        except ImpiFormatError as e:
            raise ColltuneError(f"cannot splice the rules into Intel MPI's table: {e}",
                                "write the JSON tuning file (--format impi)") from None
        read_back(splicer.mpi, splicer.placement, impi_tuning.collectives(old)[0], data)
        write_file(out, data, "--out")
        write_file(record, impi_table.render_rules(old, str(out.resolve())), "--out")
    written = None if old else _nothing(out, comments, notes)
    write_file(env_path(out), impi_env.render(impi_env.ImpiProfile(comments, settings)),
               "--out")
    return written


def write_adjusts(out: Path, t: Tuning, comments: list[str], notes: list[str]) -> Written:
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
    comments = _header("collectives tuned", comments,
                       "source this file before mpirun (no I_MPI_TUNING beside it)", notes)
    if not settings:
        comments.append("note: nothing tuned: this profile sets nothing")
    write_file(out, impi_env.render(impi_env.ImpiProfile(comments, settings)), "--out")
    return Written("Intel MPI profile of I_MPI_ADJUST_* variables" if settings
                   else "Intel MPI profile that sets nothing", None,
                   f"source {out} before mpirun" if settings else
                   "nothing to install: Intel MPI's own choice was kept", notes)


def table_of(source: Path, prof: impi_env.ImpiProfile) -> Path:
    """The spliced table `source` is, or the one the profile `source` names."""
    return source if source.suffix == SUFFIX else Path(prof.settings[BIN_VAR])


def table_route(out: Path | None, name: str, wins: int, judged: bool = True) -> str:
    """What writes the wins a JSON file cannot carry: the spliced table, and its cost."""
    dat = out.with_suffix(SUFFIX).name if out else f"tuning{SUFFIX}"
    what = "confirmed win(s)" if judged else "win(s) of the sweep (not put to fresh launches)"
    return (f"{name}: {wins} {what} not written: the JSON file must name a preset at every "
            "size, and none stands in for the library's default where it was kept. "
            f"--format impi-bin --out {dat} writes them: Intel MPI's own table with these "
            "wins spliced in and its own entries everywhere else (it replaces the table "
            "Intel MPI loads, so use it for jobs like the tuned ones)")


# without --format, where the JSON file would drop confirmed wins (docs/impi.md)
TABLE_INSTEAD = ("the JSON tuning file could not carry every confirmed win (it names a preset "
                 "at every size, and none stands in for the library's default where it was "
                 f"kept): wrote Intel MPI's own table with the wins spliced in instead, at "
                 f"--out's name with {SUFFIX} (--format impi writes the JSON file without them)")


def comm_size_note(table: bool, nps: list[int]) -> str:
    """What a file does at the job sizes it was not measured at."""
    measured = ", ".join(map(str, nps))
    if table:
        return (f"comm sizes: measured at {measured} ranks only; the table keeps Intel MPI's "
                "own entries for every other job size and ppn, and for every size where the "
                "default was kept; it replaces the table Intel MPI would load, so set it for "
                "jobs like the tuned ones (the same nodes and fabric)")
    return (f"comm sizes: measured at {measured} ranks only; Intel MPI runs a file's rules at "
            "every job size (the first comm_size key at or above the job's, else the "
            f"largest), so jobs of other sizes, {max(nps) + 1} ranks and more included, run "
            "these rules unmeasured")


def seen_summary(prints: dict[tuple[str, int], Prints]) -> dict[str, object]:
    """What the default and each preset were seen running, per collective, job size, preset
    and message size, in words (the summary's `impi.seen`)."""
    return {f"{c} np={np}": {str(p): {str(s): describe(fp, c) for s, fp in per.items()}
                             for p, per in got.items()}
            for (c, np), got in prints.items() if got}


def checked_table(prefix: str | None, table: Path, layers: Layers, what: str,
                  place: Callable[[int], Placement]) -> bytes:
    """The table's bytes, read once, after they proved to be the installation's own table
    with the record's rules spliced in (splice.differs), as a job of the record's largest
    size placed by `place` loads it: what is checked is what is installed. Without the
    Intel MPI it is for, there is nothing to compare it with."""
    if prefix is None:
        raise ColltuneError(f"will not {what} {table} without the Intel MPI it is for: a "
                            "table is checked by its content, against that installation's "
                            "own table", "pass --mpi PREFIX of that Intel MPI")
    from colltune.backends.impi.install import find_impi
    from colltune.backends.impi.splice import differs

    data = read_bytes(table)
    nps = [np for t in layers.values() for per in t.values() for np in per if np]
    mpi = find_impi(prefix)
    placement = place(max(nps or [2]))
    try:
        why = differs(mpi, placement, data, layers)
    except ImpiFormatError as e:
        why = str(e)
    if why is not None:
        raise ColltuneError(f"will not {what} {table}: {why}",
                            "write the table again with tune --format impi-bin on the "
                            "installation it is for (a table spliced on other nodes: check "
                            "it there)")
    return data


def installable(req: ExportRequest, place: Callable[[int], Placement]) -> Installable:
    """The tuning file and a profile that names it (Intel MPI reads no parameter file),
    or the profile of I_MPI_ADJUST_* variables alone."""
    _, source, text = read_files(req.source)
    where = req.home / ".config" / "colltune" if req.site is None else req.site
    if source.adjusts():
        prof = impi_env.ImpiProfile(
            [f"Intel MPI collectives tuned by colltune: {req.stamp}",
             "use: source this file before mpirun (no I_MPI_TUNING beside it)"],
            source.adjusts())
        impi_env.check(prof.settings)  # the rule lists' own grammar (impi_env.render: quoted)
        env = check_env(dict(prof.settings), "the Intel MPI profile", quoted=True)
        return Installable([Planned(destination(where / "colltune-impi.env"),
                                    impi_env.render(prof), "Intel MPI environment profile")],
                           env, "Intel MPI collectives tuned by colltune")
    table = text is None  # a spliced table: installed with colltune's record of it
    installed = destination(where / ("colltune-impi" + (SUFFIX if table else ".json")))
    prof = impi_env.ImpiProfile(
        [f"Intel MPI collectives tuned by colltune: {req.stamp}",
         "use: source this file before mpirun (no I_MPI_ADJUST_* beside it)"],
        {BIN_VAR if table else impi_env.TUNING_VAR: str(installed)})
    env = check_env(dict(prof.settings), "the Intel MPI profile")
    at = table_of(req.source, source) if table else None
    layers = impi_table.parse_rules(read_text(record_of(at))) if at else None
    data = checked_table(req.mpi, at, layers, "export", place) if at and layers else text
    assert data is not None
    files = [Planned(record_of(installed), impi_table.render_rules(layers, str(installed)),
                     "colltune's record of the rules in it")] if at and layers else []
    return Installable([Planned(installed, data, "Intel MPI tuning table (its own, "
                                "colltune's rules spliced in)" if table else
                                "Intel MPI tuning file (JSON)"), *files,
                        Planned(destination(where / "colltune-impi.env"),
                                impi_env.render(prof), "Intel MPI environment profile")],
                       env, "Intel MPI collectives tuned by colltune")
