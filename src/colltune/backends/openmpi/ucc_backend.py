"""UCC through Open MPI's coll/ucc as a Backend (--tune-ucc): tl/ucp's algorithms measured
per collective, message size and team size with coll/ucc in charge, written as the
`UCC_TL_UCP_TUNE` string UCC reads (a job's environment file, and the MCA parameter file
beside it that switches coll/ucc on and hands the string to every rank), and verified by
UCC's own init functions."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from colltune import __version__
from colltune.backends.base import (
    Backend,
    Decisions,
    Session,
    Traits,
    Written,
    decision_comments,
    provenance,
    write_file,
)
from colltune.backends.files import Arms, ExportRequest, Installable, VerifyTarget
from colltune.backends.openmpi import serving, ucc, ucc_proof
from colltune.backends.openmpi.backend import OpenMPIBackend, OpenMPIFiles
from colltune.backends.openmpi.install import (
    OpenMPI,
    find_openmpi,
    launch_command,
    launch_env,
)
from colltune.backends.openmpi.rules_files import check_ucc, check_ucc_config
from colltune.backends.openmpi.tuned_rules import served_note
from colltune.collectives import Collective
from colltune.core.catalog import RADIX, Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.errors import ColltuneError, read_text
from colltune.outfile import Planned, destination
from colltune.rules import safe, ucc_config, ucc_radix, ucc_tune
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.launchers import Launch
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

# what a job inherits that would change UCC's choice under the measurement (a radix too:
# UCC_TL_UCP_KN_RADIX sets every k-nomial's)
_UCC_OWN = re.compile(r"UCC_(?:(?:CL|TL)_[A-Z0-9]+_TUNE|CONFIG_FILE|TL_UCP_[A-Z_]*KN_RADIX)")


def ucc_installation(prefix: str | None) -> OpenMPI:
    """The Open MPI at `prefix` driving UCC: refused, in one line naming what is missing,
    where its jobs cannot reach UCC (no coll/ucc, or a component kept above it)."""
    mpi = find_openmpi(prefix)
    if mpi.version_tuple < (5,):
        raise ColltuneError(f"--tune-ucc needs Open MPI 5 or later with coll/ucc; "
                            f"{mpi.describe()} has none",
                            "use --mpi with an Open MPI built --with-ucc (docs/ucc.md)")
    said = serving.ucc_warnings(mpi, ucc.UCC_ON)
    if said:
        raise ColltuneError(f"--tune-ucc: {said[0]}",
                            "use --mpi with an Open MPI built --with-ucc, and leave coll/ucc "
                            "selected (docs/ucc.md)")
    return replace(mpi, ucc=True)


class UccFiles(OpenMPIFiles):
    """A job's environment file of UCC strings, or UCC's configuration file: checked as UCC
    reads them (OpenMPIFiles); the string verified with coll/ucc on by UCC's own functions
    and exported (the configuration file is neither yet)."""

    def claims(self, text: str) -> bool:
        return ucc_tune.env_lines(text) is not None or ucc_config.claims_config(text)

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        text = read_text(path)
        if ucc_tune.env_lines(text) is None and ucc_config.claims_config(text):
            return self._verify_config(path, text, np, mpi_prefix,
                                       self.backend.place(np, hostfile, launch))
        value, radix = _string_and_radix(path, ucc_tune.env_lines(text) or [], "verify")
        return _string_target(path, value, np, mpi_prefix,
                              self.backend.place(np, hostfile, launch), None, radix)

    def _verify_config(self, path: Path, text: str, np: int, mpi_prefix: str | None,
                       placement: Placement) -> VerifyTarget:
        """UCC's configuration file: the one section that matches the job's team (its
        size, nodes and ranks a node) is what UCC reads, handed to the job as the file."""
        try:
            secs = [s for s in ucc_config.config_sections(text) or [] if s.line]
        except ucc_tune.UccTuneError as e:
            raise ColltuneError(f"{path}: {e}", f"tune check {path}") from None
        if any(s.names for s in secs):
            raise ColltuneError(f"{path}: a section names a CPU vendor or model, which "
                                "colltune does not read from this machine",
                                "verify the file tune --tune-ucc wrote")
        team = {"team_size": np, "nnodes": placement.nodes, "ppn": placement.ppn}
        mine = [s for s in secs if all(lo <= team[k] <= hi for k, (lo, hi) in s.ranges.items()
                                       if k in team) and "sock" not in s.ranges]
        strings = [v for s in mine for _, name, v in s.settings if name == ucc_tune.TL_UCP]
        radix = {name: v for s in mine for _, name, v in s.settings
                 if name in ucc_tune.RADIX_VARS.values()}
        if len(mine) != 1 or len(strings) != 1:
            why = "nothing to verify" if not mine else "UCC would take either"
            raise ColltuneError(f"{path}: {len(mine)} section(s) with a string match a team "
                                f"of {np} on {placement.nodes} node(s) x {placement.ppn}: "
                                f"{why}",
                                f"tune check {path}; verify with the --np and layout a "
                                "section was written for")
        return _string_target(path, strings[0], np, mpi_prefix, placement,
                              {"UCC_CONFIG_FILE": str(path.resolve())}, radix)

    def installable(self, req: ExportRequest) -> Installable:
        """The string (checked as UCC reads it for teams of every size), and the MCA
        parameter file that switches coll/ucc on and hands it to every rank (the site's, to
        append to <prefix>/etc/openmpi-mca-params.conf, or merged into the user's own);
        the modules set the same three variables."""
        text = req.text if req.text is not None else read_text(req.source)
        lines = ucc_tune.env_lines(text)
        if lines is None and ucc_config.claims_config(text):
            return self._installable_config(req, text)
        lines = lines or []
        value, radix = _string_and_radix(req.source, lines, "export")
        check_ucc(req.source, lines, [])  # a string UCC would refuse for some teams: refused
        if not all(ucc.SAFE.fullmatch(v) for v in (value, *radix.values())):
            raise ColltuneError(f"will not export {req.source}: its string holds characters "
                                "colltune does not write into every user's files",
                                "export the file tune --tune-ucc wrote")
        if req.mpi is not None:
            ucc_installation(req.mpi)  # an Open MPI whose jobs never reach UCC: refused
        where = _where(req)
        job = {ucc_tune.TL_UCP: value, **radix}
        return Installable(
            [Planned(destination(where / self.backend.rules_name),
                     ucc.env_file(value, [req.stamp], radix), self.backend.rules_what),
             _params_file(req, ";".join(f"{k}={v}" for k, v in job.items()), "string")],
            {**ucc.UCC_ON, **job},
            "Open MPI collectives served by UCC, tuned by colltune")

    def _installable_config(self, req: ExportRequest, text: str) -> Installable:
        """UCC's configuration-file form, as `tune --tune-ucc` writes it: checked as UCC
        reads each section, written again from what was read (its sections and tuning
        strings only, each in what colltune writes), with the MCA parameter file and the
        modules that switch coll/ucc on and name the file (UCC_CONFIG_FILE) to every rank.
        The modules set no UCC_TL_UCP_TUNE: one in a job's environment wins over the
        file's (UCC 1.8)."""
        check_ucc_config(req.source, text, [])  # what UCC would refuse or read two ways
        secs = [x for x in ucc_config.config_sections(text) or [] if x.line]
        body = []
        for sec in secs:
            if sec.names or not _HEADER_WRITTEN.fullmatch(sec.header) or any(
                    not (ucc_tune.UCC_TUNE.fullmatch(n) or n in ucc_tune.RADIX_VARS.values())
                    or not ucc.SAFE.fullmatch(v) for _, n, v in sec.settings):
                raise ColltuneError(f"will not export {req.source}: section [{sec.header}] "
                                    f"(line {sec.line}) holds what tune --tune-ucc does not "
                                    "write (a vendor or model, a setting other than a tuning "
                                    "string or a radix, or characters colltune never "
                                    "writes)",
                                    "export the configuration file tune --tune-ucc wrote")
            body += [f"[{sec.header}]", *(f"{n}={v}" for _, n, v in sec.settings), ""]
        if req.mpi is not None:
            ucc_installation(req.mpi)  # an Open MPI whose jobs never reach UCC: refused
        where = _where(req)
        conf_file = destination(where / "colltune-ucc.conf")
        if not _PATH_IN_PARAMS.fullmatch(str(conf_file)):
            raise ColltuneError(f"will not export to {where}: Open MPI's mca_base_env_list "
                                "cannot carry that path (it splits at ';' and spaces)",
                                "--site a directory whose path has no spaces or ';'")
        return Installable(
            [Planned(conf_file, f"# {ucc_config.CONFIG_HEADER}\n# {safe.comment(req.stamp)}\n\n"
                     + "\n".join(body), "UCC configuration file"),
             _params_file(req, f"UCC_CONFIG_FILE={conf_file}", "configuration file")],
            {**ucc.UCC_ON, "UCC_CONFIG_FILE": str(conf_file)},
            "Open MPI collectives served by UCC, tuned by colltune (configuration file)")


def _string_and_radix(path: Path, lines: list[tuple[int, str, str]], verb: str
                      ) -> tuple[str, dict[str, str]]:
    """A job's environment file as tune --tune-ucc writes it: one UCC_TL_UCP_TUNE line
    and the radix settings of the algorithms it tunes (each at most once)."""
    names = [n for _, n, _ in lines]
    if names.count(ucc_tune.TL_UCP) != 1 or len(set(names)) != len(names) or any(
            n != ucc_tune.TL_UCP and n not in ucc_tune.RADIX_VARS.values() for n in names):
        raise ColltuneError(f"will not {verb} {path}: it is not a job's environment file of "
                            f"one {ucc_tune.TL_UCP} line and the radix settings tune "
                            "--tune-ucc writes, nor UCC's configuration file",
                            "use the string tune --tune-ucc wrote (--out), or its "
                            "configuration file (-sections.conf)")
    return (next(v for _, n, v in lines if n == ucc_tune.TL_UCP),
            {n: v for _, n, v in lines if n != ucc_tune.TL_UCP})


def _where(req: ExportRequest) -> Path:
    """Where an export installs: the site's directory, or the user's ~/.openmpi."""
    return req.home / ".openmpi" if req.site is None else req.site


def _params_file(req: ExportRequest, env_list: str, what: str) -> Planned:
    """The MCA parameter file that switches coll/ucc on above every other component and
    hands `env_list` (NAME=VALUE) to every rank: the site's, to append to the
    installation's own, or merged into the user's."""
    user = req.site is None
    conf = [f"# Open MPI MCA parameters {safe.comment(req.stamp)}",
            f"# UCC serves Open MPI's collectives with colltune's {what}; another "
            "mca_base_env_list replaces this one: join them"]
    if not user:
        conf.append("# install: append to <prefix>/etc/openmpi-mca-params.conf, or set "
                    "OMPI_MCA_mca_base_param_files to this file")
    conf += ["coll_ucc_enable = 1", "coll_ucc_priority = 100",
             f"mca_base_env_list = {env_list}"]
    name = "mca-params.conf" if user else "openmpi-mca-params.conf"
    return Planned(destination(_where(req) / name), "\n".join(conf) + "\n",
                   "Open MPI MCA parameter file", merge=user)


# a section header as ucc.config_file writes it (team sizes, and nodes where one node)
_HEADER_WRITTEN = re.compile(r"team_size=\d+-\d+( nnodes=1)?")
# a path Open MPI's mca_base_env_list carries whole (it splits its list at ';')
_PATH_IN_PARAMS = re.compile(r"/[A-Za-z0-9_./+-]*")


def _string_target(path: Path, value: str, np: int, mpi_prefix: str | None,  # noqa: PLR0913 (what is verified, where, and how the job gets it)
                   placement: Placement, job: dict[str, str] | None,
                   radix: dict[str, str]) -> VerifyTarget:
    """`tune verify` of the string UCC reads for a team of `np`, with the radix settings
    beside it (`job`: how the job is handed them; None: in its environment)."""
    for var, v in radix.items():
        try:
            ucc_radix.parse_radix(v)
        except ucc_tune.UccTuneError as e:
            raise ColltuneError(f"not applied: UCC would not load tl/ucp with {var}: {e}",
                                f"tune check {path}") from None
    try:
        tokens = ucc_tune.parse(value)
        ucc_tune.apply(tokens, np)
    except ucc_tune.UccTuneError as e:
        raise ColltuneError(f"not applied: UCC would ignore the whole string for teams "
                            f"of {np}: {e}", f"tune check {path}") from None
    mpi = ucc_installation(mpi_prefix)
    table, _ = ucc.algorithms(mpi)
    colls = sorted({c for t in tokens if t.for_team(np) for c in t.colls or table}
                   & set(ucc.PROVEN))
    at = ucc.says(value)
    radices = {var: ucc_radix.parse_radix(v) for var, v in radix.items()}

    def rule_at(coll: Collective, n: int, size: int) -> Config | None:
        alg = at(coll, n, size)
        if alg is None:
            return None
        var = ucc_tune.RADIX_VARS.get((coll.name, alg))
        k = radices[var].at(ucc.msg_size(coll, size, n)) if var in radices else None
        return Config.of(table[coll.name].index(alg) + 1,
                         {RADIX: k} if isinstance(k, int) else {})

    arm = job if job is not None else {ucc_tune.TL_UCP: value, **radix}
    return VerifyTarget(mpi, ucc.catalog(table, colls), colls, {"default": {}, "tuned": arm},
                        placement, rule_at, ucc_proof.proof(mpi, placement, value, table, arm,
                                                      radix))


class UccBackend(Backend[OpenMPI]):
    """UCC's tl/ucp algorithms on Open MPI 5 with coll/ucc (--tune-ucc). No runtime or apps
    capability: tune runtime and tune app tune coll/tuned's choices, not UCC's (yet)."""

    Files = UccFiles
    traits = Traits()
    name = "ucc"
    short = "ucc"
    waits = OpenMPIBackend.waits
    output = "a UCC tuning string (UCC_TL_UCP_TUNE)"
    options = frozenset({"tune_ucc"})
    collectives = ucc.PROVEN  # tune all: those whose message sizes are proven here
    rules_name = "colltune-ucc.env"
    rules_what = "UCC tuning string"

    def rule_size(self, coll: Collective, size: int, np: int) -> int:
        return ucc.msg_size(coll, size, np)

    def mpit_env(self) -> dict[str, str]:
        return {}

    def mpit_vars(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, int]:
        return {}

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return ucc.forcing(catalog, coll, cfg)

    def launch(self, mpi: OpenMPI, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        """coll/ucc on above every component; a string or UCC configuration file the
        caller's environment holds is not passed on (it would choose for UCC)."""
        env = {k: v for k, v in launch_env().items() if not _UCC_OWN.fullmatch(k)}
        return launch_command(mpi, placement), {**env, **ucc.UCC_ON, **ucc.baseline(mpi),
                                                **(env_extra or {})}

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[OpenMPI]:
        if opts.predict or opts.strategy == "model":
            raise ColltuneError("--predict and --strategy model need cost formulas, and "
                                "colltune has none for UCC's algorithms",
                                "use --strategy grid, race or bayes")
        unproven = [c for c in colls if c not in ucc.PROVEN]
        if unproven:  # before anything is looked for: it cannot be tuned anywhere
            raise ColltuneError(f"--tune-ucc tunes {', '.join(ucc.PROVEN)}, not "
                                f"{', '.join(unproven)}: how UCC sizes its messages is not "
                                "proven here yet", "tune those with coll/tuned (leave out "
                                "--tune-ucc)")
        mpi = ucc_installation(opts.mpi)
        table, source = ucc.algorithms(mpi)
        missing = [c for c in colls if c not in table]
        if missing:
            raise ColltuneError(f"the UCC that {mpi.describe()} loads has no tl/ucp "
                                f"algorithms for {', '.join(missing)}",
                                "tune those with coll/tuned (leave out --tune-ucc)")
        note(f"note: UCC's algorithms from {source}")
        placements = [place(np, opts.hostfile, launch=opts.launch) for np in opts.nps]
        return UccSession(self, mpi, ucc.catalog(table, colls), placements, opts)

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        return ucc.catalog(ucc_tune.TL_UCP_ALGS, colls)

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return Catalog(algorithms=names, source="store") if names else None

    def owns(self, mpi_key: str) -> bool:
        # the key may carry a replayed arrival pattern after it (tuner/measure.arrival_key)
        return mpi_key.startswith("openmpi-") and mpi_key.split("~", 1)[0].endswith("+ucc")


class UccSession(Session[OpenMPI]):
    """A run that measures each tl/ucp algorithm in a launch of its own (UCC reads its
    string once, at initialisation) and writes UCC's string."""

    sweep = "relaunch"

    def __init__(self, backend: Backend[OpenMPI], mpi: OpenMPI, catalog: Catalog,
                 placements: list[Placement], opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog
        self.placements, self.opts = placements, opts

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        return ds

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        mine = {(coll.name, placement.np): ucc.section(self.catalog, coll.name, ds)}
        value, radix = ucc.render(mine), ucc.radix_settings(mine)
        write_file(path, ucc.env_file(value, [], radix), "the tentative string")
        return {"default": {}, "tuned": {ucc_tune.TL_UCP: value, **radix}}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        out = self.opts.out
        sections: ucc.Sections = {}
        if out is not None and out.exists():  # merged into: its other sections are kept
            lines = ucc_tune.env_lines(read_text(out)) or []
            names = [n for _, n, _ in lines]
            if names.count(ucc_tune.TL_UCP) != 1 or any(
                    n != ucc_tune.TL_UCP and n not in ucc_tune.RADIX_VARS.values()
                    for n in names):
                raise ColltuneError(f"will not merge into {out}: it is not a UCC string "
                                    "tune --tune-ucc wrote", "choose another --out; it was "
                                    "not changed")
            sections = ucc.read_sections(
                next(v for _, n, v in lines if n == ucc_tune.TL_UCP), str(out),
                {n: v for _, n, v in lines if n != ucc_tune.TL_UCP})
        for name, per_np in decisions.items():
            for np, ds in per_np.items():
                sections[(name, np)] = ucc.section(self.catalog, name, ds)
        carried, radix, left = ucc.env_form(sections)
        value = ucc.render(carried)
        header = [f"UCC tuning string written by colltune {__version__}", provenance(self.mpi),
                  "message sizes are UCC's: one rank's buffer (bcast, reduce, allreduce), "
                  "the whole receive buffer (allgather, alltoall)", *left,
                  *served(sections, decisions), *decision_comments(decisions, self.catalog)]
        frag = ucc.fragment_path(out) if out is not None else None
        use = (f"OMPI_MCA_mca_base_param_files={frag} mpirun ..." if frag else ucc.use(radix))
        if out is not None and frag is not None:
            write_file(out, ucc.env_file(value, [*header, f"use: {ucc.use(radix)}"], radix),
                       "--out")
            one_node = {p.np for p in self.placements if p.nodes == 1}
            write_file(ucc.config_path(out), ucc.config_file(sections, one_node, [
                f"{ucc_config.CONFIG_HEADER} {__version__}: the string of "
                f"{out} in sections per team size", provenance(self.mpi),
                "use: UCC_CONFIG_FILE=THIS_FILE (with coll/ucc on); a UCC_TL_UCP_TUNE the "
                "job's environment sets is taken instead (UCC 1.8 here)",
                *served(sections, decisions)]), "--out")
            write_file(frag, ucc.mca_fragment(value, [
                f"UCC on above every other collective component, with the string of {out}",
                "use: OMPI_MCA_mca_base_param_files=THIS_FILE mpirun ... (or the site's "
                "openmpi-mca-params.conf; it sets mca_base_env_list, which another "
                "setting of it replaces)"], radix), "--out")
        return Written("UCC's tuning string (UCC_TL_UCP_TUNE)", str(frag) if frag else None,
                       use, record={"ucc": {
                           "string": value, "radix": radix,
                           "mca_params": str(frag) if frag else None,
                           "config_file": str(ucc.config_path(out)) if out else None}})


def served(sections: ucc.Sections, now: Decisions) -> list[str]:
    """Per collective and section, the team sizes its tokens serve (and below the smallest
    measured: UCC's own choice); a section not measured in this run (`now`) is said to be
    kept from the file merged into."""
    out = []
    for coll in sorted({c for c, _ in sections}):
        nps = sorted(n for c, n in sections if c == coll)
        if nps[0] > 1:
            out.append(f"{coll}: teams of fewer than {nps[0]} ranks: nothing measured there, "
                       "so UCC's own choice")
        for i, np in enumerate(nps):
            hi = nps[i + 1] - 1 if i + 1 < len(nps) else None
            note = served_note(np if np in now.get(coll, {}) else None, np, hi)
            if np not in now.get(coll, {}):
                note += f": kept from the file this run merged into (measured at {np} there)"
            out.append(f"{coll}: {note}".replace("communicators", "teams"))
    return out
