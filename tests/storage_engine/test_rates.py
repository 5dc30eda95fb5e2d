"""``CounterRates``: the rates RocketMQ's runtime keys report, over trailing windows."""

from postbox.storage_engine.rates import CounterRates


def test_a_rate_runs_from_the_oldest_sample_inside_the_window():
    rates = CounterRates(0, (0, 0), keep_ms=60_000)
    rates.sample(1_000, (10, 1))
    rates.sample(1_500, (99, 99))  # less than a second after the last: not kept
    rates.sample(5_000, (50, 5))
    assert rates.per_second(6_000, (60, 6), 10_000) == [10.0, 1.0]  # from the start sample
    assert rates.per_second(13_000, (130, 21), 10_000) == [10.0, 2.0]  # from the 5 s sample


def test_with_no_sample_inside_the_window_the_rate_runs_from_the_latest():
    rates = CounterRates(0, (0,), keep_ms=60_000)
    rates.sample(2_000, (4,))
    assert rates.per_second(30_000, (4,), 10_000) == [0.0]  # nothing since
    assert rates.per_second(30_000, (32,), 10_000) == [1.0]  # 28 in the 28 s since


def test_samples_older_than_kept_are_dropped():
    rates = CounterRates(0, (0,), keep_ms=5_000)
    rates.sample(3_000, (30,))
    rates.sample(9_000, (90,))  # the start and the 3 s sample are now over 5 s old
    assert rates.per_second(10_000, (100,), 60_000) == [10.0]  # from the 9 s sample only
