"""coll/tuned's rules files as a family's files capability (Open MPI, and SMPI's ports of
its algorithms): read as Open MPI reads them (classic, version 2, and Open MPI 6's JSON),
explained, reported, decided from a store, and installed with the MCA parameters that
switch them on."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from colltune import __version__
from colltune.backends.files import (
    Arms,
    Checked,
    ExportRequest,
    FileFormats,
    Installable,
    StoredDecisions,
)
from colltune.backends.openmpi import serving
from colltune.backends.openmpi.install import (
    FIXED_DECISION_ENV,
    dynamic_env,
    find_openmpi,
    read_catalog,
    supports_rules_json,
    supports_rules_v2,
)
from colltune.backends.openmpi.tuned_rules import TUNED_FOR, section, valid_algorithms
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import MAXREQ, Catalog
from colltune.core.config import DEFAULT
from colltune.core.records import Decision
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.outfile import Planned, destination
from colltune.rules import ompi_classic as rules
from colltune.rules import ompi_json, ompi_v6, ucc_config, ucc_radix, ucc_tune
from colltune.rules.ompi_classic import COLLTYPE, NAME_BY_ID
from colltune.rules.safe import check_env

if TYPE_CHECKING:
    from colltune.store import Context


class TunedRulesFiles(FileFormats):
    """coll/tuned's dynamic rules files (classic, version 2, and Open MPI 6's JSON), read
    as Open MPI reads them."""

    def rules_arms(self, rules: Path) -> Arms:
        return {"default": FIXED_DECISION_ENV, "tuned": dynamic_env(rules=rules)}

    def installable(self, req: ExportRequest) -> Installable:
        return installable(self, req)

    def installed_rules(self, req: ExportRequest, rules_path: Path
                        ) -> tuple[str, dict[str, str]]:
        """The file as installed, and the MCA parameters that make Open MPI read it."""
        return installed_rules(req, rules_path)

    def decided_rules(self, db: Path, name: str, decided: list[StoredDecisions]) -> str:
        return decided_rules(db, name, decided)

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        # version 2 where a chosen configuration sets max_requests (classic cannot say it)
        v2 = any(d.chosen.get(MAXREQ) for d in decisions)
        rf = rules.RulesFile(version=2 if v2 else 1)
        rf.set_section(COLLTYPE[ctx.collective], section(ctx.np, decisions))
        return (rules.render(rf),
                "Open MPI " + ("rule-file-version-2" if v2 else "classic") + " format")

    def layouts_said(self, text: str) -> set[str] | None:
        found = {f"{m[2]}x{m[3]}" for m in TUNED_FOR.findall(text[:1 << 20])}
        return found or None

    def explain(self, path: Path, coll: Collective, np: int, size: int
                ) -> tuple[str, dict[str, object]]:
        """`size`: what Open MPI compares (the lookup size)."""
        text = read_text(path)
        if ompi_json.claims(text):
            return explain_json(ompi_json.parse(text, str(path)), path, coll, np, size)
        hit = rules.lookup(rules.read(path), COLLTYPE[coll.name], np, size)
        if hit is None:
            return (f"{path} has no rules for {coll.name}: Open MPI uses its fixed decision",
                    {"rule": None})
        sec, r = hit
        what = "Open MPI's fixed decision" if r.alg == 0 else f"algorithm {r.alg}"
        return (f"{coll.name}, {np} ranks, {size} B: line {r.line}: comm-size section "
                f"{sec.comsize}, rule from {r.msgsize} B -> {what}, fan in/out {r.faninout}, "
                f"segment size {r.segsize}" + (f", max requests {r.maxreq}" if r.maxreq else ""),
                {"rule": {"line": r.line, "comm_size_section": sec.comsize,
                          "msgsize": r.msgsize, "algorithm": r.alg, "faninout": r.faninout,
                          "segsize": r.segsize, "max_requests": r.maxreq}})

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        text = read_text(path)
        if (strings := ucc_tune.env_lines(text)) is not None:  # what coll/ucc hands to UCC
            said = serving.ucc_warnings(find_openmpi(mpi), {}) if mpi else []
            return check_ucc(path, strings, said)
        if ucc_config.claims_config(text):  # UCC's configuration file
            said = serving.ucc_warnings(find_openmpi(mpi), {}) if mpi else []
            return check_ucc_config(path, text, said)
        valid, allow_v2, major, catalog = None, None, None, None
        served: list[str] = []  # who serves the collectives, as this environment sets it
        if version:
            parts = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
            allow_v2, major = supports_rules_v2(parts), parts[0] if parts else None
        elif mpi:
            inst = find_openmpi(mpi)
            allow_v2, major = supports_rules_v2(inst.version_tuple), inst.version_tuple[0]
            catalog = read_catalog(inst)
            valid = valid_algorithms(catalog)
            served = serving.warnings(inst, {})
        if ompi_json.claims(text):
            js = check_json(text, path, major, catalog)
            return Checked(js.what, js.doc, js.warnings + served)
        rf = rules.read(path, valid_algs=valid, allow_v2=allow_v2)
        fmt = "rule-file-version-2" if rf.version == 2 else "classic"
        n = sum(len(s.rules) for secs in rf.collectives.values() for s in secs)
        said = layouts_said(text)
        warnings = rules.coverage_warnings(rf)  # Open MPI reads the file: not errors
        if major is not None and major >= 6:  # its reader gives sections another meaning
            warnings += ompi_v6.v6_warnings(rf)
        warnings += served
        return Checked(f"{fmt} format, {len(rf.collectives)} collective(s), {n} rule(s)"
                       + (f"; tuned for {'; '.join(said)} (the format cannot say a layout: "
                          "Open MPI applies it to any)" if said else ""), {
            "format": fmt, "tuned_for": said,
            "collectives": {(NAME_BY_ID[cid] if cid in NAME_BY_ID
                             else str(cid)): [
                {"comm_size": sec.comsize,
                 "rules": [{"msgsize": r.msgsize, "algorithm": r.alg, "faninout": r.faninout,
                            "segsize": r.segsize, "max_requests": r.maxreq}
                           for r in sec.rules]}
                for sec in secs] for cid, secs in rf.collectives.items()}}, warnings)


def check_ucc_config(path: Path, text: str, served: list[str]) -> Checked:
    """UCC's configuration file: each section's tuning strings read as UCC reads them for
    the teams the section names (check_ucc), and no two sections that one team could match
    (UCC takes either, which one is not said)."""
    try:
        secs = ucc_config.config_sections(text) or []
    except ucc_tune.UccTuneError as e:
        line = next((no for no, raw in enumerate(text.splitlines(), 1)
                     if raw.strip() == e.token), 0)
        raise FormatError(str(path), line, f"section {e.token}: {e.why}") from None
    tuning = [s for s in secs if any(ucc_tune.UCC_TUNE.fullmatch(n) or n in ucc_tune.RANGED_RADIX
                                     for _, n, _ in s.settings)]
    for i, a in enumerate(tuning):
        for b in tuning[i + 1:]:
            if a.line and b.line and a.meets(b):
                raise FormatError(str(path), b.line, f"sections [{a.header}] (line {a.line}) "
                                  f"and [{b.header}] can both match one team: UCC takes "
                                  "either, which one is not said")
    warnings, n = [], 0
    for sec in tuning:
        got = check_ucc(path, [x for x in sec.settings if ucc_tune.UCC_TUNE.fullmatch(x[1])
                               or x[1] in ucc_tune.RANGED_RADIX], [], sec.teams())
        warnings += got.warnings
        n += sum(len(ucc_tune.parse(v)) for _, name, v in sec.settings
                 if ucc_tune.UCC_TUNE.fullmatch(name))
    warnings.append("a UCC_TL_UCP_TUNE the job's environment sets is taken instead of this "
                    "file's (UCC 1.8 here)")
    return Checked(f"UCC configuration file, {len(tuning)} section(s) with tuning strings, "
                   f"{n} token(s)", {"format": "ucc-config", "sections": [
                       {"line": s.line, "keys": s.header} for s in tuning]}, warnings + served)


def check_ucc(path: Path, strings: list[tuple[int, str, str]], served: list[str],
              teams: tuple[int, int] = (1, ucc_tune.TEAM_MAX)) -> Checked:
    """An environment file of UCC tuning strings, read as UCC 1.8 reads each for a team of
    every size (rules/ucc_tune.py): a string UCC would reject for some team sizes is an
    error naming the line, the team sizes, the token and why (UCC would run its own
    choice there, saying so only in its log); what it drops quietly is a warning, as is
    `served` (whether the installation's jobs reach UCC at all)."""
    warnings: list[str] = []
    doc: list[dict[str, object]] = []
    n = 0  # tokens in all
    for no, name, value in strings:
        if name in ucc_tune.RANGED_RADIX:
            warnings += _check_radix(path, no, name, value)
            doc.append({"variable": name, "line": no, "radix": True})
            continue
        try:
            tokens = ucc_tune.parse(value)
        except ucc_tune.UccTuneError as e:
            raise FormatError(str(path), no, f"{name}: UCC rejects the whole string at "
                              f"{e.token!r}: {e.why}; every team would run UCC's own "
                              "choice") from None
        if name != ucc_tune.TL_UCP and any(t.alg is not None for t in tokens):
            warnings.append(f"{name}: its algorithms are not checked (colltune knows "
                            f"tl/ucp's, {ucc_tune.TL_UCP}); its ranges are")
            # the ranges are read the same whatever the algorithm: checked without it
            tokens = [replace(t, alg=None, score=ucc_tune.SCORE_INF if t.score is None
                              else t.score) if t.alg is not None else t for t in tokens]
        refused: list[str] = []
        dropped: dict[str, list[str]] = {}  # what UCC drops quietly -> the teams of it
        for lo, hi in ucc_tune.team_spans(tokens):
            lo, hi = max(lo, teams[0]), min(hi, teams[1])  # the teams a section names
            if lo > hi:
                continue
            said = f"{lo}" if lo == hi else f"{lo}-{'inf' if hi >= ucc_tune.TEAM_MAX else hi}"
            try:
                applied = ucc_tune.apply(tokens, lo)
            except ucc_tune.UccTuneError as e:
                refused.append(f"teams of {said} ranks at {e.token!r}: {e.why}")
                continue
            for w in applied.ignored:
                dropped.setdefault(w, []).append(said)
        warnings += [f"{name} (line {no}), teams of {', '.join(t)} ranks: {w}"
                     for w, t in dropped.items()]
        if refused:
            raise FormatError(str(path), no, f"{name}: UCC rejects the whole string for "
                              + "; ".join(refused) + " (those teams would run UCC's own "
                              "choice)")
        doc.append({"variable": name, "line": no, "tokens": len(tokens)})
        n += len(tokens)
    return Checked(f"UCC tuning strings ({', '.join(str(d['variable']) for d in doc)}), "
                   f"{n} token(s)", {"format": "ucc-tune", "strings": doc}, warnings + served)


def _check_radix(path: Path, no: int, name: str, value: str) -> list[str]:
    """A radix setting per message range, read as UCC 1.8 reads it: what it rejects (then
    tl/ucp does not load, and no collective runs on it) and a radix below 2 (no k-nomial
    tree) are errors; ranges it never reaches and a missing default are warnings."""
    try:
        radix = ucc_radix.parse_radix(value)
    except ucc_tune.UccTuneError as e:
        raise FormatError(str(path), no, f"{name}: UCC rejects the setting at {e.token!r}: "
                          f"{e.why}; tl/ucp would not load") from None
    problems = ucc_radix.radix_problems(radix)
    bad = [p for p in problems if "needs 2 or more" in p]
    if bad:
        raise FormatError(str(path), no, f"{name}: {bad[0]}")
    return [f"{name} (line {no}): {p}" for p in problems]


def layouts_said(text: str) -> list[str]:
    """What a classic file's comments say of the layout each section was tuned in."""
    return [f"{m[0]} at {m[1]} ranks: {m[2]} node(s) x {m[3]}"
            for m in TUNED_FOR.findall(text[:1 << 20])]


def check_json(text: str, path: Path, major: int | None, catalog: Catalog | None
               ) -> Checked:
    """Open MPI 6's JSON rules file, read as it reads it; 4.1 and 5.0 read no JSON: they
    would take it for a classic file and drop it."""
    if major is not None and major < 6:
        raise FormatError(str(path), 0, f"a JSON rules file: Open MPI {major} reads only the "
                                        "classic format and would drop it (JSON: 6.0 and "
                                        "later; write --rules-version 1 or 2)")
    algs = (lambda name: catalog.algorithms.get(name, {})) if catalog else None
    js = ompi_json.parse(text, str(path), algs)
    n = sum(len(c.rules) for cs in js.collectives.values() for c in cs)
    return Checked(f"JSON format (Open MPI 6), {len(js.collectives)} collective(s), {n} "
                   "rule(s)", {"format": "json", "collectives": {
                       name: [{"comm_size_min": c.size_min, "comm_size_max": c.size_max,
                               "comm_rank_distribution": c.distribution,
                               "rules": [{"msg_size_min": m.size_min,
                                          "msg_size_max": m.size_max, "algorithm": m.alg,
                                          "faninout": m.faninout, "segsize": m.segsize,
                                          "max_requests": m.reqs, "disabled": m.disabled}
                                         for m in c.rules]} for c in cs]
                       for name, cs in js.collectives.items()}}, js.warnings)


def explain_json(js: ompi_json.JsonRules, path: Path, coll: Collective, np: int, size: int
                 ) -> tuple[str, dict[str, object]]:
    """A call's rule in Open MPI 6's JSON file, for ranks on one node (a rule for another
    layout is skipped there, as Open MPI skips it)."""
    hit = ompi_json.lookup(js, coll.name, np, size)
    if hit is None:
        return (f"{path}: no rule for {coll.name} at {np} ranks on one node, {size} B: Open "
                "MPI 6 uses its fixed decision", {"rule": None})
    i, c, j, m = hit
    what = "Open MPI's fixed decision" if m.alg == 0 else f"algorithm {m.alg}"
    return (f"{coll.name}, {np} ranks on one node, {size} B: communicator rule {i + 1} "
            f"({c.size_min}-{c.size_max} ranks, {c.distribution}), message rule {j + 1} "
            f"from {m.size_min} B -> {what}, fan in/out {m.faninout}, segment size "
            f"{m.segsize}" + (f", max requests {m.reqs}" if m.reqs else ""),
            {"rule": {"comm_rule": i + 1, "msg_rule": j + 1, "algorithm": m.alg,
                      "distribution": c.distribution, "faninout": m.faninout,
                      "segsize": m.segsize, "max_requests": m.reqs}})


def installable(files: TunedRulesFiles, req: ExportRequest) -> Installable:
    """The rules file and the MCA parameter file that switches it on (the site's, to
    append to <prefix>/etc/openmpi-mca-params.conf, or the user's own)."""
    user = req.site is None
    where = req.home / ".openmpi" if req.site is None else req.site
    rules_path = destination(where / files.backend.rules_name)
    try:
        text, params = files.installed_rules(req, rules_path)
    except FormatError as e:
        raise ColltuneError(f"will not export {e}", "check it with `tune check`") from None
    conf = [f"# Open MPI MCA parameters {req.stamp}"]
    if not user:
        conf.append("# install: append to <prefix>/etc/openmpi-mca-params.conf, or set "
                    "OMPI_MCA_mca_base_param_files to this file")
    conf += [f"{k} = {v}" for k, v in check_env(params, "the MCA parameter file").items()]
    conf_name = "mca-params.conf" if user else "openmpi-mca-params.conf"
    # with --mpi: whether that installation, as this environment and its own parameter
    # files set it, runs coll/tuned where the file has rules
    said = tuple(serving.warnings(find_openmpi(req.mpi), {})) if req.mpi else ()
    return Installable(
        [Planned(rules_path, text, files.backend.rules_what),
         Planned(destination(where / conf_name), "\n".join(conf) + "\n",
                 "Open MPI MCA parameter file", merge=user, warnings=said)],
        {f"OMPI_MCA_{k}": v for k, v in params.items()},
        "Open MPI collectives tuned by colltune")

def installed_rules(req: ExportRequest, rules_path: Path) -> tuple[str, dict[str, str]]:
    """The rules file (checked and normalised, or decided from a store) and the MCA
    parameters that make Open MPI read it at `rules_path`."""
    # one read: the text checked is the text installed (a file swapped between a check
    # and a second read was installed unchecked); decided from a store, it is checked
    # like the file it becomes (a stored np of 0 wrote rules tune check rejects)
    original = req.text if req.text is not None else read_text(req.source)
    where = str(req.source)
    if ompi_json.claims(original):
        return installed_json(req, original, rules_path)
    if req.mpi is not None:  # as that Open MPI reads it: a 4.1 drops a v2 file
        mpi = find_openmpi(req.mpi)
        try:
            rules.parse(original, where, valid_algs=valid_algorithms(read_catalog(mpi)),
                        allow_v2=supports_rules_v2(mpi.version_tuple))
        except rules.RulesError as e:
            raise ColltuneError(f"will not export: {mpi.describe()} would ignore {e}",
                                f"check it with tune check {req.source} --mpi "
                                f"{mpi.prefix}") from None
    else:
        rules.parse(original, where)
    if req.text is not None:
        return original, _switch(rules_path)
    # installed as written (its comments say which MPI, host and measurements it came
    # from), stamped after the version-2 header, which must stay the first bytes
    stamp = f"# installed by colltune export, {req.stamp}\n"
    first, nl, rest = original.partition("\n")
    text = (first + nl + stamp + rest if first.strip() == rules.V2_HEADER
            else stamp + original)
    return text, _switch(rules_path)


def installed_json(req: ExportRequest, original: str, rules_path: Path
                   ) -> tuple[str, dict[str, str]]:
    """Open MPI 6's JSON file, checked as it reads it (as that Open MPI with --mpi: 4.1 and
    5.0 would drop it), installed in the form Open MPI's schema validates."""
    import json

    catalog = None
    if req.mpi is not None:
        mpi = find_openmpi(req.mpi)
        if not supports_rules_json(mpi.version_tuple):
            raise ColltuneError(f"will not export: {mpi.describe()} reads no JSON rules and "
                                "would drop this file", "export it for an Open MPI 6, or "
                                "write it with --rules-version 1 or 2")
        catalog = read_catalog(mpi)
    checked = ompi_json.parse(original, str(req.source),
                              (lambda name: catalog.algorithms.get(name, {})) if catalog
                              else None)
    # a key given twice: Open MPI (and check) read the first, Python's json the last, and
    # another tool either: whatever is installed, some reader would run what was not
    # checked. Refused, never re-read.
    twice = [w for w in checked.warnings if "twice" in w]
    if twice:
        raise ColltuneError(f"will not export {twice[0]}, and a JSON reader that keeps the "
                            "last would run another rule than the one checked",
                            "remove the duplicate key, then check and export again")
    doc = json.loads(original)  # no key twice: one meaning for every reader
    # installed as Open MPI's schema has it (a site may validate what it installs): its two
    # required keys, and none of its own (an older colltune's `colltune` object goes; the
    # modules say who installed the file and when)
    doc = {"rule_file_version": doc.get("rule_file_version", ompi_json.RULE_FILE_VERSION),
           "module": doc.get("module", "tuned"),
           **{k: v for k, v in doc.items() if k in ompi_json.TOP_KEYS}}
    return json.dumps(doc, indent=1) + "\n", _switch(rules_path)


def _switch(rules_path: Path) -> dict[str, str]:
    """The MCA parameters that make Open MPI read the rules at `rules_path`."""
    return {"coll_tuned_use_dynamic_rules": "1",
            "coll_tuned_dynamic_rules_filename": str(rules_path)}

def decided_rules(db: Path, name: str, decided: list[StoredDecisions]) -> str:
    """Every collective and communicator size the store holds, as tune writes them."""
    chosen = [d.chosen for _, ds, _ in decided for d in ds if d.chosen != DEFAULT]
    rf = rules.RulesFile(version=2 if any(c.get(MAXREQ) for c in chosen) else 1)
    rf.comments = [f"Open MPI coll/tuned dynamic rules decided from {db.resolve()} "
                   f"({name}) by colltune {__version__}"]
    for ctx, ds, when in decided:
        coll = get_collective(ctx.collective)
        rf.set_section(COLLTYPE[coll.name], section(ctx.np, ds),
                       [f"{coll.name} at {ctx.np} ranks ({ctx.nodes} x {ctx.ppn}), "
                        f"measured {when}"])
    for cid in list(rf.collectives):  # as tune writes it: nothing measured below
        rules.keep_default_below(rf, cid)
    return rules.render(rf)


