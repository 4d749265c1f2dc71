"""The cost model's calibration script (benchmarks/cost_model_calibration.py): its pure
parts on small made-up points, the data's completeness, and the calibration it reports."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.calibration_points import (  # noqa: E402
    DEVICE_TIMED, HOST_TIMED, MeasuredPoint, all_points,
)
from benchmarks.cost_model_calibration import (  # noqa: E402
    GOAL, HELD_OUT, KERNELS, TRAIN, build_rows, config_of, format_table, order_kept, ranking_groups,
    spearman, split_of,
)


def _point(key, measured, family="toy", timing=DEVICE_TIMED, floor=0.0, reason="", shape=None):
    return MeasuredPoint(key=key, family=family, kernel="toy", chip="v5e", shape=shape or {"n": 1},
                         dtype="bfloat16", schedule={"block": 1}, measured_s=measured, timing=timing,
                         source="made up", printed=f"{measured} s", host_floor_s=floor, unreproducible=reason)


def test_spearman_of_same_reversed_and_tied_orders():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # ties take their average rank: ranks (1.5, 1.5, 3) against (1, 2, 3)
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(spearman([1], [2]))  # one value has no order
    assert math.isnan(spearman([4, 4], [1, 2]))  # a constant sequence neither
    with pytest.raises(ValueError):
        spearman([1, 2], [1])


def test_the_split_alternates_within_each_family_and_skips_unreproducible_points():
    points = [_point("a1", 1.0, "a"), _point("b1", 1.0, "b"), _point("a2", 1.0, "a"),
              _point("x", 1.0, "a", reason="sizes unpublished"), _point("a3", 1.0, "a"), _point("b2", 1.0, "b")]
    assert split_of(points) == {"a1": TRAIN, "a2": HELD_OUT, "a3": TRAIN, "b1": TRAIN, "b2": HELD_OUT}


def test_rows_compare_flag_dispatch_and_give_reasons():
    points = [_point("fast", 2e-3), _point("slow", 4e-3),
              _point("host", 2e-4, timing=HOST_TIMED, floor=1e-4),
              _point("lost", 1e-3, reason="the shape table is lost")]
    modelled = {"fast": 2.4e-3, "slow": 8e-3, "host": 1e-5}
    rows = build_rows(points, model=lambda p: modelled[p.key],
                      configure=lambda p: ({"block_sizes": [128], "pallas_loop_type": "fori_loop"}, ""))
    by_key = {row.point.key: row for row in rows}
    assert by_key["fast"].status == "compared" and by_key["fast"].ratio == pytest.approx(1.2)
    assert by_key["fast"].within_goal and not by_key["slow"].within_goal  # 1.2 vs 2.0 against ±35%
    assert by_key["host"].status == "dispatch" and "dispatch" in by_key["host"].reason
    assert not by_key["host"].within_goal  # never counted for the goal
    assert by_key["lost"].status == "not reproduced" and by_key["lost"].reason == "the shape table is lost"
    assert math.isnan(by_key["lost"].model_s) and by_key["lost"].split == ""
    assert order_kept([by_key["fast"], by_key["slow"]])
    table = format_table(rows)
    for key in modelled:
        assert key in table
    assert "the shape table is lost" in table and "blocks [128] fori_loop" in table


def test_ranking_groups_are_one_family_at_one_shape():
    points = [_point("a", 1.0, shape={"n": 1}), _point("b", 2.0, shape={"n": 1}), _point("c", 3.0, shape={"n": 2})]
    rows = build_rows(points, model=lambda p: p.measured_s, configure=lambda p: ({"block_sizes": [8]}, ""))
    groups = ranking_groups(rows)
    assert sorted(len(group) for group in groups.values()) == [1, 2]


def test_every_point_has_a_source_a_figure_and_a_config_or_a_reason():
    points = all_points()
    assert len({p.key for p in points}) == len(points)
    for point in points:
        assert point.source and point.printed and point.timing in (HOST_TIMED, DEVICE_TIMED), point.key
        if point.unreproducible:
            continue
        assert point.measured_s > 0 and point.kernel in KERNELS, point.key
        config, _ = config_of(point)
        assert config["block_sizes"], point.key
    # both halves hold points, and every family that has one to hold out does
    splits = split_of(points)
    assert set(splits.values()) == {TRAIN, HELD_OUT}


def test_the_model_meets_the_calibration_goal_on_every_compared_point():
    """What the script reports (planned on meta tensors, nothing timed): every compared point,
    train and held out, within ±35%, and each kernel's measured config order kept."""
    rows = build_rows(all_points())
    compared = [row for row in rows if row.status == "compared"]
    assert compared and all(row.within_goal for row in compared), {
        row.point.key: round(row.ratio, 2) for row in compared if not row.within_goal}
    assert all(order_kept(group) for group in ranking_groups(rows).values())
    assert abs(GOAL - 0.35) < 1e-12
