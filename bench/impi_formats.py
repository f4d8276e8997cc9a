"""The same Intel MPI tune in each format (issue 64): `tune bcast --np N --mpi PREFIX` with no
--format (`--out b.json`), with `--format impi` and with `--format impi-bin --out b.dat`, one
after another on the same store (so the sweep and the fresh verdicts are measured once and
the formats differ only in what they write). Prints, per format, the file written, the
confirmed wins, how many the file carries (`changes` in the summary) and the last line.

Run: python bench/impi_formats.py PREFIX [NP] [COLLECTIVE]"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

REPO = Path(__file__).resolve().parent.parent


def tune(args: list[str], work: Path) -> tuple[dict, str, float]:  # type: ignore[type-arg]
    summary = work / "s.json"
    start = time.monotonic()
    r = subprocess.run([*TUNE, *args, "--db",
                        str(work / "db.sqlite"), "--summary-json", str(summary)],
                       capture_output=True, text=True, cwd=work, check=False)
    took = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"tune {' '.join(args)} failed: {r.stderr[-2000:]}")
    return json.loads(summary.read_text()), r.stderr.strip().splitlines()[-1], took


def main(prefix: str, np: int, coll: str) -> None:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        work = Path(tmp)
        base = [coll, "--np", str(np), "--mpi", prefix]
        runs = [("no --format, --out b.json", ["--out", "b.json"]),
                ("--format impi --out j.json", ["--format", "impi", "--out", "j.json"]),
                ("--format impi-bin --out t.dat", ["--format", "impi-bin", "--out", "t.dat"])]
        print(f"Intel MPI at {prefix}, {coll} at {np} ranks")
        for name, extra in runs:
            s, last, took = tune([*base, *extra], work)
            ch = s["changes"]
            wrote = s.get("wrote", {}).get("path") or extra[-1]
            print(f"- {name}: {took:.0f} s; wrote {Path(wrote).name} ({s['wrote']['what']}); "
                  f"confirmed wins {ch['confirmed']}, carried {ch['sizes_changed']}, not "
                  f"carried {ch['not_carried']}")
            print(f"  last line: {last}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4,
         sys.argv[3] if len(sys.argv) > 3 else "bcast")
