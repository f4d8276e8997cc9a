"""Run the modelbench kernel (ping-pong, overheads, message trains, local reduction) on a
real MPI and read what it printed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field

from colltune.backends.registry import launch
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
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


def run_probe(mpi: Installation, placement: Placement, max_bytes: int = 1 << 20,
              reps: int = 50, timeout: float = 600.0) -> ProbeData:
    exe = build_kernel(mpi, name="modelbench")
    prefix, env = launch(mpi, placement)
    cmd = [*prefix, str(exe), str(max_bytes), str(reps)]
    # its own session, so a hung probe is killed with every rank, not just mpirun
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ColltuneError(f"the model probe did not finish in {timeout:.0f} s",
                            "use fewer --reps or a smaller --max-size") from None
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-3:]
        raise ColltuneError(f"the model probe failed (exit {proc.returncode}): "
                            + " | ".join(tail), "check that this MPI runs a hello-world "
                            "with the same --np")
    return parse(out)
