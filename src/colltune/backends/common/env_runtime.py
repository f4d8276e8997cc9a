"""Runtime parameters of families set through environment variables that their launcher
passes to every rank (MPICH, MVAPICH2): the launch environment, and the profile (`export
NAME=VALUE`) tune runtime writes, reads and tune export installs."""

from __future__ import annotations

from pathlib import Path

from colltune.backends.base import provenance, write_file
from colltune.backends.files import Installable
from colltune.core.runtime import Allowed, Knob, Setting
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.outfile import Planned, destination
from colltune.rules import env_profile as prof
from colltune.rules.safe import check_env


def environment(ks: dict[str, Knob], setting: Setting, base: dict[str, str]
                ) -> dict[str, str]:
    """The launcher passes its whole environment to every rank: the tuned variables are set there
    (inherited values removed, the library's defaults left unset)."""
    env = {k: v for k, v in base.items() if k not in ks}
    env |= {n: v for n, v in setting.items() if v != ks[n].default}
    return env


def write(mpi: Installation, ks: dict[str, Knob], setting: Setting, out: Path,
          notes: list[str], fam: str) -> dict[str, object]:
    """The profile of `setting` (the values that differ from the library's defaults), its
    first line naming the family `fam` whose backend reads it back."""
    p = prof.EnvProfile({n: v for n, v in setting.items() if v != ks[n].default},
                        [provenance(mpi), *notes, "use: source this file before mpiexec"])
    write_file(out, prof.render(p, fam, f"the {mpi.name} profile"), "--out")
    return {"what": f"{mpi.name} runtime profile", "also": None, "use": f"source {out}",
            "notes": [] if p.variables else ["no parameter set: the defaults were kept"]}


def claims(text: str, fam: str) -> bool:
    return prof.claims(text, fam)


def _allowed_only(p: prof.EnvProfile, fam: str, may_set: Allowed) -> None:
    """EnvProfileError naming what a runtime profile may not set: it runs in every user's
    session (LD_PRELOAD, PATH, a launcher's or loader's variable would run anything)."""
    bad = may_set.refused(list(p.variables))
    if bad:
        raise prof.EnvProfileError(
            f"it sets {', '.join(b[:60] for b in bad[:5])}: a {fam} runtime profile may set "
            f"only {fam}'s own tuning variables ({', '.join(may_set.prefixes)}...)")


def read(path: Path, fam: str, may_set: Allowed) -> tuple[Setting, Path | None] | None:
    """The setting of a runtime profile of family `fam` (None: not one); `may_set`: the
    family's allowlist (its runtime module's MAY_SET)."""
    text = read_text(path)
    if not prof.claims(text, fam):
        return None
    try:
        p = prof.parse(text)
        _allowed_only(p, fam, may_set)
        return p.variables, None
    except prof.EnvProfileError as e:
        raise FormatError(str(path), 0, str(e)) from None


def installable(source: Path, stamp: str, where: Path, family: str,
                may_set: Allowed) -> Installable:
    try:
        p = prof.parse(read_text(source))
        _allowed_only(p, family, may_set)
    except prof.EnvProfileError as e:
        raise ColltuneError(f"will not export {source}: {e}",
                            "export the file tune runtime wrote, unedited") from None
    env = check_env(p.variables, f"the {family} profile")
    p.comments = [f"{family} runtime parameters tuned by colltune: {stamp}",
                  "use: source this file before mpiexec (or load the module)"]
    name = f"colltune-{family.lower()}-runtime.sh"
    return Installable([Planned(destination(where / name), prof.render(p, family),
                                f"{family} runtime profile")], env,
                       f"{family} runtime parameters tuned by colltune")


def refuse_overrides(cmd: list[str], ks: list[Knob]) -> None:
    """A command line that sets a searched variable for the ranks (Hydra's -genv/-env, or
    NAME=VALUE words of mpirun_rsh) would win over every launch's value."""
    names = {k.name for k in ks}
    for i, a in enumerate(cmd):
        name = cmd[i + 1] if a in ("-genv", "-env") and i + 1 < len(cmd) else a.split("=")[0]
        if name in names:
            raise ColltuneError(f"the command sets {name} itself ({a}), which tune runtime "
                                "searches", f"remove {name} from the command")
