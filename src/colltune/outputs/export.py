"""`tune export`: what an administrator installs once so every job gets the tuned
collectives (or what one user puts in their home): the files of the family whose output is
given (its backend's `installable`: the tuning file and the library's own parameter file or
profile pointing at it), and environment modules (Tcl and Lua) that set the same variables.
Measurement stores are decided again, as `tune --from-db` would, by the family that measured
them. Nothing that exists is overwritten without `force`; a user's own parameter files are
merged into, never replaced."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from colltune import __version__
from colltune.backends import registry
from colltune.backends.base import Backend
from colltune.backends.files import ExportRequest, Installable
from colltune.errors import ColltuneError, FormatError, open_regular, read_text
from colltune.outfile import Planned, Staged, beside, check_destination, destination, stage
from colltune.rules.safe import check_env, check_path, lua_quote, tcl_quote

MODULE_NAME = "colltune"
__all__ = ["ExportOptions", "Planned", "export", "plan_export", "merge_params"]


def _stamp(source: Path) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # the path goes into a comment of every file: refused if it could end that comment
    return f"written by colltune {__version__} from " \
           f"{check_path(source.resolve(), '--from')}, {when}"


MODULE_NAME_OK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")
# what a module chosen by layout sets to the layout it chose ("none": the library's own)
CHOSEN = "COLLTUNE_TUNED_LAYOUT"
# what a user sets to choose a layout where Slurm does not say it (mpirun, a hostfile)
ASKED = "COLLTUNE_LAYOUT"


@dataclass(frozen=True)
class ExportOptions:
    """What `tune export` is asked beside what to install and where."""

    user: bool = False  # into the user's own files instead of --site
    force: bool = False  # replace files that exist
    home: Path | None = None  # the user's home (None: this process's)
    as_format: str | None = None  # --as
    at_size: int | None = None  # --for-size
    module_prereq: str | None = None
    mpi: str | None = None  # the installation the files are for
    layouts: tuple[str, ...] = ()  # NODESxPPN: the files `tune --layouts` wrote, one each


def _modules(env: dict[str, str], title: str, source: Path, prereq: str | None = None,
             layouts: dict[str, dict[str, str]] | None = None) -> tuple[str, str]:
    """The Tcl and Lua modules that set `env`: with help and whatis, a conflict with any
    other colltune module (two tunings at once would fight over the same variables), Lmod's
    family "colltune" (Lmod swaps them), and an optional prerequisite: the site's MPI
    module the tuning was made for. With `layouts`, each layout's own variables too, for
    the job's layout only (_choose_tcl, _choose_lua)."""
    check_env(env, "an environment module", quoted=True)  # tcl_quote, lua_quote below
    for own in (layouts or {}).values():
        check_env(own, "an environment module", quoted=True)
    if prereq is not None and not MODULE_NAME_OK.fullmatch(prereq):
        raise ColltuneError(f"--module-prereq {prereq!r} is not a module name",
                            "e.g. --module-prereq openmpi/5.0")
    stamp = _stamp(source)
    about = f"{title}; {stamp}. Sets: " + ", ".join(
        [*env, *dict.fromkeys(k for own in (layouts or {}).values() for k in own)])
    if layouts:
        about += (f". Tuned for the layouts {', '.join(layouts)} (nodes x ranks per node): "
                  f"the one of the job this module is loaded in ({ASKED} if set, else the "
                  f"Slurm allocation's), set in {CHOSEN}; another layout keeps the "
                  "library's own choices. Load it in the job script.")
    tcl = ["#%Module1.0", f"## {title}", f"## {stamp}",
           "proc ModulesHelp { } {", f"    puts stderr {tcl_quote(about)}", "}",
           f"module-whatis {tcl_quote(title)}", "conflict colltune"]
    tcl += [f"prereq {tcl_quote(prereq)}"] if prereq else []
    tcl += [f"setenv {k} {tcl_quote(v)}" for k, v in env.items()]
    lua = [f"-- {title}", f"-- {stamp}", f"help({lua_quote(about)})",
           f"whatis({lua_quote(title)})", 'family("colltune")']
    lua += [f"prereq({lua_quote(prereq)})"] if prereq else []
    lua += [f"setenv({lua_quote(k)}, {lua_quote(v)})" for k, v in env.items()]
    if layouts:
        tcl += _choose_tcl(layouts)
        lua += _choose_lua(layouts)
    return "\n".join(tcl) + "\n", "\n".join(lua) + "\n"


# The job's layout, read when the module loads: COLLTUNE_LAYOUT if set, else Slurm's
# allocation when every node runs as many tasks (SLURM_TASKS_PER_NODE "4" or "2(x3)").
# Unloading undoes what loading set: the layout recorded then, not the one of the moment.
# Each value read is only compared with the layouts written here, never substituted.
_TCL_LAYOUT = rf"""set colltune_layout {{}}
if {{[module-info mode remove] || [module-info mode unload]}} {{
    if {{[info exists env({CHOSEN})]}} {{ set colltune_layout $env({CHOSEN}) }}
}} elseif {{[info exists env({ASKED})] && $env({ASKED}) ne {{}}}} {{
    set colltune_layout $env({ASKED})
}} elseif {{[info exists env(SLURM_JOB_NUM_NODES)] && [info exists env(SLURM_TASKS_PER_NODE)]
          && [regexp {{^[0-9]+$}} $env(SLURM_JOB_NUM_NODES)]
          && [regexp {{^([0-9]+)(\(x[0-9]+\))?$}} $env(SLURM_TASKS_PER_NODE) -> colltune_ppn]}} {{
    set colltune_layout "$env(SLURM_JOB_NUM_NODES)x$colltune_ppn"
}}"""

_LUA_LAYOUT = f"""local layout = ""
if mode() == "unload" then
  layout = os.getenv("{CHOSEN}") or ""
elseif (os.getenv("{ASKED}") or "") ~= "" then
  layout = os.getenv("{ASKED}")
else
  local nodes = os.getenv("SLURM_JOB_NUM_NODES") or ""
  local tasks = os.getenv("SLURM_TASKS_PER_NODE") or ""
  local ppn = tasks:match("^(%d+)$") or tasks:match("^(%d+)%(x%d+%)$")
  if nodes:match("^%d+$") and ppn then layout = nodes .. "x" .. ppn end
end"""


def _choose_tcl(layouts: dict[str, dict[str, str]]) -> list[str]:
    """Tcl that sets the job's layout's variables (none of them in another layout)."""
    out = _TCL_LAYOUT.splitlines() + ["switch -exact -- $colltune_layout {"]
    for name, own in layouts.items():
        out += [f"    {tcl_quote(name)} {{"]
        out += [f"        setenv {k} {tcl_quote(v)}" for k, v in own.items()]
        out += ["    }"]
    out += ["    default { set colltune_layout none }", "}",
            f"setenv {CHOSEN} $colltune_layout"]
    return out


def _choose_lua(layouts: dict[str, dict[str, str]]) -> list[str]:
    """Lua that sets the job's layout's variables (none of them in another layout)."""
    out = _LUA_LAYOUT.splitlines()
    for i, (name, own) in enumerate(layouts.items()):
        out += [f"{'if' if i == 0 else 'elseif'} layout == {lua_quote(name)} then"]
        out += [f"  setenv({lua_quote(k)}, {lua_quote(v)})" for k, v in own.items()]
    out += ["else", '  layout = "none"', "end", f'setenv("{CHOSEN}", layout)']
    return out


def _source(source: Path) -> tuple[Backend, str | None]:
    """The family whose output `source` is, and the tuning file's text when `source` is a
    measurement store (decided again, as `tune --from-db` would); a file is read by its
    family."""
    try:
        with open_regular(source) as f:
            head = f.read(16)
    except (OSError, FormatError) as e:
        raise ColltuneError(f"cannot read {source}: {getattr(e, 'reason', None) or e}",
                            "pass the rules file or profile `tune` wrote, with --from") from None
    if head == b"SQLite format 3\x00":
        return _decided(source)
    return registry.for_file(source), None


def _decided(db: Path) -> tuple[Backend, str]:
    """What a store decides, in the tuning file of the family that measured it (every
    collective and communicator size it holds, confirmations applied), for one
    installation."""
    from colltune.reporting.report import load

    entries = load(db)
    names = sorted({f"{e.ctx.mpi_name} {e.ctx.mpi_version} ({e.ctx.mpi_path})"
                    for e in entries})
    if len(names) != 1:
        raise ColltuneError(f"{db} holds measurements of {len(names)} installations"
                            + (": " + "; ".join(names) if names else ""),
                            "write the rules of one with tune <collective> --from-db --mpi "
                            "PREFIX --out FILE, then export that file")
    backend = registry.for_context(entries[0].ctx)
    if backend is None:
        raise ColltuneError(f"no backend of this colltune measured {names[0]} in {db}",
                            "export it with the colltune that measured it")
    return backend, backend.with_files().decided_rules(
        db, names[0], [(e.ctx, e.decisions, f"{e.first} .. {e.last}") for e in entries])


def plan_export(source: Path, dest: Path | None, opts: ExportOptions | None = None
                ) -> list[Planned]:
    """Every file the export writes, with its text (nothing written yet): the family's
    own files, and (for a site) environment modules that set the same variables."""
    opts = opts or ExportOptions()
    if dest is not None:
        check_path(dest.resolve(), "--site")
    if opts.layouts:
        out = _plan_layouts(source, dest, opts)
    else:
        site = None if opts.user else (dest or Path("."))
        _, inst = _installable(source, site, opts)
        out = list(inst.files)
        if site is not None:
            out += _module_files(site, *_modules(inst.env, inst.title, source,
                                                 opts.module_prereq))
    for p in out:
        check_path(p.path, "an export destination")
    return out


def _installable(source: Path, site: Path | None, opts: ExportOptions
                 ) -> tuple[Backend, Installable]:
    """What the family whose output `source` is installs into `site` (None: the user's
    own files)."""
    backend, text = _source(source)
    files = backend.with_files()
    if opts.as_format is not None and opts.as_format not in files.export_as:
        routes = [f"--as {f} converts {b.output}" for b in registry.BACKENDS.values()
                  if b.files is not None for f in b.files.export_as]
        raise ColltuneError(f"--as {opts.as_format} is not written from {backend.output}",
                            "; ".join(routes) + "; leave --as out otherwise")
    try:
        return backend, files.installable(ExportRequest(
            source, _stamp(source), site, opts.home or Path.home(), opts.as_format,
            opts.at_size, text, opts.mpi))
    except FormatError as e:  # a family's reader found the file malformed or not allowed
        raise ColltuneError(f"will not export {e}", f"check it with tune check {source}"
                            ) from None


def _module_files(site: Path, tcl: str, lua: str) -> list[Planned]:
    mods = site / "modulefiles" / MODULE_NAME
    return [Planned(destination(mods / "tuned"), tcl, "environment module (Tcl)"),
            Planned(destination(mods / "tuned.lua"), lua, "environment module (Lua, Lmod)")]


def _plan_layouts(source: Path, dest: Path | None, opts: ExportOptions) -> list[Planned]:
    """--layouts: the file of each layout that `tune --layouts` wrote beside `source`,
    installed in a directory of its own (DIR/layouts/2x2/), and modules that set, when
    they are loaded, the variables of the job's layout only: a library that cannot choose
    by layout is given the file of the layout it runs in."""
    if dest is None:
        raise ColltuneError("--layouts installs into --site only: a user's own parameter "
                            "file is read by every job, whatever its layout",
                            "export into a directory of your own with --site and load "
                            "its module in your job script")
    envs: dict[str, dict[str, str]] = {}
    out: list[Planned] = []
    family, title = None, ""
    for name in opts.layouts:
        path = beside(source, name)
        backend, inst = _installable(_layout_file(path, name), dest / "layouts" / name, opts)
        if family not in (None, backend.name):
            raise ColltuneError(f"{path} is {backend.output}, the layouts before it "
                                f"{family}'s", "export one family's files together")
        try:
            said = backend.with_files().layouts_said(read_text(path))
        except FormatError as e:
            raise ColltuneError(f"will not export {e}", f"check it with tune check {path}"
                                ) from None
        if said is not None and said != {name}:
            raise ColltuneError(f"{path} says it was tuned for {', '.join(sorted(said))}, "
                                f"not {name}", "export each layout's own file, as tune "
                                "--layouts wrote it")
        family, title = backend.name, inst.title
        envs[name] = inst.env
        out += inst.files
    common = {k: v for k, v in envs[opts.layouts[0]].items()
              if all(e.get(k) == v for e in envs.values())}
    own = {n: {k: v for k, v in e.items() if k not in common} for n, e in envs.items()}
    return out + _module_files(dest, *_modules(common, title, source, opts.module_prereq,
                                               own))


def _layout_file(path: Path, name: str) -> Path:
    """`path`, the file `tune --layouts` wrote for the layout `name`, if it is there."""
    if not path.exists() and not path.is_symlink():
        raise ColltuneError(
            f"--layouts {name}: there is no {path}",
            f"give --from the --out of tune --layouts, whose file for {name} is {path.name} "
            "beside it; a file that holds its layouts itself (Open MPI 6's JSON, MPICH 5's, "
            "Intel MPI's JSON) is exported alone, without --layouts")
    return path


def export(source: Path, dest: Path | None = None, opts: ExportOptions | None = None
           ) -> list[Planned]:
    """Write every planned file, all or none: each is written in full beside its
    destination first, and only when all of them (and the directories they need) succeeded
    are they renamed into place; on any failure the temporaries and the directories made
    for them are removed, and nothing that was there changed."""
    opts = opts or ExportOptions()
    user = opts.user
    if user == (dest is not None):
        raise ColltuneError("choose one: --site DIR or --user",
                            "e.g. tune export --site /opt/site/colltune --from rules.conf")
    planned = plan_export(source, dest, opts)
    for p in planned:
        check_destination(p.path, "export destination")
    exists = [p.path for p in planned if p.path.exists() and not p.merge]
    if exists and not opts.force:
        raise ColltuneError("will not overwrite " + ", ".join(map(str, exists)),
                            "move them away, or pass --force to replace them")
    made: list[Path] = []  # directories created here, outermost first
    staged: list[Staged] = []
    done: list[Planned] = []
    try:
        for p in planned:
            _make_dirs(p.path.parent, made, shared=not user)
        for p in planned:
            if p.merge and p.path.exists():
                staged += _merge_into(p)
                done.append(replace(p, what=f"{p.what} (merged: only colltune's keys changed; "
                                            f"the old file is {_backup(p.path)})"))
            else:
                staged.append(stage(p.path, p.text, mode=0o644))  # every user's jobs read it
                done.append(p)
    except BaseException as e:
        for st in staged:
            st.discard()
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
        if isinstance(e, OSError):
            where = getattr(e, "filename", None) or "the destination"
            raise ColltuneError(f"cannot write {where}: {e.strerror or e}; nothing was "
                                "changed", "choose a directory you can write") from None
        raise
    for st in staged:
        st.commit()
    return done


def _make_dirs(d: Path, made: list[Path], shared: bool) -> None:
    """Create `d` and missing parents, recording what was created; a site's directories
    are 0755 whatever the umask (every user's jobs read the files in them)."""
    missing = []
    for parent in (d, *d.parents):
        if parent.exists() or parent.is_symlink():
            if shared:
                _check_shared_dir(parent)
            break
        missing.append(parent)
    for m in reversed(missing):
        m.mkdir()
        made.append(m)
        if shared:
            m.chmod(0o755)
    if not d.is_dir():
        raise ColltuneError(f"{d} is not a directory", "choose another destination")


def _check_shared_dir(d: Path) -> None:
    """A site's files go only where no other user can swap them: the directory they are
    written (or their directories made) in, and every directory above it up to /, is
    owned by this user or root and writable by nobody else. A sticky directory (as /tmp)
    is refused too: its other users cannot rename what is ours, but one of them could
    have made a name in it first, and every user's jobs would load from below it."""
    real = d.resolve()
    for a in (real, *real.parents):
        st = a.stat()
        writable_by_others = st.st_mode & 0o022
        if writable_by_others or st.st_uid not in (0, os.geteuid()):
            who = ("writable by other users" if writable_by_others
                   else f"owned by uid {st.st_uid}")
            where = f"{a}, above {d}," if a != real else str(a)
            raise ColltuneError(
                f"{where} is {who} (mode {stat.S_IMODE(st.st_mode):04o}): another user "
                "could replace what every user's jobs would load from there; nothing was "
                "written",
                f"install into a directory that only you (or root) can write, down from /: "
                f"chmod go-w {a}, or choose another --site")


def _key(line: str) -> str | None:
    """The parameter a `key = value` line sets (None: a comment or blank line)."""
    text = line.strip()
    if not text or text.startswith("#") or "=" not in text:
        return None
    return text.split("=", 1)[0].strip()


def _commented(lines: list[str], block: bool) -> list[bool]:
    """Per line: whether a reader skips any of it as a comment beyond a leading `#` (Open
    MPI's parameter files also have C's block comments: a line inside one, opening or
    closing one, or ending in one (`key = 1 /* old */` reads as not set) is the user's text,
    never a setting colltune can rely on or replace). The last entry: whether the text ends
    inside an open block."""
    out, inside = [], False
    for line in lines:
        touched = inside
        if block:
            rest = line
            while True:
                if inside:
                    end = rest.find("*/")
                    if end < 0:
                        break
                    inside, rest = False, rest[end + 2:]
                else:
                    start = rest.find("/*")
                    if start < 0 or "#" in rest[:start]:
                        break
                    inside, touched, rest = True, True, rest[start + 2:]
        out.append(touched)
    return out + [inside]


def settings(text: str, block: bool) -> dict[str, str]:
    """The `key = value` settings a reader of `text` sees (the last one of a key wins), as
    Open MPI reads its parameter files (`block`: with C block comments) or MVAPICH2 its."""
    lines = text.splitlines()
    skip = _commented(lines, block)
    return {k: line.split("=", 1)[1].strip() for line, c in zip(lines, skip)
            if not c and (k := _key(line))}


def merge_params(old: str, new: str, block: bool = False) -> str:
    """`new`'s settings replace the same keys in `old` where they stand; every other line
    (the user's own settings and comments) stays; keys `old` lacks are appended after
    `new`'s comments. A stamp comment of an earlier export is replaced, not repeated.
    Nothing is written inside a comment: a key that stands in one is appended instead,
    after closing a block the file leaves open (`block`: C block comments, Open MPI)."""
    ours = {k: line for line in new.splitlines() if (k := _key(line))}
    stamps = [line for line in new.splitlines() if _key(line) is None and line.strip()]
    mark = " written by colltune"
    heads = tuple(line.split(mark, 1)[0] + mark for line in stamps if mark in line)
    out: list[str] = []
    placed: set[str] = set()
    stamped = False
    lines = old.splitlines()
    *skip, open_at_end = _commented(lines, block)
    for line, commented in zip(lines, skip):
        k = None if commented else _key(line)
        if k in ours:
            if k not in placed:
                out.append(ours[k])
                placed.add(k)
            continue  # a second setting of one key: Open MPI would take the last
        if k is None and not commented and heads and line.startswith(heads):
            if not stamped:  # an earlier export's stamp: this one's, in its place
                out += stamps
                stamped = True
            continue
        out.append(line)
    added = ([] if stamped else stamps) + [line for k, line in ours.items() if k not in placed]
    if open_at_end:
        out.append("*/")  # the user's comment ran to the end: it still does, then ours
    if added:
        while out and not out[-1].strip():
            out.pop()
        out += ([""] if out else []) + added
    return "\n".join(out) + "\n"


def _backup(path: Path) -> Path:
    """Where the file as it was before this export is kept: a new name each export (a
    second export's backup would hold colltune's values, not the user's)."""
    first = path.with_name(path.name + ".colltune-backup")
    n = 1
    candidate = first
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = first.with_name(f"{first.name}.{n}")
    return candidate


def _merge_into(p: Planned) -> list[Staged]:
    """The user's existing parameter file merged with ours, and the old one kept beside
    it (staged: nothing changes until the whole export commits)."""
    try:
        old = read_text(p.path)
    except FormatError as e:
        raise ColltuneError(f"will not merge into {e}",
                            "move that file away; it was not changed") from None
    backup = _backup(p.path)
    check_destination(backup, "export backup")
    mode = p.path.stat().st_mode & 0o777
    assert isinstance(p.text, str)  # merged files are parameter files, text
    block = p.path.name.endswith("mca-params.conf")  # Open MPI's: C block comments too
    merged = merge_params(old, p.text, block)
    # read back as the library reads it: every key of ours seen with our value
    seen, want = settings(merged, block), settings(p.text, block)
    lost = [k for k, v in want.items() if seen.get(k) != v]
    if lost:
        raise ColltuneError(f"merged into {p.path}, the library would not see "
                            f"{', '.join(lost)} as set: nothing was changed",
                            f"check the comments in {p.path}, or export with --site")
    first = stage(backup, old, mode=mode)
    try:
        return [first, stage(p.path, merged, mode=mode)]
    except BaseException:
        first.discard()
        raise
