"""Turn per-size decisions on MPICH into its tuning file (csel JSON) and environment profile."""

from __future__ import annotations

from pathlib import Path

from colltune.backends.mpich import KNOBS, MPICHCatalog
from colltune.core.records import Decision
from colltune.rules import mpich_csel, mpich_env
from colltune.rules.mpich_csel import SIZE_KEY, Ranges, Tuning, lookup, ranges_from_starts
from colltune.tuner.decide import boundaries


def env_path(out: Path) -> Path:
    """The environment profile beside the tuning file: x.json -> x.env."""
    return out.with_suffix(".env") if out.suffix == ".json" else out.with_name(out.name + ".env")


def ranges(coll: str, catalog: MPICHCatalog, np: int, ds: list[Decision]) -> Ranges:
    """One comm size's decisions as MPICH size ranges (None: MPICH's own choice kept)."""
    containers = catalog.container or {}

    def cont(d: Decision) -> str | None:
        c = d.chosen
        if not c.algorithm:
            return None
        return mpich_csel.choice(containers[coll][c.algorithm],
                                 catalog.leaf_overrides(coll, c.algorithm, c.segsize, c.fanout))

    sized = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    if SIZE_KEY.get(coll) is None or not sized:
        chosen = {cont(d) for d in ds}
        # no size to compare: one algorithm if every size agreed, else MPICH's own
        return Ranges([(None, chosen.pop() if len(chosen) == 1 else None)])
    starts = boundaries([lookup(coll, d.size, np) for d in sized])
    return ranges_from_starts([(s, cont(d)) for s, d in zip(starts, sized, strict=True)])


def tuning(decisions: dict[str, dict[int, list[Decision]]], catalog: MPICHCatalog) -> Tuning:
    """The collectives where some size left MPICH's own choice (the others stay MPICH's,
    device path included)."""
    out: Tuning = {}
    for coll, per_np in decisions.items():
        if any(d.chosen.algorithm for ds in per_np.values() for d in ds):
            out[coll] = {np: ranges(coll, catalog, np, ds) for np, ds in per_np.items()}
    return out


def merged_table(existing: Path | None, builtin: dict, new: Tuning,
                 params: mpich_csel.Params | None = None) -> tuple[str, Tuning]:
    """The tuning file text: an existing file (ours) keeps the collectives not tuned now;
    MPICH's own subtrees always come from the library's table."""
    old: Tuning = mpich_csel.parse(existing.read_text(), params) \
        if existing and existing.exists() else {}
    for coll, per_np in new.items():
        old.setdefault(coll, {}).update(per_np)
    return mpich_csel.render(builtin, old, params), old


def single_algorithms(t: Tuning, catalog: MPICHCatalog
                      ) -> tuple[dict[str, str], dict[str, str]]:
    """Collectives tuned to one choice at every size and comm size: the algorithm by
    variable value name, and the variables of the radix / chunk size it was tuned with."""
    ids = {c: {cont: i for i, cont in m.items()} for c, m in (catalog.container or {}).items()}
    names, knobs = {}, {}
    for coll, per_np in t.items():
        algs = {a for r in per_np.values() for _, a in r.limits}
        if len(algs) != 1 or (a := algs.pop()) is None:
            continue
        cont, overrides = mpich_csel.split_choice(a)
        alg = ids.get(coll, {}).get(cont)
        if alg is None:
            continue
        variables = (catalog.knobs or {}).get(coll, {}).get(alg, {})
        if any(KNOBS.get(key) not in variables for key in overrides):
            continue  # a leaf parameter no variable sets: the tuning file alone says it
        names[coll] = catalog.algorithms[coll][alg]
        knobs.update({variables[KNOBS[key]]: value for key, value in overrides.items()})
    return names, knobs


def env_profile(t: Tuning, catalog: MPICHCatalog, tuning_file: Path, comments: list[str]
                ) -> str:
    names, knobs = single_algorithms(t, catalog)
    return mpich_env.render(mpich_env.EnvProfile(
        collectives=sorted(t), tuning_file=tuning_file.resolve(), algorithms=names,
        comments=comments, knobs=knobs))


def tentative(path: Path, builtin: dict, coll: str, np: int, r: Ranges,
              params: mpich_csel.Params | None = None) -> dict[str, str]:
    """Writes a tuning file for one collective at one comm size; the environment that
    applies it (the confirmation's "tuned" arm)."""
    path.write_text(mpich_csel.render(builtin, {coll: {np: r}}, params))
    return {mpich_env.device_var(coll): "0", mpich_env.JSON_VAR: str(path.resolve())}



