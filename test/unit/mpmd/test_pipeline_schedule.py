"""Pipeline schedules: every stage runs each micro-batch's forward and backward once, in an order the
dependencies allow; the unit-time run gives the bubble fraction (S-1)/(M+S-1) for GPipe and 1F1B (divided by
the chunks for the interleaved schedule) and the activations held: M micro-batches for GPipe, at most S for
1F1B."""

import pytest

from slicer.core.errors import InvalidTactic
from slicer.mpmd.pipeline_schedule import BACKWARD, FORWARD, PipelineSchedule, Work, make_schedule


@pytest.mark.parametrize("stages,microbatches", [(2, 8), (4, 8), (2, 1), (3, 5)])
def test_gpipe_and_1f1b_idle_for_the_textbook_fraction(stages, microbatches):
    ideal = (stages - 1) / (microbatches + stages - 1)
    for name in ("gpipe", "1f1b"):
        run = make_schedule(name, stages, microbatches).verify()
        assert run.bubble == pytest.approx(ideal), name


def test_1f1b_holds_at_most_s_micro_batches_and_gpipe_holds_all():
    assert make_schedule("1f1b", 4, 8).verify().peak == (4, 3, 2, 1)
    assert make_schedule("gpipe", 4, 8).verify().peak == (8, 8, 8, 8)


def test_interleaved_divides_the_bubble_by_the_chunks():
    run = make_schedule("interleaved", 4, 8, 2).verify()
    assert run.bubble == pytest.approx(3 / (8 * 2 + 3))


def test_a_replay_with_measured_times_gives_their_bubble():
    """GPipe, S=2, M=2, forwards 1 on both stages, backwards 2 on stage 0 and 4 on stage 1: stage 1 ends at 11 (F0 1-2,
    F1 2-3, B1 3-7, B0 7-11), stage 0 at 13 (B1 7-9, B0 11-13); busy 6 + 10 of 2 x 13."""
    schedule = make_schedule("gpipe", 2, 2)
    run = schedule.replay({(FORWARD, 0): 1.0, (FORWARD, 1): 1.0, (BACKWARD, 0): 2.0, (BACKWARD, 1): 4.0})
    assert run.makespan == 13.0 and run.bubble == pytest.approx(1 - 16 / 26)
    assert [(str(w), start, end) for w, start, end in run.spans[0]][2:] == [("B1", 7.0, 9.0), ("B0", 11.0, 13.0)]
    equal = schedule.replay({(k, v): c for k, c in ((FORWARD, 1.0), (BACKWARD, 2.0)) for v in (0, 1)})
    assert equal.bubble == pytest.approx(schedule.verify().bubble) == pytest.approx(1 / 3)


def test_1f1b_order_on_two_stages():
    assert make_schedule("1f1b", 2, 3).text() == "stage 0: F0 F1 B0 F2 B1 B2\nstage 1: F0 B0 F1 B1 F2 B2"


def test_an_order_that_waits_for_itself_is_refused():
    order = (Work("B", 0), Work(FORWARD, 0))
    with pytest.raises(InvalidTactic, match="deadlocks"):
        PipelineSchedule("bad", 2, 1, (order, (Work(FORWARD, 0), Work("B", 0)))).verify()


def test_a_missing_work_is_refused():
    with pytest.raises(InvalidTactic, match="once"):
        PipelineSchedule("bad", 1, 2, ((Work(FORWARD, 0), Work("B", 0)),)).verify()


@pytest.mark.parametrize("args,message", [(("zigzag", 2, 4), "one of"), (("1f1b", 2, 0), ">= 1"),
                                          (("1f1b", 2, 4, 2), "interleaved"), (("interleaved", 2, 3, 2), "multiple")])
def test_bad_schedules_say_what_to_change(args, message):
    with pytest.raises(InvalidTactic, match=message):
        make_schedule(*args)
