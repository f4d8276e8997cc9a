"""Run the modelbench kernel (ping-pong, overheads, message trains, local reduction) on a
real MPI and read what it printed."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from colltune.backends.registry import launch
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import die_with_parent, kill_session, start_timeout
from colltune.slots import Placement


@dataclass(frozen=True)
class P2P:
    peer: int
    same_node: bool
    size: int
    pingpong: float  # half a round trip, seconds
    send_overhead: float  # inside MPI_Send, receive already posted
    recv_overhead: float  # inside MPI_Recv, message already there
    gap: float  # per message of a back-to-back train


@dataclass
class ProbeData:
    np: int
    host: str
    p2p: list[P2P] = field(default_factory=list)
    reduce_local: list[tuple[int, float]] = field(default_factory=list)  # (bytes, seconds)
    # every rank busy at once (pairs ping-ponging, all reducing): (bytes, seconds)
    pingpong_loaded: list[tuple[int, float]] = field(default_factory=list)
    exchange: list[tuple[int, float]] = field(default_factory=list)  # ring Sendrecv step
    reduce_local_loaded: list[tuple[int, float]] = field(default_factory=list)

    def pairs(self, same_node: bool | None = None) -> list[P2P]:
        """Per size, the median over peers (of one kind: inside a node or across)."""
        rows = [r for r in self.p2p if same_node is None or r.same_node == same_node]
        out = []
        for size in sorted({r.size for r in rows}):
            here = [r for r in rows if r.size == size]

            def med(attr: str, here: list[P2P] = here) -> float:
                xs = sorted(getattr(r, attr) for r in here)
                return xs[len(xs) // 2]

            out.append(P2P(-1, here[0].same_node, size, med("pingpong"), med("send_overhead"),
                           med("recv_overhead"), med("gap")))
        return out

    def as_json(self) -> dict[str, object]:
        return {"np": self.np, "host": self.host, "p2p": [r.__dict__ for r in self.p2p],
                "reduce_local": self.reduce_local, "pingpong_loaded": self.pingpong_loaded,
                "reduce_local_loaded": self.reduce_local_loaded, "exchange": self.exchange}

    @classmethod
    def from_json(cls, d: dict) -> ProbeData:  # type: ignore[type-arg]
        def pairs(key: str) -> list[tuple[int, float]]:
            return [(int(s), float(t)) for s, t in d.get(key, [])]  # older probes lack some

        return cls(int(d["np"]), str(d["host"]), [P2P(**r) for r in d["p2p"]],
                   pairs("reduce_local"), pingpong_loaded=pairs("pingpong_loaded"),
                   exchange=pairs("exchange"), reduce_local_loaded=pairs("reduce_local_loaded"))


def parse(text: str) -> ProbeData:
    data = ProbeData(0, "")
    done = False
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "start":
            data.np, data.host = int(ev["np"]), str(ev["host"])
        elif ev.get("event") == "p2p":
            data.p2p.append(P2P(int(ev["peer"]), bool(ev["same_node"]), int(ev["size"]),
                                float(ev["pingpong"]), float(ev["send_overhead"]),
                                float(ev["recv_overhead"]), float(ev["gap"])))
        elif ev.get("event") == "reduce_local":
            data.reduce_local.append((int(ev["size"]), float(ev["time"])))
        elif ev.get("event") == "p2p_loaded":
            data.pingpong_loaded.append((int(ev["size"]), float(ev["pingpong"])))
            data.exchange.append((int(ev["size"]), float(ev["exchange"])))
        elif ev.get("event") == "reduce_local_loaded":
            data.reduce_local_loaded.append((int(ev["size"]), float(ev["time"])))
        elif ev.get("event") == "done":
            done = True
    if not done or not data.p2p:
        raise ColltuneError("the model probe did not finish",
                            "run it again; with --np above the cores, expect noise")
    return data


# a probe silent this long is hung (a rank that never started, a peer that never answers):
# the kernel's own watchdog on one node and across nodes alike
START_SILENCE = 120.0
SILENCE = 60.0


def run_probe(mpi: Installation, placement: Placement, max_bytes: int = 1 << 20,
              reps: int = 50, timeout: float = 600.0,
              note: Callable[[str], None] | None = None) -> ProbeData:
    """Run modelbench; `note` hears how far it has got (every few seconds). Killed, with
    every rank, when silent for SILENCE seconds (START_SILENCE before its first line) or
    past `timeout`."""
    exe = build_kernel(mpi, name="modelbench")
    prefix, env = launch(mpi, placement)
    cmd = [*prefix, str(exe), str(max_bytes), str(reps)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    lines: queue.Queue[str | None] = queue.Queue()
    err: list[str] = []

    def pump(stream: IO[str], into: Callable[[str], None], end: bool) -> None:
        for line in stream:
            into(line)
        if end:
            lines.put(None)

    assert proc.stdout is not None and proc.stderr is not None
    threads = [threading.Thread(target=pump, args=(proc.stdout, lines.put, True), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err.append, False),
                                daemon=True)]
    for t in threads:
        t.start()
    out: list[str] = []
    begun, last_note = time.monotonic(), -10.0
    try:
        while True:
            wait = SILENCE if out else start_timeout(START_SILENCE)
            left = timeout - (time.monotonic() - begun)
            try:
                line = lines.get(timeout=max(0.05, min(wait, left)))
            except queue.Empty:
                if left <= wait:
                    raise ColltuneError(f"the model probe did not finish in {timeout:.0f} s",
                                        "use fewer --reps or a smaller --max-size") from None
                raise ColltuneError(
                    f"the model probe printed nothing for {wait:.0f} s "
                    f"({'before its start' if not out else 'after: ' + out[-1].strip()[:80]})"
                    "; killed: a rank that never started, or one that stopped answering",
                    "check that this MPI runs a hello-world with the same --np and "
                    "placement") from None
            if line is None:
                break
            out.append(line)
            if note and time.monotonic() - last_note > 5:
                last_note = time.monotonic()
                note(f"model probe: {_where(line)} ({time.monotonic() - begun:.0f} s)")
    finally:
        kill_session(proc.pid)
        proc.wait()
        for t in threads:
            t.join(timeout=5)
    if note:
        note(f"model probe: done in {time.monotonic() - begun:.0f} s")
    if proc.returncode not in (0, -9):
        tail = ("".join(err) or "".join(out)).strip().splitlines()[-3:]
        raise ColltuneError(f"the model probe failed (exit {proc.returncode}): "
                            + " | ".join(tail), "check that this MPI runs a hello-world "
                            "with the same --np")
    return parse("".join(out))


def _where(line: str) -> str:
    """What a line of modelbench says it has measured, for a progress line."""
    try:
        ev = json.loads(line)
    except ValueError:
        return "running"
    kind = ev.get("event") if isinstance(ev, dict) else None
    if kind == "p2p":
        return (f"ping-pong with rank {ev.get('peer')} "
                f"({'same node' if ev.get('same_node') else 'across nodes'}) at "
                f"{ev.get('size')} B done")
    if kind in ("reduce_local", "p2p_loaded", "reduce_local_loaded"):
        return f"{kind.replace('_', ' ')} at {ev.get('size')} B done"
    return f"{kind or 'running'}"
