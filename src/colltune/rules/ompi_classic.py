"""Open MPI coll/tuned dynamic rules files (classic and rule-file-version-2): write, read, check.

Open MPI reads these files with %li and skips unknown characters one by one; any
error drops the whole file without a word. So the writer emits only plain
decimal numbers, one rule per line, and the reader here is stricter than Open
MPI's: it rejects everything Open MPI would drop OR misread, with a line number.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.collectives import Collective
from colltune.errors import FormatError, read_text

# The collective ids of rules files: Open MPI's COLLTYPE enum (same in 4.1, 5.0 and main)
COLLTYPE = {"allgather": 0, "allgatherv": 1, "allreduce": 2, "alltoall": 3, "alltoallv": 4,
            "barrier": 6, "bcast": 7, "exscan": 8, "gather": 9, "reduce": 11,
            "reduce_scatter": 12, "reduce_scatter_block": 13, "scan": 14, "scatter": 15}
NAME_BY_ID = {i: n for n, i in COLLTYPE.items()}
# the enum also has these; coll/tuned has no dynamic decision for them
OMPI_UNTUNED_IDS = {5: "alltoallw", 10: "gatherv", 16: "neighbor_allgather"}
OMPI_MAX_COLLECTIVES = 22

# how coll/tuned turns a call into the size it compares with a rule's msgsize: the block
# (dtsize * count), the total (times the comm size: reduce_scatter's sum of recvcounts;
# allgatherv's total over the comm size is the block for equal blocks), dtsize * p (scan,
# exscan: the count is ignored) or always 0 (alltoallv, barrier)
_TOTAL = {"allgather", "alltoall", "gather", "reduce_scatter", "reduce_scatter_block",
          "scatter"}
_ZERO = {"alltoallv", "barrier"}
_DTSIZE_TIMES_P = {"scan", "exscan"}


def lookup_size(coll: Collective, size: int, np: int) -> int:
    """The message size Open MPI compares against MSGSIZE for a block of `size` bytes."""
    if coll.name in _TOTAL:
        return size * np
    if coll.name in _DTSIZE_TIMES_P:
        return coll.granularity * np
    return 0 if coll.name in _ZERO else size


def block_for_lookup(coll: Collective, lookup: int, np: int) -> int:
    """A per-rank block whose lookup size is at least `lookup` (inverse of lookup_size)."""
    block = -(-lookup // np) if coll.name in _TOTAL else lookup
    g = coll.granularity
    return max(g, -(-block // g) * g)

# Open MPI consumes this with fscanf("rule-file-version-%d") before anything else:
# no brackets, and nothing (not even a comment or blank) may precede it.
V2_HEADER = "rule-file-version-2"


@dataclass(slots=True)  # slots: a 4 MB file holds hundreds of thousands of them
class MsgRule:
    msgsize: int
    alg: int
    faninout: int = 0
    segsize: int = 0
    maxreq: int | None = None
    line: int = 0  # where the reader found it (0 when built in memory)


@dataclass(slots=True)
class CommRule:
    comsize: int
    rules: list[MsgRule] = field(default_factory=list)
    line: int = 0


@dataclass
class RulesFile:
    version: int = 1  # 1 = classic, 2 = rule-file-version-2
    collectives: dict[int, list[CommRule]] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    notes: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # (coll, comsize)

    def set_section(self, coll_id: int, section: CommRule, notes: list[str] | None = None) -> None:
        """Replaces (or adds) one comm-size section, keeping the others sorted."""
        secs = [s for s in self.collectives.get(coll_id, []) if s.comsize != section.comsize]
        secs.append(section)
        self.collectives[coll_id] = sorted(secs, key=lambda s: s.comsize)
        if notes is not None:
            self.notes[(coll_id, section.comsize)] = notes


def served(sections: list[CommRule]) -> list[tuple[CommRule, int, int | None]]:
    """Each section with the communicator sizes it decides: Open MPI takes the last section
    whose COMSIZE is at most the communicator size, and the first serves smaller ones too
    (None: no upper end)."""
    out: list[tuple[CommRule, int, int | None]] = []
    for i, sec in enumerate(sections):
        lo = 1 if i == 0 else sec.comsize
        hi = sections[i + 1].comsize - 1 if i + 1 < len(sections) else None
        out.append((sec, lo, hi))
    return out


def agreed(below: CommRule, above: CommRule, comsize: int) -> CommRule:
    """A section for the communicator sizes between two measured ones (issue 84, item 4):
    at each message size what both sections run where they agree (algorithm, fan-in/out,
    segment, requests), the library's own decision (algorithm 0) where they part. A job
    between two sizes was measured at neither; where the two choices differ, which serves
    it is not known (bcast on the fat tree: 16 ranks' choice ran 3.3 times slower than the
    default at 28 ranks, where 32's kept the default)."""
    def same(a: MsgRule, b: MsgRule) -> bool:  # the library's own: its parameters unused
        return a.alg == b.alg == 0 or (a.alg, a.faninout, a.segsize, a.maxreq) == (
            b.alg, b.faninout, b.segsize, b.maxreq)
    sec = CommRule(comsize)
    starts = sorted({0} | {r.msgsize for r in below.rules} | {r.msgsize for r in above.rules})
    for size in starts:
        a, b = rule_at(below, size), rule_at(above, size)
        rule = (MsgRule(size, a.alg, a.faninout, a.segsize, a.maxreq)
                if same(a, b) and a.alg else MsgRule(size, 0))
        if not sec.rules or not same(sec.rules[-1], rule):
            sec.rules.append(rule)
    return sec


def keep_default_below(rf: RulesFile, coll_id: int) -> bool:
    """Add a leading all-default section where the first section is above 2 ranks: without
    it that section decides every smaller communicator, where nothing was measured."""
    secs = rf.collectives.get(coll_id, [])
    if not secs or secs[0].comsize <= 2:
        return False
    rf.set_section(coll_id, CommRule(1, [MsgRule(0, 0)]),
                   [f"communicators of fewer than {secs[0].comsize} ranks: nothing measured "
                    "there, so the library's own decision (algorithm 0)"])
    return True


def coverage_warnings(rf: RulesFile) -> list[str]:
    """Sections that decide communicator sizes far from the one they were written for
    (warnings, not errors: Open MPI reads the file)."""
    out = []
    for cid, secs in sorted(rf.collectives.items()):
        for sec, lo, hi in served(secs):
            if all(r.alg == 0 for r in sec.rules):
                continue
            if lo < sec.comsize and sec.comsize > 2:
                out.append(f"collective {cid}: the section for {sec.comsize} ranks also decides "
                           f"communicators of {lo} to {sec.comsize - 1} ranks (it is the first)")
            if hi is not None and hi > 2 * sec.comsize:
                out.append(f"collective {cid}: the section for {sec.comsize} ranks decides up "
                           f"to {hi} ranks, more than twice its size")
    return out


class RulesError(FormatError):
    """A rules file Open MPI would drop or misread."""


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _comment(text: str) -> str:
    return "# " + text.replace("\n", " ").replace("\r", " ")


def render(rf: RulesFile) -> str:
    out: list[str] = []
    if rf.version == 2:
        out.append(V2_HEADER)  # must be the very first bytes of the file
    out += [_comment(c) for c in rf.comments]
    out.append(f"{len(rf.collectives)}  # number of collectives")
    for cid in sorted(rf.collectives):
        name = NAME_BY_ID.get(cid, f"id {cid}")
        secs = rf.collectives[cid]
        out.append(f"{cid}  # {name}")
        out.append(f"{len(secs)}  # number of communicator sizes")
        for sec in secs:
            for note in rf.notes.get((cid, sec.comsize), []):
                out.append(_comment(note))
            out.append(f"{sec.comsize}  # communicator size")
            out.append(f"{len(sec.rules)}  # number of message sizes")
            for r in sec.rules:
                cols = [r.msgsize, r.alg, r.faninout, r.segsize]
                if rf.version == 2:
                    cols.append(r.maxreq or 0)
                out.append(" ".join(str(int(c)) for c in cols))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Reading (strict)
# ---------------------------------------------------------------------------

_NUM = re.compile(r"[0-9]+")
# Open MPI reads every number as a long, then keeps counts, communicator sizes, algorithms,
# fan in/out and max requests in ints: a larger value wraps into another one
LONG_MAX, INT_MAX = 2**63 - 1, 2**31 - 1


@dataclass(slots=True)
class _Tok:
    value: int
    line: int
    col: int  # its place among the numbers of its line


@dataclass
class _Tokens:
    """The file's numbers in order, each with its line and its place in that line, kept in
    arrays (a 4 MB file took 400 MB as lists of token objects), and how many numbers each
    line holds."""
    values: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))
    cols: array[int] = field(default_factory=lambda: array("q"))
    counts: array[int] = field(default_factory=lambda: array("q"))
    said: dict[int, str] = field(default_factory=dict)  # whole-line comments, by line

    def comments_above(self, line: int) -> list[str]:
        """The whole-line comments just above `line`, in order, without their '# ': what
        the writer said of what follows (a merge writes it again)."""
        found, i = [], line - 1
        while i in self.said:
            found.append(self.said[i])
            i -= 1
        return found[::-1]

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> _Tok:
        return _Tok(self.values[i], self.lines[i], self.cols[i])


def _tokens(text: str, path: str) -> tuple[_Tokens, bool]:
    """The numbers of the file, and whether it starts with the v2 header."""
    has_header = text.startswith(V2_HEADER) and not text[len(V2_HEADER):][:1].isalnum()
    body = text[len(V2_HEADER):] if has_header else text
    flat = _Tokens()
    for i, raw in enumerate(body.split("\n"), start=1):
        content, hashed, comment = raw.partition("#")
        words = content.split()
        flat.counts.append(len(words))
        if hashed and not words:
            flat.said[i] = comment[1:] if comment.startswith(" ") else comment
        for col, word in enumerate(words):
            if word.strip("[]") == V2_HEADER and word != V2_HEADER:
                raise RulesError(path, i, f"'{word}': the header is '{V2_HEADER}' without "
                                          "brackets; Open MPI reads the bracketed form as "
                                          "text and the 2 in it as the collective count")
            if word == V2_HEADER:
                raise RulesError(path, i, f"'{V2_HEADER}' must be the very first bytes of "
                                          "the file; anywhere else Open MPI reads it as text")
            if not _NUM.fullmatch(word):
                raise RulesError(path, i, f"unexpected text '{word[:30]}': Open MPI skips it "
                                          "character by character and would read any digits "
                                          "in it as numbers")
            if len(word) > 1 and word[0] == "0":
                raise RulesError(path, i, f"zero-padded number '{word}': Open MPI reads a "
                                          "leading 0 as octal")
            if len(word) > 19 or int(word) > LONG_MAX:  # 19 digits: no int() of 300,000
                raise RulesError(path, i, f"{word[:30]}: larger than Open MPI's long "
                                          f"({LONG_MAX}); it reads something else")
            flat.values.append(int(word))
            flat.lines.append(i)
            flat.cols.append(col)
    return flat, has_header


def parse(text: str, path: str = "<rules>", valid_algs: Callable[[int], set[int]] | None = None,  # noqa: C901, PLR0915 (a token reader, in the order Open MPI's reads)
          allow_v2: bool | None = None) -> RulesFile:
    """Reads a rules file the way Open MPI does and rejects what it would drop or misread.

    `valid_algs(coll_id)` returns the algorithm ids the installed library accepts;
    `allow_v2` False rejects the version-2 header (Open MPI before 4.1.8 / 5.0.7)."""
    if "\x00" in text:
        raise RulesError(path, 0, "binary data (NUL byte) in a rules file")
    flat, has_header = _tokens(text, path)
    counts = flat.counts
    if has_header and allow_v2 is False:
        raise RulesError(path, 1, f"'{V2_HEADER}' is not understood by this Open MPI "
                                  "(needs 4.1.8+ or 5.0.7+): it drops the whole file")
    version = 2 if has_header else 1
    pos = 0

    def take(what: str, is_int: bool = True) -> _Tok:
        nonlocal pos
        if pos >= len(flat):
            last = flat[-1].line if flat else 1
            raise RulesError(path, last, f"file ends where {what} was expected (truncated?)")
        tok = flat[pos]
        pos += 1
        if is_int and tok.value > INT_MAX:
            raise RulesError(path, tok.line, f"{what} {tok.value}: Open MPI keeps it in an "
                                             f"int (at most {INT_MAX}) and reads another "
                                             "value")
        return tok

    rf = RulesFile(version=version)
    ncol = take("the number of collectives")
    rf.comments = flat.comments_above(ncol.line)
    if ncol.value > OMPI_MAX_COLLECTIVES:
        raise RulesError(path, ncol.line, f"{ncol.value} collectives: Open MPI accepts at "
                                          f"most {OMPI_MAX_COLLECTIVES}")
    for _ in range(ncol.value):
        cid = take("a collective id")
        if cid.value in OMPI_UNTUNED_IDS or cid.value not in NAME_BY_ID:
            what = OMPI_UNTUNED_IDS.get(cid.value, "no collective")
            raise RulesError(path, cid.line, f"collective id {cid.value} ({what}) has no "
                                             "dynamic rules in coll/tuned")
        if cid.value in rf.collectives:
            raise RulesError(path, cid.line, f"collective id {cid.value} appears twice")
        ncs = take("the number of communicator sizes")
        secs: list[CommRule] = []
        for _ in range(ncs.value):
            cs = take("a communicator size")
            if cs.value == 0:
                raise RulesError(path, cs.line, "communicator size 0: a communicator has at "
                                                "least 1 rank")
            if secs and cs.value <= secs[-1].comsize:
                raise RulesError(path, cs.line, f"communicator size {cs.value} after "
                                                f"{secs[-1].comsize}: sizes must ascend or "
                                                "Open MPI's lookup silently misbehaves")
            nms = take("the number of message sizes")
            if nms.value == 0:
                raise RulesError(path, nms.line, "a communicator size with no message rules")
            sec = CommRule(cs.value, line=cs.line)
            notes = flat.comments_above(cs.line)
            if notes:
                rf.notes[(cid.value, cs.value)] = notes
            for k in range(nms.value):
                ms = take("a message size", is_int=False)
                if ms.col != 0:
                    raise RulesError(path, ms.line, "a rule must start its own line "
                                                    "(message size, algorithm, fan in/out, "
                                                    "segment size)")
                alg = take("an algorithm id")
                fan = take("a fan in/out")
                seg = take("a segment size", is_int=False)
                if not (alg.line == fan.line == seg.line == ms.line):
                    raise RulesError(path, ms.line, "a rule's four numbers must be on one "
                                                    "line")
                extra = counts[ms.line - 1] - 4
                # version 2: the column is optional and absent means 0 (what the writer
                # writes), so a file reads back the same whichever way it was written
                maxreq = 0 if version == 2 else None
                if version == 2 and extra:
                    maxreq = take("max requests").value
                    extra -= 1
                if extra > 0:
                    n = counts[ms.line - 1]
                    raise RulesError(path, ms.line, f"{n} numbers on a rule line: "
                                                    "Open MPI would read the extra ones as the "
                                                    "next rule" + ("" if version == 2 else
                                                                   " (max_requests needs the "
                                                                   "version-2 header)"))
                if k == 0 and ms.value != 0:
                    raise RulesError(path, ms.line, f"first rule has message size {ms.value}: "
                                                    "Open MPI requires 0 and drops the file")
                if sec.rules and ms.value <= sec.rules[-1].msgsize:
                    raise RulesError(path, ms.line, f"message size {ms.value} after "
                                                    f"{sec.rules[-1].msgsize}: sizes must "
                                                    "ascend")
                if valid_algs is not None and alg.value != 0:
                    ok = valid_algs(cid.value)
                    if ok and alg.value not in ok:
                        cname = NAME_BY_ID[cid.value]
                        valid = ", ".join(map(str, sorted(ok)))
                        raise RulesError(path, alg.line, f"algorithm {alg.value} does not exist "
                                                         f"for {cname} in this Open MPI (valid: "
                                                         f"{valid}; 0 = fixed decision)")
                sec.rules.append(MsgRule(ms.value, alg.value, fan.value, seg.value, maxreq,
                                         line=ms.line))
            secs.append(sec)
        rf.collectives[cid.value] = secs
    if pos < len(flat):
        raise RulesError(path, flat[pos].line, "numbers after the last collective: Open MPI "
                                                  "ignores them (wrong collective count?)")
    return rf


def read(path: str | Path, **kw: object) -> RulesFile:
    try:
        text = read_text(path)
    except FormatError as e:
        raise RulesError(e.path, e.line, e.reason) from None
    return parse(text, str(path), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Lookup, as coll/tuned does it
# ---------------------------------------------------------------------------


def lookup(rf: RulesFile, coll_id: int, comm_size: int, msg_size: int
           ) -> tuple[CommRule, MsgRule] | None:
    """The rule Open MPI applies: the last comm-size section with COMSIZE <= comm_size
    (the first also serves smaller communicators), then the last rule with MSGSIZE <= size."""
    secs = rf.collectives.get(coll_id)
    if not secs:
        return None
    chosen = secs[0]
    for s in secs:
        if s.comsize <= comm_size:
            chosen = s
    return chosen, rule_at(chosen, msg_size)


def rule_at(sec: CommRule, msg_size: int) -> MsgRule:
    """The rule of a section Open MPI applies at a message size: the last with MSGSIZE <=
    it (the first also serves smaller sizes)."""
    rule = sec.rules[0]
    for r in sec.rules:
        if r.msgsize <= msg_size:
            rule = r
    return rule
