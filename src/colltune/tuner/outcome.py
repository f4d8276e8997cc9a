"""What a tune's file changes, said in one sentence from its decisions: the last line a user
reads, and `changes` in the summary JSON."""

from __future__ import annotations

from colltune.core.config import DEFAULT
from colltune.core.records import Decision
from colltune.host import cores
from colltune.slots import Placement

Decisions = dict[str, dict[int, list[Decision]]]


def format_size(n: int) -> str:
    """8 B, 16 KiB, 1 MiB: a size as the tables above print it, in words."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _sizes(ds: list[Decision]) -> str:
    sizes = [d.size for d in ds]
    if len(sizes) <= 3:
        return ", ".join(format_size(s) for s in sizes)
    return f"{format_size(sizes[0])} .. {format_size(sizes[-1])}"


def crowded(placements: list[Placement]) -> str:
    """Why timings here are noisy, if they are: more ranks than cores on one node."""
    n = cores()
    worst = max((p.ppn for p in placements if p.nodes == 1 and not p.hostfile), default=0)
    if n and worst > n:
        return f"with {worst} ranks on {n} cores, timings are dominated by scheduling"
    return ""


def changes(decisions: Decisions, summary: dict[str, object], placements: list[Placement]
            ) -> dict[str, object]:
    """The sizes the written file changes, in a sentence. A session whose file could not
    carry confirmed wins says how many per collective in `summary["not_carried"]`."""
    got = summary.get("not_carried")
    dropped = {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else {}
    noisy = crowded(placements)
    per: list[str] = []
    changed = confirmed = tried = unsaid = unconfirmed = 0
    for name, per_np in decisions.items():
        for np, ds in per_np.items():
            sized = [d for d in ds if d.size >= 0 and not d.predicted]
            # "tuned?": written, never put to fresh launches (--confirm-rounds 0, --from-db)
            wins = [d for d in sized if d.chosen != DEFAULT and d.verdict in ("tuned", "tuned?")]
            unconfirmed += sum(d.verdict == "tuned?" for d in wins)
            tried += sum(bool(d.confirmations) for d in sized)
            unsaid += sum(d.verdict == "unexpressed" for d in sized)
            confirmed += len(wins) - sum(d.verdict == "tuned?" for d in wins)
            if wins and name not in dropped:
                changed += len(wins)
                per.append(f"{name} at {np} ranks, {len(wins)} size(s) ({_sizes(wins)})")
    lost = sum(dropped.values())
    if changed:
        sentence = f"the file changes {changed} size(s): " + "; ".join(per)
    elif confirmed or unsaid:
        what = (f"{confirmed} confirmed win(s)" if confirmed else
                f"{unsaid} win(s) the sweep found (so none was put to fresh launches)")
        sentence = ("the file keeps the library's choice at every size: its format cannot "
                    f"carry the {what} (see the notes above)")
    elif tried:
        sentence = ("the file keeps the library's choice at every size: no candidate was "
                    "confirmed faster in fresh launches")
    else:
        sentence = ("the file keeps the library's choice at every size: nothing beat it "
                    "significantly in the sweep")
    if unconfirmed and changed:
        sentence += f"; {unconfirmed} of them not confirmed in fresh launches"
    if lost and changed:
        sentence += f"; {lost} confirmed win(s) not carried (see the notes above)"
    if noisy and not changed:
        sentence += f"; {noisy}"
    return {"sizes_changed": changed, "confirmed": confirmed, "unconfirmed": unconfirmed,
            "not_carried": lost,
            "unexpressed": unsaid, "sentence": sentence}
