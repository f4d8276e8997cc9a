"""`tune ... --slurm-script job.sh`: a batch script that runs the same tuning inside a Slurm
allocation (nodes, tasks, a time limit from the plan's forecast), instead of running now."""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime, timezone

from colltune import __version__
from colltune.errors import ColltuneError


def hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def render(args: list[str], np: int, nodes: int | None, ppn: int | None,  # noqa: PLR0913 (the script's parts, by keyword)
           limit: tuple[int, str], name: str, pass_layout: bool = True) -> str:
    """`args`: the tune command's own arguments, without --slurm-script; `limit`: the
    seconds to ask for and the plan they come from, in words (tuner/forecast.time_limit).
    Without --nodes
    and --ppn the script asks for --ntasks alone and Slurm places the ranks.
    `pass_layout`: the command is given --nodes and --ppn too (False: it finds them in the
    allocation itself, as tune app places each group where the profile says it ran)."""
    if nodes or ppn:
        nodes = nodes or -(-np // (ppn or np))
        ppn = ppn or -(-np // nodes)
        if nodes * ppn < np:
            raise ColltuneError(f"--np {np} does not fit in {nodes} nodes x {ppn} ranks",
                                "raise --nodes or --ppn")
        layout = [f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks-per-node={ppn}",
                  f"#SBATCH --ntasks={nodes * ppn}"]
        fixed: list[tuple[str, str]] = [("--launcher", "srun")]
        if pass_layout:
            fixed += [("--nodes", str(nodes)), ("--ppn", str(ppn))]
    else:
        layout = [f"#SBATCH --ntasks={np}", "# no --nodes/--ppn given: Slurm places the "
                  "ranks; timings then depend on how it packs them"]
        fixed = [("--launcher", "srun")]
    inner = [a for a in args]
    for flag, value in fixed:
        if flag not in inner:
            inner += [flag, value]
    cmd = shlex.join([sys.executable, "-m", "colltune.cli", *inner])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        *layout,
        f"#SBATCH --time={hms(limit[0])}",
        "#SBATCH --exclusive",
        f"#SBATCH --output={name}-%j.out",
        f"# written by colltune {__version__}, {when}",
        f"# plan: {limit[1]}; time limit = 2 x its forecast, at least 10 min",
        "# load the MPI the rules are for (the one given with --mpi), for example:",
        "# module load openmpi",
        "set -euo pipefail",
        "# where tune was asked for this script: its relative paths (--out, --db) mean the "
        "same here",
        f"cd {shlex.quote(os.getcwd())}",
        cmd,
        "",
    ])
