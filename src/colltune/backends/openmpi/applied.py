"""Prove from Open MPI's own traffic (pml monitoring) what a rules file makes it run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from colltune import jobdir, private
from colltune.backends.openmpi.install import (
    FIXED_DECISION_ENV,
    OpenMPI,
    dynamic_env,
    forcing_vars,
    launch_command,
    launch_env,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog
from colltune.core.config import DEFAULT, Config
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.kernel.traffic import Traffic, internal_traffic, monitoring_mca, read_monitoring
from colltune.rules import ompi_classic as rules
from colltune.rules import ompi_json
from colltune.slots import place

REPS = 6


def traffic(mpi: OpenMPI, coll: Collective, np: int, size: int, env: dict[str, str],
            assign: dict[str, int] | None = None, group: int = 0) -> Traffic:
    """Collective-internal traffic of a fixed number of calls of `coll` at `size`, with
    `env` at launch and `assign` written through MPI_T by the kernel (on communicators of
    `group` consecutive ranks, all at once, where `group` is given)."""
    exe = build_kernel(mpi)
    placement = place(np, env={})
    # no communicator dup unless variables are written: its context-id agreement adds
    # small messages whose pairs vary between runs, and these patterns are compared
    plan = KernelPlan(coll.name, [KernelConfig(0, assign or {}, group)], [(0, size)],
                      Repetitions(warmup=0, min_reps=REPS, max_reps=REPS), dup_always=False,
                      datatype=coll.datatype)
    with jobdir.temporary(prefix="colltune-mon-") as tmp:
        cmd = launch_command(mpi, placement, monitoring_mca(Path(tmp)))
        out = run_kernel(cmd, exe, plan, launch_env(env), point_timeout=120, runs_on=mpi)
        if out.status != "ok" or not out.results or out.results[0].status != "ok":
            raise ColltuneError(f"traffic run of {coll.name} failed: {out.status} {out.message}",
                                "run the kernel by hand with the same settings")
        try:
            return internal_traffic(read_monitoring(Path(tmp), np))
        except FileNotFoundError as e:
            raise ColltuneError(str(e), "this Open MPI may lack the monitoring component") from e


def under_rules(mpi: OpenMPI, coll: Collective, np: int, size: int, rules: Path) -> Traffic:
    return traffic(mpi, coll, np, size, dynamic_env(rules=rules))


def forced(mpi: OpenMPI, coll: Collective, np: int, size: int, cfg: Config,
           catalog: Catalog) -> Traffic:
    """Traffic with `cfg` forced through MCA variables (algorithm 0: no dynamic rules)."""
    if cfg.algorithm == 0:
        return traffic(mpi, coll, np, size, FIXED_DECISION_ENV)
    return traffic(mpi, coll, np, size, dynamic_env(forcing_vars(
        coll.name, cfg.algorithm, cfg.get(SEG), cfg.get(FAN), cfg.get(MAXREQ), catalog)))


def mpit_takes_effect(mpi: OpenMPI, catalog: Catalog) -> bool | None:
    """Proves, once per installation, that an algorithm written through MPI_T is the one
    that runs: a forced linear and a forced binomial reduce must leave different traffic
    in pml monitoring. None when monitoring is unavailable (nothing proven either way)."""
    marker = private.cache("mpit-verified") / (mpi.key.replace("/", "_") + ".json")
    if marker.exists():
        try:
            return bool(json.loads(marker.read_text())["ok"])
        except (ValueError, KeyError):
            pass
    names = {v: k for k, v in catalog.algorithms.get("reduce", {}).items()}
    if "linear" not in names or "binomial" not in names:
        return None
    size = 65536
    patterns = {}
    for name in ("linear", "binomial"):
        try:
            seen = traffic(mpi, get_collective("reduce"), 4, size, dynamic_env(),
                           assign=forcing_vars("reduce", names[name], 0, 0, 0, catalog))
        except ColltuneError:
            return None  # no monitoring, or the probe itself failed: nothing proven
        patterns[name] = {pair for pair, (nbytes, _) in seen.items() if nbytes >= size}
    ok = (3, 0) in patterns["linear"] and (3, 2) in patterns["binomial"] and \
        (3, 2) not in patterns["linear"]
    private.write(marker, json.dumps({"ok": ok, "patterns": {k: sorted(v) for k, v in
                                                            patterns.items()}}))
    return ok


def rule_at(rf: rules.RulesFile, coll: Collective, np: int, size: int) -> Config | None:
    hit = rules.lookup(rf, rules.COLLTYPE[coll.name], np, rules.lookup_size(coll, size, np))
    if hit is None:
        return None
    r = hit[1]
    return Config.of(r.alg, {SEG: r.segsize, FAN: r.faninout, MAXREQ: r.maxreq or 0})


def rule_at_json(js: ompi_json.JsonRules, coll: Collective, np: int, size: int,
                 nodes: int, ppn: int) -> Config | None:
    """What Open MPI 6's JSON file says for a block of `size` bytes on `np` ranks laid out
    as `nodes` x `ppn` (None: its fixed decision)."""
    hit = ompi_json.lookup(js, coll.name, np, rules.lookup_size(coll, size, np), nodes, ppn)
    if hit is None:
        return None
    m = hit[3]
    return Config.of(m.alg, {SEG: m.segsize, FAN: m.faninout, MAXREQ: m.reqs})


def applied_check(mpi: OpenMPI, catalog: Catalog, coll: Collective, np: int, sizes: list[int],
                  says: Callable[[Collective, int, int], Config | None], path: Path
                  ) -> tuple[str, str]:
    """Compare Open MPI's traffic under the file with the traffic of the configuration the
    file names (`says(coll, np, size)`), at the first size where it names a non-default
    one."""
    probe = next(((s, c) for s in sizes if (c := says(coll, np, s)) and c != DEFAULT), None)
    if probe is None:
        return "default everywhere", "the file keeps Open MPI's own decision at every size"
    size, cfg = probe
    label = cfg.label(catalog, coll.name)
    got = under_rules(mpi, coll, np, size, path)
    want = forced(mpi, coll, np, size, cfg, catalog)
    default = forced(mpi, coll, np, size, DEFAULT, catalog)
    if want == default:
        return "unproven", (f"at {size} B, {label} and the default leave the same traffic, "
                            "so traffic cannot tell whether the file was read")
    if got == want:
        return "applied", f"at {size} B Open MPI ran {label}, as the file says (pml traffic)"
    if got == default:
        return "not applied", (f"at {size} B Open MPI ran its default, not {label}: it "
                               "ignored the file")
    return "not applied", f"at {size} B the traffic matches neither {label} nor the default"
