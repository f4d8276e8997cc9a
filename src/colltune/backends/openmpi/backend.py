"""Open MPI's coll/tuned as a Backend: MPI_T sweeps in one launch, forcing through MCA
variables, and the dynamic rules file (classic or rule-file-version-2) as output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.apps import AppSupport
from colltune.backends.base import Session
from colltune.backends.files import Checked, ExportRequest, Installable, VerifyTarget
from colltune.backends.openmpi import runtime, serving
from colltune.backends.openmpi.applied import (
    applied_check,
    mpit_takes_effect,
    rule_at,
    rule_at_json,
)
from colltune.backends.openmpi.install import (
    OpenMPI,
    find_openmpi,
    han_excluded,
    launch_command,
    launch_env,
    read_catalog,
    supports_rules_json,
    supports_rules_v2,
)
from colltune.backends.openmpi.rules_files import TunedRulesFiles
from colltune.backends.openmpi.runtime import OpenMPIRuntime
from colltune.backends.openmpi.tuned_rules import (
    TUNED_FOR,
    TunedRulesBackend,
    TunedSession,
    valid_algorithms,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.runtime import Knob
from colltune.errors import ColltuneError, read_text
from colltune.rules import mca_params, ompi_json, ucc_config, ucc_tune
from colltune.rules import ompi_classic as rules
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.launchers import Launch
    from colltune.options import TuneOptions
    from colltune.slots import Placement

HAN_NOTE = ("note: coll/han is excluded while tuning (--mca coll ^han): on several nodes "
            "Open MPI 5 and later would run han instead of the tuned algorithms measured "
            "here. The rules take effect where tuned runs: launch the application with "
            "--mca coll ^han too, or keep han and its own choices")



class OpenMPIFiles(TunedRulesFiles):
    """Open MPI's rules files, and the MCA parameter files tune runtime writes."""

    def claims(self, text: str) -> bool:
        # its runtime file, Open MPI 6's JSON rules and the UCC strings coll/ucc hands on
        # (in a job's environment file or UCC's configuration file);
        # classic rules files are the fallback
        return (mca_params.claims(text) or ompi_json.claims(text)
                or ucc_tune.env_lines(text) is not None or ucc_config.claims_config(text))

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        mpi = find_openmpi(mpi_prefix)
        catalog = read_catalog(mpi)
        if ompi_json.claims(read_text(path)):
            return self._verify_json(path, np, mpi, catalog, hostfile, launch)
        try:
            rf = rules.read(path, valid_algs=valid_algorithms(catalog),
                            allow_v2=supports_rules_v2(mpi.version_tuple))
        except rules.RulesError as e:
            raise ColltuneError(f"not applied: Open MPI {mpi.version} would ignore {e}",
                                f"fix the file (tune check {path} --mpi {mpi.prefix})"
                                ) from None
        names = [rules.NAME_BY_ID[cid] for cid in sorted(rf.collectives)
                 if cid in rules.NAME_BY_ID]
        placement = self.backend.place(np, hostfile, launch)
        return VerifyTarget(
            mpi, catalog, names, self.rules_arms(path), placement,
            lambda coll, n, size: rule_at(rf, coll, n, size),
            serving.first_served(mpi, placement, lambda coll, n, sizes: applied_check(
                mpi, catalog, coll, n, sizes, lambda c, m, s: rule_at(rf, c, m, s), path)),
            notes=other_layouts(read_text(path), placement) + serving.warnings(mpi, {}))

    def _verify_json(self, path: Path, np: int, mpi: OpenMPI, catalog: Catalog,
                     hostfile: str | None, launch: Launch | None) -> VerifyTarget:
        """Open MPI 6's JSON file, each rule as it applies to the placement verified (a
        rule for another layout is skipped, as Open MPI skips it)."""
        if not supports_rules_json(mpi.version_tuple):
            raise ColltuneError(f"not applied: Open MPI {mpi.version} reads no JSON rules "
                                "and would drop this file", "verify it with an Open MPI 6, "
                                "or write --rules-version 1 or 2")
        try:
            js = ompi_json.parse(read_text(path), str(path),
                                 lambda name: catalog.algorithms.get(name, {}))
        except ompi_json.JsonRulesError as e:
            raise ColltuneError(f"not applied: Open MPI {mpi.version} would ignore {e}",
                                f"fix the file (tune check {path} --mpi {mpi.prefix})"
                                ) from None
        placement = self.backend.place(np, hostfile, launch)

        def says(coll: Collective, n: int, size: int) -> Config | None:
            return rule_at_json(js, coll, n, size, placement.nodes, placement.ppn)

        return VerifyTarget(
            mpi, catalog, [n for n in js.collectives if n in rules.COLLTYPE],
            self.rules_arms(path), placement, says,
            serving.first_served(mpi, placement, lambda coll, n, sizes: applied_check(
                mpi, catalog, coll, n, sizes, says, path)), notes=serving.warnings(mpi, {}))

    def installable(self, req: ExportRequest) -> Installable:
        if req.text is None and mca_params.claims(read_text(req.source)):
            return runtime.installable(req, self.backend.rules_name)
        return super().installable(req)

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        got = runtime.read(path)
        if got is None:
            return super().check(path, mpi, version)
        setting, rules_path = got
        setting = {k: v for k, v in setting.items() if k not in runtime.rules_params(Path())}
        if mpi:
            runtime.refuse(find_openmpi(mpi), [Knob(n, "choice", "mca", (v,), v)
                                               for n in setting if n != runtime.PRTE_BIND
                                               for v in (setting[n],)], [])
        return Checked(f"Open MPI runtime parameters, {len(setting)} set"
                       + (f", loads rules {rules_path}" if rules_path else ""),
                       {"format": "mca-params", "parameters": setting,
                        "rules": str(rules_path) if rules_path else None}, [])


class OpenMPIApps(AppSupport[OpenMPI]):
    """An application under Open MPI's mpirun: settings as `-x`, proven as MCA control
    variables, the rules file's choice read from the command and environment."""

    online = "dup"  # coll/tuned reads its forced algorithm when a communicator is made
    # MPI_T_init_thread registers every framework's components, loading every plugin
    # installed (0.2 s a process here: docs/online.md); mca_base_var, which MPI_T's
    # writes go through, is there from MPI_Init on
    online_vars = "mca_base_var"

    def find(self, prefix: str | None) -> OpenMPI:
        return find_openmpi(prefix)

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return [a for k, v in env.items() for a in ("-x", f"{k}={v}")]

    def readback(self, env: dict[str, str]) -> dict[str, str]:
        # an MCA parameter is an MPI_T control variable of the same name
        return {k[len("OMPI_MCA_"):]: v for k, v in env.items() if k.startswith("OMPI_MCA_")}

    def chooser(self, mpi: OpenMPI, cmd: list[str], env: dict[str, str]
                ) -> Callable[[str, int, int], str] | None:
        """The active rules file's rule (--mca in the command or OMPI_MCA_ in the
        environment, as mpirun reads them; the command wins), else the fixed decision."""
        mca = {k[len("OMPI_MCA_"):]: v for k, v in env.items() if k.startswith("OMPI_MCA_")}
        for i, a in enumerate(cmd[:-2]):
            if a in ("--mca", "-mca"):
                mca[cmd[i + 1]] = cmd[i + 2]
        path = mca.get("coll_tuned_dynamic_rules_filename")
        if mca.get("coll_tuned_use_dynamic_rules") not in ("1", "true") or not path:
            return lambda coll, n, size: "Open MPI's fixed decision (no rules file)"
        catalog = read_catalog(mpi)
        try:
            rf = rules.read(path, valid_algs=valid_algorithms(catalog),
                            allow_v2=supports_rules_v2(mpi.version_tuple))
        except (OSError, rules.RulesError) as e:
            why = f"Open MPI's fixed decision ({path} unusable: {e})"
            return lambda coll, n, size: why

        def rule(coll: str, n: int, size: int) -> str:
            c = get_collective(coll)
            cfg = rule_at(rf, c, n, size)
            if cfg is None or cfg.algorithm == 0:
                return f"Open MPI's fixed decision ({path})"
            return f"{cfg.label(catalog, coll)} ({path})"

        return rule


class OpenMPIBackend(TunedRulesBackend[OpenMPI]):
    Files = OpenMPIFiles
    runtime = OpenMPIRuntime()
    apps = OpenMPIApps()
    name = "openmpi"
    options = frozenset({"tune_han", "tune_ucc", "rules_version"})
    short = "ompi"
    waits = {OpenMPI.name: "Open MPI's ranks poll for progress while they wait, so a rank "
                           "can wait for a scheduler time slice of the rank whose core it "
                           "shares"}

    def launch(self, mpi: OpenMPI, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        return launch_command(mpi, placement), launch_env(env_extra)

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[OpenMPI]:
        # with --predict, what is measured is fit_nps; nps are only predicted
        placements = [place(np, opts.hostfile, launch=opts.launch)
                      for np in (opts.fit_nps if opts.predict else opts.nps)]
        mpi = find_openmpi(opts.mpi)
        return OpenMPISession(self, mpi, read_catalog(mpi), placements,
                            choose_rules_version(mpi, opts.rules_version), opts)


class OpenMPISession(TunedSession[OpenMPI]):
    """A run on a real Open MPI: MPI_T proven to switch algorithms, coll/han noted."""

    def han_excluded(self) -> bool:
        return han_excluded(self.mpi)

    def before_measuring(self, note: Callable[[str], None]) -> None:
        mpi = self.mpi
        if han_excluded(mpi) and any(p.nodes > 1 or p.hostfile for p in self.placements):
            note(HAN_NOTE)
        if self.sweep == "mpit":
            verified = mpit_takes_effect(mpi, self.catalog)
            if verified is False:
                note("warning: an algorithm written through MPI_T did not change what "
                     "this Open MPI ran; relaunching per configuration instead")
                self.sweep = "relaunch"
            elif verified is None:
                note("note: pml monitoring unavailable; trusting MPI_T read-back")


def other_layouts(text: str, p: Placement) -> list[str]:
    """What a classic file's comments say it was tuned in, where that is another layout
    than the job verified (the format cannot say it, so Open MPI applies it anyway)."""
    return [f"warning: the section for {coll} at {np} ranks was tuned on {nodes} node(s) "
            f"x {ppn}; this job runs {p.nodes} node(s) x {p.ppn}: the verdict is for rules "
            "measured in another layout" for coll, np, nodes, ppn in TUNED_FOR.findall(
                text[:1 << 20]) if int(np) == p.np and (int(nodes), int(ppn)) != (p.nodes, p.ppn)]


def choose_rules_version(mpi: OpenMPI, requested: int | None) -> int:
    """1 classic, 2 rule-file-version-2, 3 JSON: by default the newest this Open MPI reads
    (6 reads a classic file's communicator sizes differently: docs/openmpi.md)."""
    v2, js = supports_rules_v2(mpi.version_tuple), supports_rules_json(mpi.version_tuple)
    if requested not in (None, 1, 2, 3):
        raise ColltuneError(f"unknown --rules-version {requested}",
                            "use 1 (classic), 2 (rule-file-version-2) or 3 (JSON, Open MPI 6)")
    if requested is None:
        return 3 if js else 2 if v2 else 1
    if requested == 2 and not v2:
        raise ColltuneError(f"Open MPI {mpi.version} does not read rule-file-version-2",
                            "use --rules-version 1 (needs 4.1.8+ or 5.0.7+ for version 2)")
    if requested == 3 and not js:
        raise ColltuneError(f"Open MPI {mpi.version} reads no JSON rules (6.0 and later do)",
                            "use --rules-version 1 or 2")
    return requested


