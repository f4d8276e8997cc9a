"""Several configurations in one launch, each at sizes of its own (tuner/bands.py): every
point measured once, at a distinct size near its own, in few launches."""

from __future__ import annotations

import pytest

from colltune.core.space import DEFAULT_SIZES
from colltune.tuner.bands import pack, window


@pytest.mark.parametrize("step", [1, 8])
def test_every_point_is_measured_once_near_its_size(step: int) -> None:
    sizes = [s for s in DEFAULT_SIZES if s >= step]
    points = [(p, s) for s in sizes for p in range(1, 23)]  # bcast's 22 presets
    launches = pack(points, step)
    got = [pt for launch in launches for pt in launch.values()]
    assert sorted(got) == sorted(points)  # each once
    for launch in launches:
        for m, (_, s) in launch.items():
            assert m % step == 0 and m >= step
            assert abs(m - s) <= max(s // 8, 8 * step)
            assert m in window(s, step)
    # large sizes share the first launch; only small ones, whose windows are narrow and
    # overlap, need more: 3 launches for bytes, 6 for doubles, where one a preset is 22
    assert len(launches) == {1: 3, 8: 6}[step]
    # below first: where 21 sizes below fit, none is above
    assert all(m <= s for m, (_, s) in launches[0].items() if max(s // 8, 8 * step) >= 21 * step)


def test_a_size_is_measured_at_itself_first_then_below() -> None:
    assert window(1024, 1)[:3] == [1024, 1023, 1022]
    assert window(8, 8) == [8, 16, 24, 32, 40, 48, 56, 64, 72]  # nothing below 8 B
    assert pack([("a", 4096), ("b", 4096)], 1) == [{4096: ("a", 4096), 4095: ("b", 4096)}]


def test_the_default_launch_is_repeated_first_midway_and_last() -> None:
    """A sweep of a launch per configuration measures the default in 3 launches spread
    over it (tuner/measure._spread): every configuration is compared with launches from
    the whole sweep, not one that may run 2x off; each repeat is numbered for its tag."""
    from colltune.core.config import DEFAULT, Config
    from colltune.tuner.measure import _spread

    def launch(c: Config) -> tuple[tuple[str, list, None], int]:
        return ("relaunch", [((0, c), 8), ((0, c), 4096)], None), 0

    runs = [launch(DEFAULT)] + [launch(Config(a)) for a in range(1, 7)]
    order = [(g[1][0][0][1].algorithm, again) for g, again in _spread(runs, 3)]
    assert order == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 2), (4, 0), (5, 0), (6, 0), (0, 3)]
    assert _spread(runs, 1) == runs
    # one launch of everything MPI_T switches (the default among them): nothing repeated
    mpit = [(("mpit", [((0, DEFAULT), 8), ((0, Config(1)), 8)], None), 0)]
    assert _spread(mpit, 3) == mpit
    # bands: the default has its own launch, repeated around the shared ones
    bands = [launch(DEFAULT), (("bands", [((0, Config(1)), 8)], {8: ((0, Config(1)), 8)}), 0)]
    assert [(g[0], again) for g, again in _spread(bands, 3)] == [
        ("relaunch", 0), ("bands", 0), ("relaunch", 2), ("relaunch", 3)]
