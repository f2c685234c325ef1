"""The one ranking rule (``objectives.rank``): the metric, then lower $/h, fewer GPUs, the
``then`` metrics, then the rows' order — the winner of a tie is the one the rule names."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.study.objectives import pick_best, rank, tie_rule


def frame(**cols) -> pd.DataFrame:
    return pd.DataFrame({"config": [f"c{i}" for i in range(len(next(iter(cols.values()))))], **cols})


def test_the_metric_comes_first_in_its_better_direction():
    f = frame(max_rate=[4.0, 9.0, 7.0], cost_per_hour=[1.0, 9.0, 2.0])
    assert list(rank(f, "max_rate")["config"]) == ["c1", "c2", "c0"]
    f = frame(ttft_p99=[0.4, 0.2, np.nan], cost_per_hour=[1.0, 9.0, 0.5])
    assert list(rank(f, "ttft_p99")["config"]) == ["c1", "c0", "c2"]  # missing last


def test_a_tie_goes_to_the_cheaper_then_fewer_gpus_then_the_then_metric_then_order():
    f = frame(max_rate=[8.0, 8.0, 8.0, 8.0, 8.0], cost_per_hour=[6.0, 4.0, 4.0, 4.0, 4.0],
              num_gpus=[2, 2, 1, 1, 1], ttft_p99=[0.1, 0.1, 0.5, 0.3, 0.3])
    assert list(rank(f, "max_rate", ("ttft_p99",))["config"]) == ["c3", "c4", "c2", "c1", "c0"]
    assert pick_best(f, "max_rate", ("ttft_p99",))["config"] == "c3"
    assert pick_best(f, "max_rate")["config"] == "c2"  # without it: the first of the cheapest, fewest


def test_columns_a_frame_lacks_are_skipped_and_nothing_qualifies_is_none():
    f = pd.DataFrame({"scenario": ["a", "b"], "goodput": [3.0, 3.0]})  # compare's frame: no cost
    assert pick_best(f, "goodput")["scenario"] == "a"
    assert pick_best(frame(max_rate=[np.nan, np.nan]), "max_rate") is None


def test_the_rule_in_words():
    assert tie_rule(("ttft_p99",)) == ("ties broken by lower $/h, then fewer GPUs, then lower ttft_p99, "
                                       "then the configurations' order")
