"""Open MPI's runtime parameters (4.1 and 5.0): binding, the shared-memory transport's
eager and send sizes, leave-pinned, yielding, and which collective component is in charge;
checked against what the installation's own ompi_info lists before any launch."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path

from colltune.backends.base import provenance, write_file
from colltune.backends.files import ExportRequest, Installable
from colltune.backends.openmpi import coll_log
from colltune.backends.openmpi.install import OpenMPI, _run
from colltune.backends.runtime import RuntimeSupport
from colltune.core.runtime import Allowed, Knob, Setting
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.outfile import Planned, destination
from colltune.rules import mca_params as mca
from colltune.rules.mca_params import McaParams
from colltune.rules.safe import check_env

_BIND_TARGETS = ("none", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket",
                 "package", "numa", "board")
_BIND_QUALIFIERS = ("overload-allowed", "if-supported", "ordered")
BINDINGS = tuple(f"{t}{q}" for t in _BIND_TARGETS
                 for q in ("", *(f":{q}" for q in _BIND_QUALIFIERS)) if t != "none" or not q)
UNSET = "unset"  # the library's own choice: nothing set
PRTE_BIND = "hwloc_default_binding_policy"  # Open MPI 5: PRRTE's, not in ompi_info


def _btl(mpi: OpenMPI) -> str:
    return "vader" if mpi.version_tuple < (5,) else "sm"  # renamed in 5.0


def knobs(mpi: OpenMPI) -> list[Knob]:
    """What colltune tunes of this Open MPI, with the values a search tries first."""
    btl = _btl(mpi)
    v5 = mpi.version_tuple >= (5,)
    bind = Knob(
        # 4.1: mpirun's hwloc framework; 5.0: PRRTE's, which OMPI_MCA_ does not reach
        PRTE_BIND if v5 else "hwloc_base_binding_policy",
        "choice", "prte" if v5 else "mca",
        ("none", "core:overload-allowed", "package" if v5 else "socket"),
        UNSET, choices=(UNSET, *BINDINGS), proof="affinity", launcher_reads=True,
        affects=("every call: where ranks run",),
        doc="where ranks are bound (mpirun --bind-to); the default depends on the rank "
            "count and oversubscription")
    out = [
        bind,
        Knob(f"btl_{btl}_eager_limit", "int", "mca", ("1024", "4096", "16384"), "4096",
             lo=256, hi=1 << 20, affects=("point-to-point on a node", "small collectives"),
             doc="largest message sent eagerly by the shared-memory transport"),
        Knob(f"btl_{btl}_max_send_size", "int", "mca", ("16384", "32768", "131072"), "32768",
             lo=4096, hi=1 << 24, affects=("large messages on a node",),
             doc="largest fragment the shared-memory transport sends at once"),
        Knob("mpi_leave_pinned", "choice", "mca", ("-1", "0", "1"), "-1",
             choices=("-1", "0", "1"), affects=("large messages over RDMA networks",),
             doc="leave-pinned protocol (-1: the network decides)"),
        # mpirun sets it itself when it oversubscribes: the default is the launch's
        Knob("mpi_yield_when_idle", "choice", "mca", ("0", "1"), UNSET,
             choices=(UNSET, "0", "1"), affects=("every wait when ranks share cores",),
             doc="waiting ranks yield the core instead of polling (mpirun sets 1 when it "
                 "oversubscribes)"),
        Knob("coll_han_priority", "int", "mca", ("0", "100"), "35" if v5 else "0", lo=0,
             hi=100, affects=("collectives: han over tuned when above 30",),
             proof="component",
             doc="coll/han's priority (hierarchical collectives); above coll/tuned's 30 "
                 "it is in charge, on communicators spanning nodes only (it disqualifies "
                 "itself on one node's processes)"),
        Knob("coll_adapt_priority", "int", "mca", ("0", "100"), "0", lo=0, hi=100,
             affects=("bcast, reduce: adapt over tuned when above 30",),
             proof="component",
             doc="coll/adapt's priority (event-driven bcast and reduce)"),
        Knob("coll_sm_priority", "int", "mca", ("0", "100"), "0", lo=0, hi=100,
             affects=("barrier, bcast, reduce, allreduce on one node: sm over tuned when "
                      "above 30",),
             proof="component",
             doc="coll/sm's priority (shared-memory collectives within a node)"),
    ]
    if not v5:  # 5.0 moved single copy into the smsc framework (a component choice)
        out.insert(3, Knob("btl_vader_single_copy_mechanism", "choice", "mca",
                           ("cma", "none"), "cma", choices=("cma", "emulated", "none", "xpmem",
                                                            "knem"),
                           affects=("large messages on a node",),
                           doc="how large messages are copied between ranks"))
    return out


@cache
def _listed(mpi: OpenMPI) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every MCA parameter ompi_info lists: name -> (current value, enumerator names and
    values, empty when free)."""
    text = _run([str(mpi.ompi_info), "--all", "--level", "9", "--parsable"], mpi.prefix,
                timeout=120)
    out: dict[str, tuple[str, list[str]]] = {}
    for m in re.finditer(r"^mca:[^:]+:[^:]+:param:(\w+):(value|enumerator:value):(.*)$",
                         text, re.M):
        name, kind, rest = m.groups()
        value, enums = out.setdefault(name, ("", []))
        if kind == "value":
            out[name] = (rest, enums)
        else:
            enums.extend(rest.split(":", 1))
    return {k: (v, tuple(e)) for k, (v, e) in out.items()}


# what a runtime parameter file of Open MPI may set (the one place that says it: check,
# export, compare, runtime --prove and verify --app all read files through `read` or
# `installable`): the collective, transport and binding frameworks, colltune's rules file
MAY_SET = Allowed(
    prefixes=("coll_", "btl_", "pml_", "mtl_", "osc_", "smsc_", "hwloc_base_binding_",
              PRTE_BIND, "rmaps_base_mapping_policy", "mpi_leave_pinned",
              "mpi_yield_when_idle"),
    names=frozenset({"coll", "btl", "pml", "mtl", "osc", "smsc"}),
    files=frozenset({"coll_tuned_dynamic_rules_filename"}))


def _allowed_only(names: list[str], where: str) -> None:
    """McaParamsError naming what a runtime file may not set (a launcher's agent, a
    component path: anything that would run or load a program for every user's jobs)."""
    bad = MAY_SET.refused(names)
    if bad:
        raise mca.McaParamsError(
            f"{where} sets {', '.join(b[:60] for b in bad[:5])}: a runtime parameter file "
            "may set only Open MPI's collective, transport and binding parameters")


def vouch(mpi: OpenMPI, name: str) -> Knob | None:
    """A knob for an MCA parameter the catalog does not declare but this Open MPI lists
    (its values checked against the library's enumerators); None: the library has none,
    or it is not one a runtime file may set."""
    listed = _listed(mpi)
    if name not in listed or not MAY_SET(name):
        return None
    value, enums = listed[name]
    return Knob(name, "choice", "mca", (value,), value, choices=enums,
                proof="component" if coll_log.COMPONENT.fullmatch(name) else "cvar",
                doc="an MCA parameter of this Open MPI (ompi_info)")


def unknown_names(mpi: OpenMPI, setting_names: list[str]) -> list[str]:
    """Names of MCA-carried knobs this installation's ompi_info does not list (a knob of
    another version, a misspelling): each would be ignored silently by Open MPI."""
    listed = _listed(mpi)
    return [n for n in setting_names if n not in listed]


def environment(ks: dict[str, Knob], setting: Setting, base: dict[str, str]
                ) -> dict[str, str]:
    """The launcher environment that applies `setting`: `base` without any inherited
    value of a tuned knob (OMPI_MCA_ or PRTE_MCA_), plus the setting's values that differ
    from the library's default (a default is left the library's own, not a copy)."""
    drop = {p + n for n in ks for p in ("OMPI_MCA_", "PRTE_MCA_")}
    env = {k: v for k, v in base.items() if k not in drop}
    for name, value in setting.items():
        k = ks[name]
        if value == k.default:
            continue
        env[("PRTE_MCA_" if k.via == "prte" else "OMPI_MCA_") + name] = value
    return env


def refuse_overrides(cmd: list[str], ks: dict[str, Knob]) -> None:
    """A command line that sets a tuned parameter itself would win over the search's
    value in every launch: refused before any launch."""
    for i, a in enumerate(cmd):
        name = cmd[i + 1] if a in ("--mca", "-mca", "--prtemca") and i + 1 < len(cmd) else ""
        if name in ks or (a in ("--bind-to", "-bind-to") and any(
                k.proof == "affinity" for k in ks.values())):
            raise ColltuneError(f"the command sets {name or 'the binding'} itself ({a}), "
                                "which tune runtime searches: every launch would run the "
                                "command's value", f"remove {a} from the command")


def strip_own(cmd: list[str], ks: dict[str, Knob]) -> list[str]:
    """colltune's own launch command without what it sets itself for a knob the search
    varies: `--mca NAME VALUE` (mpi_yield_when_idle when oversubscribed), `--bind-to`
    (one rank per core) when binding is searched, and Open MPI 5's exclusion of coll/han
    when han's priority is (excluded, han would never run whatever its priority)."""
    binding = any(k.proof == "affinity" for k in ks.values())
    out, i = [], 0
    while i < len(cmd):
        a = cmd[i]
        if a in ("--mca", "-mca") and i + 2 < len(cmd) and (
                cmd[i + 1] in ks or (cmd[i + 1] == "coll" and cmd[i + 2] == "^han"
                                     and "coll_han_priority" in ks)):
            i += 3
            continue
        if a in ("--bind-to", "-bind-to") and binding and i + 1 < len(cmd):
            i += 2
            continue
        out.append(cmd[i])
        i += 1
    return out


def readback(mpi: OpenMPI, knob: Knob, value: str) -> set[str]:
    """What the knob's MPI_T control variable reads in a rank once `value` applied: the
    value itself, its enumerator's number (single copy: cma reads 1), a boolean as 0/1."""
    out = {value}
    if knob.kind == "bool":
        out |= {"1", "true"} if value == "1" else {"0", "false"}
    _, enums = _listed(mpi).get(knob.name, ("", ()))
    pairs = dict(zip(enums[1::2], enums[0::2], strict=False))  # name -> number
    if value in pairs:
        out.add(pairs[value])
    return out


def cpus(knob: Knob, value: str) -> Callable[[int], bool] | None:
    """Whether a rank's CPU count fits a binding: all of this node's (none), fewer than
    all (a core or a hardware thread); other targets are not checked (they depend on the
    node's sockets and caches)."""
    if knob.proof != "affinity" or value == UNSET:
        return None
    n = len(os.sched_getaffinity(0))
    target = value.split(":")[0]
    if target == "none":
        return lambda c: c == n
    if target in ("core", "hwthread"):
        return lambda c: 0 < c < n or n == 1
    return None


def refuse(mpi: OpenMPI, ks: list[Knob], cmd: list[str]) -> None:
    """Before any launch: a parameter this Open MPI does not list would be ignored
    silently (a misspelling, another version's name), and a command line that sets a
    tuned knob would win over every launch's value."""
    missing = unknown_names(mpi, [k.name for k in ks if k.via == "mca"])
    if missing:
        raise ColltuneError(f"{mpi.describe()} has no MCA parameter "
                            + ", ".join(missing) + " (ompi_info --all does not list it)",
                            "check the name with ompi_info --param all all --level 9")
    refuse_overrides(cmd, {k.name: k for k in ks})


def write(mpi: OpenMPI, ks: dict[str, Knob], setting: Setting, rules: Path | None,
          out: Path, notes: list[str]) -> dict[str, object]:
    """The MCA parameter file of `setting` (the values that differ from the library's
    defaults; PRRTE's as `#prte:` lines) and of the rules file every launch read."""
    p = McaParams(comments=[provenance(mpi), *notes])
    for name, value in setting.items():
        if value != ks[name].default:
            (p.prte if ks[name].via == "prte" else p.params)[name] = value
    if rules is not None:
        p.params |= rules_params(rules.resolve())
    write_file(out, mca.render(p, "the MCA parameter file"), "--out")
    use = f"mpirun --mca mca_base_param_files {out} ..."
    also = ([f"PRRTE reads {', '.join(p.prte)}: tune export installs its "
             "prte-mca-params.conf (or set PRTE_MCA_<name>)"] if p.prte else [])
    return {"what": "Open MPI MCA parameter file", "also": None, "use": use,
            "notes": also + ([] if p.params or p.prte else
                             ["no parameter set: the library's defaults were kept"])}


def rules_params(rules: Path) -> dict[str, str]:
    return {"coll_tuned_use_dynamic_rules": "1",
            "coll_tuned_dynamic_rules_filename": str(rules)}


def read(path: Path) -> tuple[Setting, Path | None] | None:
    """The setting and rules file of a parameter file tune runtime wrote (None: the file is
    not one); a malformed one is a FormatError naming the line."""
    text = read_text(path)
    if not mca.claims(text):
        return None
    try:
        p = mca.parse(text)
        _allowed_only([*p.params, *p.prte], "it")
    except mca.McaParamsError as e:
        raise FormatError(str(path), 0, str(e)) from None
    rules = p.params.get("coll_tuned_dynamic_rules_filename")
    return {**p.params, **p.prte}, Path(rules) if rules else None


def installable(req: ExportRequest, rules_name: str) -> Installable:
    """What installs a runtime parameter file: Open MPI's parameter file (the site's, to
    append to <prefix>/etc/openmpi-mca-params.conf; or the user's own, merged), PRRTE's
    for Open MPI 5's binding, the rules file it loads (installed beside and pointed at),
    and the variables a module sets for the same effect."""
    try:
        p = mca.parse(read_text(req.source))
        _allowed_only([*p.params, *p.prte], "it")
    except mca.McaParamsError as e:
        raise ColltuneError(f"will not export {req.source}: {e}",
                            "export the file tune runtime wrote, unedited") from None
    user = req.site is None
    where = req.home / ".openmpi" if user else req.site
    assert where is not None
    files: list[Planned] = []
    rules = p.params.pop("coll_tuned_dynamic_rules_filename", None)
    if rules is not None:
        target = destination(where / rules_name)
        from colltune.backends.openmpi.rules_files import installed_rules

        text, params = installed_rules(replace(req, source=Path(rules)), target)
        files.append(Planned(target, text, "Open MPI coll/tuned rules"))
        p.params |= params
    head = f"# Open MPI MCA parameters {req.stamp}"
    conf = [head] + [f"{k} = {v}" for k, v in check_env(p.params, "the parameter file").items()]
    files.append(Planned(destination(where / ("mca-params.conf" if user else
                                              "openmpi-mca-params.conf")),
                         "\n".join(conf) + "\n", "Open MPI MCA parameter file", merge=user))
    if p.prte:
        prte = [f"# PRRTE MCA parameters {req.stamp}"]
        prte += [f"{k} = {v}" for k, v in check_env(p.prte, "the parameter file").items()]
        files.append(Planned(destination((req.home / ".prte" if user else where)
                                         / ("mca-params.conf" if user else
                                            "prte-mca-params.conf")),
                             "\n".join(prte) + "\n", "PRRTE MCA parameter file", merge=user))
    env = {f"OMPI_MCA_{k}": v for k, v in p.params.items()}
    env |= {f"PRTE_MCA_{k}": v for k, v in p.prte.items()}
    return Installable(files, env, "Open MPI runtime parameters tuned by colltune")


class OpenMPIRuntime(RuntimeSupport[OpenMPI]):
    """Open MPI's runtime parameters: MCA variables, proven by MPI_T read-back or, for a
    component, by the log coll/base prints; written as an MCA parameter file."""

    def knobs(self, mpi: OpenMPI) -> list[Knob]:
        return knobs(mpi)

    def vouch(self, mpi: OpenMPI, name: str) -> Knob | None:
        return vouch(mpi, name)

    def refuse(self, mpi: OpenMPI, knobs: list[Knob], cmd: list[str]) -> None:
        refuse(mpi, knobs, cmd)

    def environ(self, mpi: OpenMPI, knobs: dict[str, Knob], setting: Setting,
                base: dict[str, str]) -> dict[str, str]:
        return environment(knobs, setting, base)

    def own(self, cmd: list[str], knobs: dict[str, Knob]) -> list[str]:
        return strip_own(cmd, knobs)

    def readback(self, mpi: OpenMPI, knob: Knob, value: str) -> set[str]:
        return readback(mpi, knob, value)

    def cpus(self, knob: Knob, value: str) -> Callable[[int], bool] | None:
        return cpus(knob, value)

    def log_env(self, knobs: list[Knob]) -> dict[str, str]:
        return coll_log.LOG_ENV if any(k.proof == "component" for k in knobs) else {}

    def logged(self, knob: Knob, value: str, log: str) -> tuple[bool, str]:
        return coll_log.logged(knob, value, log)

    def write(self, mpi: OpenMPI, knobs: dict[str, Knob], setting: Setting,
              rules: Path | None, out: Path, notes: list[str]) -> dict[str, object]:
        return write(mpi, knobs, setting, rules, out, notes)

    def read(self, path: Path) -> tuple[Setting, Path | None] | None:
        return read(path)
