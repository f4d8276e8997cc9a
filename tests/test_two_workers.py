"""The suite under two workers (`-n 2 --dist loadgroup`): a test marked `alone` has the
machine to itself (tests/conftest.py's lock), which is what keeps its timings honest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent

# a test marked alone and others beside it, each writing when it ran; the others are many
# and short so that, without the lock, one of them would run on the second worker while
# the alone one sleeps
PROBE = '''
import os, time
from pathlib import Path
import pytest

LOG = Path(os.environ["PROBE_LOG"])

def _ran(name, seconds):
    t0 = time.monotonic()
    time.sleep(seconds)
    with LOG.open("a") as f:
        f.write(f"{name} {t0} {time.monotonic()}\\n")

@pytest.mark.alone
def test_alone():
    _ran("alone", 1.5)

@pytest.mark.parametrize("i", range(8))
def test_other(i):
    _ran(f"other{i}", 0.3)
'''


def test_an_alone_test_never_overlaps_the_other_workers_tests(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    log = tmp_path / "ran.log"
    # not this run's xdist names: the probe's run has its own lock files, and this run's
    # (when it has two workers) are not the probe's to remove at its end
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env = {**env, "PROBE_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-c", os.devnull, "--rootdir", str(tmp_path), "-p", "conftest",
                        "-n", "2", "-W", "ignore::pytest.PytestUnknownMarkWarning",
                        str(tmp_path / "test_probe.py")],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    spans = {name: (float(a), float(b)) for name, a, b in
             (line.split() for line in log.read_text().splitlines())}
    assert len(spans) == 9, spans
    a0, a1 = spans.pop("alone")
    # the monotonic clock is one for the machine's processes: intervals compare as they are
    overlapping = {n: s for n, s in spans.items() if s[0] < a1 and a0 < s[1]}
    assert not overlapping, (a0, a1, overlapping)
    # and the others did run on two workers at once (the lock shares, it does not serialise)
    others = sorted(spans.values())
    assert any(b[0] < a[1] for a, b in zip(others, others[1:])), others
