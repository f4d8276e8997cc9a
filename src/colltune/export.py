"""`tune export`: what an administrator installs once so every job gets the tuned
collectives (or what one user puts in their home): the tuning file, the library's own
parameter file pointing at it, and environment modules (Tcl and Lua) that set the same
variables. Open MPI rules files, coll/han rules files (`tune --tune-han`), MPICH tuning files
with their profiles, MVAPICH2 2.3 profiles and measurement stores (decided again, as
`tune --from-db` would) are exported; nothing that exists is overwritten without `force`.
MPICH reads no parameter file: its site profile is the tuning file, a shell profile and the
modules."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from colltune import __version__
from colltune.backends import han
from colltune.backends.mpich_backend import read_files
from colltune.errors import ColltuneError, FormatError, open_regular, read_text
from colltune.outfile import check_destination, write_atomic
from colltune.rules import mpich_env, mvapich2, mvapich3
from colltune.rules import ompi_classic as rules
from colltune.rules.safe import check_env, check_path, lua_quote, tcl_quote

RULES_NAME = "colltune-rules.conf"
HAN_RULES_NAME = "colltune-han.rules"
MPICH_NAME = "colltune-mpich.json"
MODULE_NAME = "colltune"


@dataclass(frozen=True)
class Planned:
    path: Path
    text: str
    what: str  # one line for the user
    # a user's own parameter file (~/.openmpi/mca-params.conf, ~/.mvapich2.conf): only the
    # keys written here are replaced, every other line stays, the old file is kept beside
    merge: bool = False


def _abs(path: Path) -> Path:
    """Absolute, with its directory resolved but not the file itself: a symbolic link at
    the destination is then seen (and refused), never followed."""
    return path.parent.resolve() / path.name


def _stamp(source: Path) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # the path goes into a comment of every file: refused if it could end that comment
    return f"written by colltune {__version__} from " \
           f"{check_path(source.resolve(), '--from')}, {when}"


def _modules(env: dict[str, str], title: str, source: Path) -> tuple[str, str]:
    check_env(env, "an environment module")
    tcl = ["#%Module1.0", f"## {title}", f"## {_stamp(source)}",
           f"module-whatis {tcl_quote(title)}"]
    tcl += [f"setenv {k} {tcl_quote(v)}" for k, v in env.items()]
    lua = [f"-- {title}", f"-- {_stamp(source)}", f"whatis({lua_quote(title)})"]
    lua += [f"setenv({lua_quote(k)}, {lua_quote(v)})" for k, v in env.items()]
    return "\n".join(tcl) + "\n", "\n".join(lua) + "\n"


def _kind(source: Path) -> str:
    try:
        with open_regular(source) as f:
            head = f.read(16)
    except (OSError, FormatError) as e:
        raise ColltuneError(f"cannot read {source}: {getattr(e, 'reason', None) or e}",
                            "pass the rules file or profile `tune` wrote, with --from") from None
    if head == b"SQLite format 3\x00":
        return "store"
    if mvapich2.looks_like_profile(source):
        return "mvapich2"
    try:
        text = read_text(source)
    except FormatError:
        return "openmpi"  # and its reader says what is wrong
    if text.lstrip().startswith("{") or "export MPIR_CVAR_" in text:
        return "mpich"
    return "han" if "global_communicator" in text else "openmpi"


def _han_params(source: Path, rules_path: Path) -> tuple[str, dict[str, str]]:
    """han's file, normalised, and the MCA parameters that use it: the file switch and the
    level modules of the MCA parameter file `tune --tune-han` wrote beside it."""
    try:
        parsed = han.parse(read_text(source))
    except (OSError, FormatError, han.HanRulesError) as e:
        raise ColltuneError(f"will not export {source}: {e}",
                            "pass the han rules file `tune --tune-han` wrote") from None
    frag = han.fragment_path(source)
    try:
        modules = han.fragment_modules(read_text(frag)) if frag.exists() else {}
    except FormatError as e:
        raise ColltuneError(f"will not export {source}: {e}",
                            "pass the han rules file `tune --tune-han` wrote") from None
    params = han.file_params(rules_path, modules)
    return han.render(parsed, [f"Open MPI coll/han dynamic rules {_stamp(source)}"]), params


def rules_from_store(db: Path) -> str:
    """The Open MPI rules a measurement store decides (every collective and communicator
    size it holds, confirmations applied), for one installation."""
    from colltune.backends.openmpi_backend import section
    from colltune.collectives import get_collective
    from colltune.core.config import DEFAULT
    from colltune.report import load

    entries = load(db)
    names = sorted({f"{e.ctx.mpi_name} {e.ctx.mpi_version} ({e.ctx.mpi_path})"
                    for e in entries})
    if len(names) > 1:
        raise ColltuneError(f"{db} holds measurements of {len(names)} installations: "
                            + "; ".join(names),
                            "write the rules of one with tune <collective> --from-db --mpi "
                            "PREFIX --out FILE, then export that file")
    chosen = [d.chosen for e in entries for d in e.decisions if d.chosen != DEFAULT]
    rf = rules.RulesFile(version=2 if any(c.max_requests for c in chosen) else 1)
    rf.comments = [f"Open MPI coll/tuned dynamic rules decided from {db.resolve()} "
                   f"({names[0]}) by colltune {__version__}"]
    for e in entries:
        coll = get_collective(e.ctx.collective)
        rf.set_section(coll.ompi_id, section(e.ctx.np, e.decisions),
                       [f"{coll.name} at {e.ctx.np} ranks ({e.ctx.nodes} x {e.ctx.ppn}), "
                        f"measured {e.first} .. {e.last}"])
    for cid in list(rf.collectives):  # as tune writes it: nothing measured below
        rules.keep_default_below(rf, cid)
    return rules.render(rf)


def _mvapich3(source: Path, where: Path, at_size: int | None
              ) -> tuple[list[Planned], dict[str, str], list[str]]:
    """An MVAPICH2 profile carried over to MVAPICH 3's variables (one algorithm each)."""
    try:
        prof, notes = mvapich3.from_mvapich2(mvapich2.read(source), at_size)
    except (FormatError, mvapich3.ConversionError) as e:
        raise ColltuneError(f"will not export {source} for MVAPICH 3: {e}",
                            "pass --for-size, or an MVAPICH2 profile `tune` wrote") from None
    prof.comments = [f"MVAPICH 3 collectives tuned by colltune: {_stamp(source)}",
                     "use: source this file before mpiexec/mpirun_rsh"] + [
                        f"note: {n}" for n in notes]
    path = _abs(where / "colltune-mvapich3.env")
    return [Planned(path, mvapich3.render(prof), "MVAPICH 3 environment profile")], \
        dict(prof.settings), notes


def plan_export(source: Path, dest: Path | None, user: bool, home: Path | None = None,
                as_format: str | None = None, at_size: int | None = None) -> list[Planned]:
    """Every file the export writes, with its text (nothing written yet)."""
    kind = _kind(source)
    home = home or Path.home()
    if dest is not None:
        check_path(dest.resolve(), "--site")
    if as_format not in (None, "mvapich3") or (as_format and kind != "mvapich2"):
        raise ColltuneError(f"--as {as_format} is not written from a {kind} file",
                            "--as mvapich3 converts an MVAPICH2 profile; leave --as out "
                            "otherwise")
    if as_format == "mvapich3":
        out, env, _ = _mvapich3(source, (home / ".config" / "colltune") if user
                                else (dest or Path(".")), at_size)
        title = "MVAPICH 3 collectives tuned by colltune"
    elif kind in ("openmpi", "store", "han"):
        where = (home / ".openmpi") if user else (dest or Path("."))
        rules_path = _abs(where / (HAN_RULES_NAME if kind == "han" else RULES_NAME))
        try:
            # the same file, checked and normalised; or what the store decides
            if kind == "han":
                text, params = _han_params(source, rules_path)
            else:
                text = rules.render(rules.read(source)) if kind == "openmpi" else \
                    rules_from_store(source)
                params = {"coll_tuned_use_dynamic_rules": "1",
                          "coll_tuned_dynamic_rules_filename": str(rules_path)}
        except FormatError as e:
            raise ColltuneError(f"will not export {e}", "check it with `tune check`") from None
        conf_name = "mca-params.conf" if user else "openmpi-mca-params.conf"
        conf = [f"# Open MPI MCA parameters {_stamp(source)}"]
        if not user:
            conf.append("# install: append to <prefix>/etc/openmpi-mca-params.conf, or set "
                        "OMPI_MCA_mca_base_param_files to this file")
        conf += [f"{k} = {v}" for k, v in check_env(params, "the MCA parameter file").items()]
        out = [Planned(rules_path, text, "Open MPI coll/han rules file" if kind == "han"
                       else "Open MPI rules file"),
               Planned(_abs(where / conf_name), "\n".join(conf) + "\n",
                       "Open MPI MCA parameter file", merge=user)]
        env = {f"OMPI_MCA_{k}": v for k, v in params.items()}
        title = "Open MPI collectives tuned by colltune"
    elif kind == "mpich":
        json_text, mprof = read_files(source)
        where = (home / ".config" / "colltune") if user else (dest or Path("."))
        installed = _abs(where / MPICH_NAME)
        mprof.tuning_file = installed
        mprof.comments = [f"MPICH collectives tuned by colltune: {_stamp(source)}",
                          "use: source this file before mpiexec (MPICH reads no parameter "
                          "file)" + ("; e.g. from ~/.bashrc" if user else "")]
        env = check_env(mprof.variables(), "the MPICH profile")
        out = [Planned(installed, json_text, "MPICH tuning file (csel JSON)"),
               Planned(_abs(where / "colltune-mpich.env"), mpich_env.render(mprof),
                       "MPICH environment profile")]
        title = "MPICH collectives tuned by colltune"
    else:
        try:
            prof = mvapich2.read(source)
        except FormatError as e:
            raise ColltuneError(f"will not export {e}", "check it with `tune check`") from None
        env = dict(prof.settings)
        where = home if user else (dest or Path("."))
        name = ".mvapich2.conf" if user else "mvapich2.conf"
        conf = [f"# MVAPICH2 parameters {_stamp(source)}"]
        if not user:
            conf.append("# install: as /etc/mvapich2.conf, or set MV2_USER_CONFIG to this file")
        conf += [f"{k} = {v}" for k, v in check_env(env, "the MVAPICH2 parameter file").items()]
        out = [Planned(_abs(where / name), "\n".join(conf) + "\n",
                       "MVAPICH2 parameter file", merge=user)]
        title = "MVAPICH2 collectives tuned by colltune"
    if not user:
        tcl, lua = _modules(env, title, source)
        mods = (dest or Path(".")) / "modulefiles" / MODULE_NAME
        out += [Planned(_abs(mods / "tuned"), tcl, "environment module (Tcl)"),
                Planned(_abs(mods / "tuned.lua"), lua, "environment module (Lua, Lmod)")]
    for p in out:
        check_path(p.path, "an export destination")
    return out


def export(source: Path, dest: Path | None = None, user: bool = False, force: bool = False,
           home: Path | None = None, as_format: str | None = None,
           at_size: int | None = None) -> list[Planned]:
    if user == (dest is not None):
        raise ColltuneError("choose one: --site DIR or --user",
                            "e.g. tune export --site /opt/site/colltune --from rules.conf")
    planned = plan_export(source, dest, user, home, as_format, at_size)
    for p in planned:
        check_destination(p.path, "export destination")
    exists = [p.path for p in planned if p.path.exists() and not p.merge]
    if exists and not force:
        raise ColltuneError("will not overwrite " + ", ".join(map(str, exists)),
                            "move them away, or pass --force to replace them")
    for i, p in enumerate(planned):
        try:
            p.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ColltuneError(f"cannot create {p.path.parent}: {e.strerror}",
                                "choose a directory you can write") from None
        if p.merge and p.path.exists():
            planned[i] = _merge_into(p)
            continue
        write_atomic(p.path, p.text, mode=0o644)  # read by every user's jobs
    return planned


def _key(line: str) -> str | None:
    """The parameter a `key = value` line sets (None: a comment or blank line)."""
    text = line.strip()
    if not text or text.startswith("#") or "=" not in text:
        return None
    return text.split("=", 1)[0].strip()


def merge_params(old: str, new: str) -> str:
    """`new`'s settings replace the same keys in `old` where they stand; every other line
    (the user's own settings and comments) stays; keys `old` lacks are appended after
    `new`'s comments. A stamp comment of an earlier export is replaced, not repeated."""
    ours = {k: line for line in new.splitlines() if (k := _key(line))}
    stamps = [line for line in new.splitlines() if _key(line) is None and line.strip()]
    mark = " written by colltune"
    heads = tuple(line.split(mark, 1)[0] + mark for line in stamps if mark in line)
    out: list[str] = []
    placed: set[str] = set()
    stamped = False
    for line in old.splitlines():
        k = _key(line)
        if k in ours:
            if k not in placed:
                out.append(ours[k])
                placed.add(k)
            continue  # a second setting of one key: Open MPI would take the last
        if k is None and heads and line.startswith(heads):
            if not stamped:  # an earlier export's stamp: this one's, in its place
                out += stamps
                stamped = True
            continue
        out.append(line)
    added = ([] if stamped else stamps) + [line for k, line in ours.items() if k not in placed]
    if added:
        while out and not out[-1].strip():
            out.pop()
        out += ([""] if out else []) + added
    return "\n".join(out) + "\n"


def _merge_into(p: Planned) -> Planned:
    """Merge into the user's existing parameter file, keeping the old one beside it."""
    try:
        old = read_text(p.path)
    except FormatError as e:
        raise ColltuneError(f"will not merge into {e}",
                            "move that file away; it was not changed") from None
    backup = p.path.with_name(p.path.name + ".colltune-backup")
    check_destination(backup, "export backup")
    mode = p.path.stat().st_mode & 0o777
    write_atomic(backup, old, mode=mode)
    write_atomic(p.path, merge_params(old, p.text), mode=mode)
    return replace(p, what=f"{p.what} (merged: only colltune's keys changed; the old file "
                           f"is {backup})")
