"""StageClock counts a stage's CPU time (not its wall time) while reading the CPU clock once a
window, not twice a call: what it counts for work done, for waiting, and for many small calls."""

import time

from pipelines.stage import StageClock
from pipelines.stats import BundleCounts


def _burn(seconds: float) -> int:
    """Busy CPU work for about `seconds` of this process's CPU time."""
    until, spins = time.process_time() + seconds, 0
    while time.process_time() < until:
        spins += sum(range(200))
    return spins


def _counted(clock: StageClock) -> float:
    counts = BundleCounts()
    clock.drain(counts)
    return counts.drain().get("cpu_us_test", 0) / 1e6


def test_one_long_call_counts_its_cpu_time():
    clock = StageClock("test")
    started = time.process_time()
    clock.call(_burn, 0.2)
    spent = time.process_time() - started
    assert 0.5 * spent <= _counted(clock) <= spent * 1.05


def test_the_first_item_of_a_window_counts():
    # one item whose making is the whole window: the CPU clock is read before it, not after
    clock = StageClock("test")
    started = time.process_time()
    assert list(clock.items(_burn(0.15) for _ in range(1))) != []
    spent = time.process_time() - started
    assert 0.5 * spent <= _counted(clock) <= spent * 1.05


def test_waiting_is_not_cpu_time():
    clock = StageClock("test")
    clock.call(time.sleep, 0.3)
    assert _counted(clock) < 0.05


def test_what_the_consumer_does_is_not_counted():
    # many small items, each made cheaply and consumed expensively: the consumer's CPU time
    # (between the timed calls) is not the stage's
    clock = StageClock("test")
    started = time.process_time()
    for _ in clock.items(range(400)):
        _burn(0.0005)
    spent = time.process_time() - started
    assert _counted(clock) < 0.2 * spent


def test_many_small_calls_add_up_to_their_cpu_time():
    clock = StageClock("test")
    started = time.process_time()
    for _ in range(300):
        clock.call(_burn, 0.001)
    spent = time.process_time() - started
    assert 0.5 * spent <= _counted(clock) <= spent * 1.05
