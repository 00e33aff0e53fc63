"""The events-to-rewards reference (events_reference.py) against small hand-computed cases.

The reference is the oracle of the join's property test, so these cases pin it to the contract in docs/events.md.
Times are epoch seconds (T0 = 2024-03-01T00:00:00Z) unless a case needs microseconds.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest
from events_reference import (
    BAD_TIME,
    CATEGORIES,
    EventsSpec,
    ReferenceState,
    parse_window,
    random_nights,
    reference_night,
    to_micros,
    write_night,
)

T0 = 1_709_251_200  # 2024-03-01T00:00:00Z
US = 1_000_000
MIN, HOUR = 60, 3600
W = 30 * MIN
NAN = math.nan


def spec(**kw) -> EventsSpec:
    base = dict(window="30m", rewards={"click": 1.0, "purchase": "value"}, aggregate="sum", default_reward=0.0)
    return EventsSpec(**{**base, **kw})


def decisions(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=["decision_id", "decision_time"], dtype=object)


def events(*rows, columns=("decision_id", "time", "type", "value", "event_id"), file="e.csv") -> pd.DataFrame:
    """Rows of `columns`, optionally followed by (_file, _line); otherwise `file`, lines 2, 3, ..."""
    columns = list(columns)
    if rows and len(rows[0]) == len(columns) + 2:
        return pd.DataFrame(list(rows), columns=columns + ["_file", "_line"])
    frame = pd.DataFrame(list(rows), columns=columns)
    frame["_file"] = file
    frame["_line"] = np.arange(len(frame)) + 2
    return frame


def no_events() -> pd.DataFrame:
    return events()


def zero_counts(**nonzero) -> dict[str, int]:
    return {c: nonzero.get(c, 0) for c in CATEGORIES}


# --- times and windows ------------------------------------------------------------------------------------------


def test_to_micros_reads_every_time_form():
    same_instant = [
        "2024-03-01T00:00:00Z",
        "2024-03-01T00:00:00",  # no offset: UTC
        "2024-03-01 01:00:00+01:00",
        "2024-03-01T05:30:00+0530",
        "2024-02-29T19:00:00-05",
        "2024-03-01",
        " 2024-03-01T00:00:00z ",
        datetime(2024, 3, 1),  # naive: UTC
        datetime(2024, 3, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        pd.Timestamp("2024-03-01", tz="UTC"),
        pd.Timestamp("2024-02-29 16:00", tz="US/Pacific"),
        np.datetime64("2024-03-01T00:00:00"),
        T0,  # epoch seconds
        T0 * 1000,  # milliseconds
        T0 * US,  # microseconds
        float(T0),
        np.int64(T0 * 1000),
        str(T0),  # numeric text is a number
    ]
    assert to_micros(same_instant).tolist() == [T0 * US] * len(same_instant)
    assert to_micros(pd.Series(same_instant, dtype=object)).dtype == np.int64
    assert to_micros("2024-03-01T00:00:00.5Z")[0] == T0 * US + 500_000
    assert to_micros("2024-03-01T00:00:00.1234567Z")[0] == T0 * US + 123_456
    assert to_micros(T0 + 0.25)[0] == T0 * US + 250_000
    assert to_micros(T0 * 1000 + 0.5)[0] == T0 * US + 500
    # magnitude boundaries: < 1e11 seconds, < 1e14 milliseconds, else microseconds
    assert to_micros([99_999_999_999, 10**11, 10**14 - 1, 10**14, -5]).tolist() == [
        99_999_999_999 * US,
        10**14,
        (10**14 - 1) * 1000,
        10**14,
        -5 * US,
    ]


@pytest.mark.parametrize(
    "bad",
    [None, NAN, math.inf, "", "  ", "garbage", "2024-13-01", "2024-03-01T24:00:00", "2024-03-01T00:00:00+25:00",
     "03/01/2024", True, pd.NaT, pd.NA, object()],
)  # fmt: skip
def test_to_micros_marks_unparseable_times(bad):
    assert to_micros([bad])[0] == BAD_TIME


@pytest.mark.parametrize(
    "text,micros",
    [("30m", 30 * 60 * US), ("2h", 2 * HOUR * US), ("1d", 86_400 * US), ("45s", 45 * US), ("90", 90 * US),
     (90, 90 * US), (1.5, 1_500_000), ("0.5h", HOUR * US // 2)],
)  # fmt: skip
def test_parse_window(text, micros):
    assert parse_window(text) == micros


@pytest.mark.parametrize("text", ["0", "0m", "-5m", "5x", "", "m", "30M", True, math.inf])
def test_parse_window_rejects(text):
    with pytest.raises(ValueError):
        parse_window(text)


def test_spec_validation():
    with pytest.raises(ValueError):
        spec(rewards={"click": "clicks"}).validate()
    with pytest.raises(ValueError):
        spec(aggregate="mean").validate()
    with pytest.raises(ValueError):
        spec(aggregate={"click": "max"}).validate()  # purchase has no aggregate
    with pytest.raises(ValueError):
        spec(cutoff="tomorrow").validate()
    spec(cutoff="2024-03-01T12:00:00+01:00").validate()


# --- categories -------------------------------------------------------------------------------------------------


def test_every_category():
    s = spec(cutoff=T0 + 3 * HOUR)
    ds = decisions(("a", T0), ("p", T0 + 3 * HOUR - 10 * MIN))
    es = events(
        ("a", T0 + 60, "click", NAN, "e1"),  # attributed
        ("a", T0 + 120, "click", NAN, "e1"),  # duplicate (e1 is earlier)
        ("a", T0 + W + 1, "click", NAN, "e3"),  # late
        ("a", T0 - 5, "click", NAN, "e4"),  # before_decision
        ("ghost", T0 + 10, "click", NAN, "e5"),  # unknown_decision
        ("a", T0 + 10, "view", NAN, "e6"),  # unmapped_type
        ("p", T0 + 3 * HOUR, "click", NAN, "e7"),  # pending
        ("", T0, "click", NAN, "e8"),  # malformed: empty id
        ("a", "garbage", "click", NAN, "e9"),  # malformed: bad time
        ("a", T0 + 30, "purchase", NAN, "e10"),  # malformed: value type without a value
        ("a", T0 + W, "purchase", 2.5, "e11"),  # attributed: the window's end is in
        ("a", T0, "purchase", 1.0, "e12"),  # attributed: the decision's time is in
        ("a", T0 + 100, "view", NAN, "e1"),  # duplicate before unmapped_type
        ("p", None, "click", NAN, "e14"),  # malformed: counted once, here, and not carried
        (None, T0 + 5, "click", NAN, "e15"),  # malformed: missing id
    )
    result, state = reference_night(ds, es, s)
    assert result.events == zero_counts(
        attributed=3, duplicate=2, late=1, before_decision=1, unknown_decision=1, unmapped_type=1, pending=1,
        malformed=5,
    )  # fmt: skip
    expected = ["attributed", "duplicate", "late", "before_decision", "unknown_decision", "unmapped_type", "pending"]
    expected += ["malformed"] * 3 + ["attributed"] * 2 + ["duplicate", "malformed", "malformed"]
    assert result.event_log.category.tolist() == expected
    assert result.rewards == {"a": 1.0 + 2.5 + 1.0}
    assert result.pending == {"p"}
    assert result.quarantined_decisions == {}
    assert result.records == {"read": 2, "written": 1, "quarantined": 0, "pending": 1}
    assert result.cutoff_us == (T0 + 3 * HOUR) * US
    assert state.decisions.to_dict("list") == {
        "decision_id": ["p"],
        "decision_time_us": [(T0 + 3 * HOUR - 10 * MIN) * US],
    }
    assert state.events.key.tolist() == [("id", "e7")]
    assert state.events.time_us.tolist() == [(T0 + 3 * HOUR) * US]


def test_window_edges_in_microseconds():
    t_d = T0 * US
    ds = decisions(("a", t_d))
    es = events(
        ("a", t_d - 1, "click", NAN, "before"),
        ("a", t_d, "click", NAN, "at"),
        ("a", t_d + W * US, "click", NAN, "end"),
        ("a", t_d + W * US + 1, "click", NAN, "after"),
    )
    result, _ = reference_night(ds, es, spec(aggregate="count", cutoff=t_d + 10 * HOUR * US))
    assert result.event_log.category.tolist() == ["before_decision", "attributed", "attributed", "late"]
    assert result.rewards == {"a": 2.0}


@pytest.mark.parametrize(
    "cutoff,pending",
    [
        ((T0 + W) * US, False),
        ((T0 + W) * US - 1, True),
        ("2024-03-01T00:30:00Z", False),
        ("2024-03-01T00:29:59Z", True),
    ],
)
def test_pending_when_the_window_is_open_at_the_cutoff(cutoff, pending):
    ds = decisions(("a", T0))
    es = events(("a", T0 + 10, "click", NAN, "e1"))
    result, state = reference_night(ds, es, spec(cutoff=cutoff))
    assert result.pending == ({"a"} if pending else set())
    assert result.rewards == ({} if pending else {"a": 1.0})
    assert result.events == zero_counts(**({"pending": 1} if pending else {"attributed": 1}))
    assert len(state.decisions) == len(state.events) == int(pending)


# --- rewards ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "aggregate,reward",
    [("first", 1 + 2.0), ("max", 1 + 5.0), ("sum", 3 + 10.0), ("count", 3 + 3),
     ({"click": "count", "purchase": "first"}, 3 + 2.0), ({"click": "first", "purchase": "max"}, 1 + 5.0)],
)  # fmt: skip
def test_aggregates(aggregate, reward):
    ds = decisions(("a", T0))
    es = events(
        ("a", T0 + 30, "click", NAN, "c3"),
        ("a", T0 + 15, "purchase", 5.0, "p2"),
        ("a", T0 + 10, "click", 7.0, "c1"),  # a click's value is not used
        ("a", T0 + 25, "purchase", 3.0, "p3"),
        ("a", T0 + 20, "click", NAN, "c2"),
        ("a", T0 + 5, "purchase", 2.0, "p1"),  # the earliest purchase
    )
    result, _ = reference_night(ds, es, spec(aggregate=aggregate, cutoff=T0 + 10 * HOUR))
    assert result.rewards == {"a": pytest.approx(reward)}
    assert result.events == zero_counts(attributed=6)


def test_first_breaks_time_ties_by_file_then_line():
    ds = decisions(("a", T0), ("b", T0))
    es = events(
        ("a", T0 + 60, "purchase", 4.0, "x", "b.csv", 2),
        ("a", T0 + 60, "purchase", 7.0, "y", "a.csv", 9),  # a.csv < b.csv: first
        ("b", T0 + 60, "purchase", 4.0, "x", "a.csv", 3),
        ("b", T0 + 60, "purchase", 7.0, "y", "a.csv", 2),  # line 2 < line 3: first
    )
    result, _ = reference_night(ds, es, spec(aggregate="first", cutoff=T0 + HOUR))
    assert result.rewards == {"a": 7.0, "b": 7.0}


def test_duplicate_with_the_same_time_keeps_the_first_read():
    ds = decisions(("a", T0))
    es = events(
        ("a", T0 + 60, "purchase", 4.0, "x", "b.csv", 2),
        ("a", T0 + 60, "purchase", 7.0, "x", "a.csv", 5),  # read first: kept
    )
    result, _ = reference_night(ds, es, spec(aggregate="sum", cutoff=T0 + HOUR))
    assert result.rewards == {"a": 7.0}
    assert result.event_log.category.tolist() == ["duplicate", "attributed"]


def test_default_reward_only_when_nothing_is_attributed():
    ds = decisions(("none", T0), ("missed", T0), ("zero", T0))
    es = events(
        ("missed", T0 + W + 1, "purchase", 5.0, "m1"),  # late
        ("missed", T0 - 1, "purchase", 5.0, "m2"),  # before_decision
        ("missed", T0 + 1, "view", NAN, "m3"),  # unmapped_type
        ("zero", T0 + 1, "purchase", 0.0, "z1"),
    )
    result, _ = reference_night(ds, es, spec(default_reward=-1.0, cutoff=T0 + HOUR))
    assert result.rewards == {"none": -1.0, "missed": -1.0, "zero": 0.0}


def test_no_type_column_uses_the_only_reward():
    ds = decisions(("a", T0))
    no_type = ("decision_id", "time", "value", "event_id")
    es = events(("a", T0 + 1, 2.0, "e1"), ("a", T0 + 2, 3.0, "e2"), ("a", T0 + 3, NAN, "e3"), columns=no_type)
    result, _ = reference_night(ds, es, spec(rewards={"purchase": "value"}, cutoff=T0 + HOUR))
    assert result.rewards == {"a": 5.0}
    assert result.events == zero_counts(attributed=2, malformed=1)
    result, _ = reference_night(ds, es, spec(rewards={"click": 1.0}, aggregate="count", cutoff=T0 + HOUR))
    assert result.rewards == {"a": 3.0}  # a constant type does not look at the value
    with pytest.raises(ValueError):
        reference_night(ds, es, spec(cutoff=T0 + HOUR))  # two rewards, no type column


def test_no_event_id_column_whole_row_is_the_id():
    ds = decisions(("a", T0))
    es = events(
        ("a", T0 + 60, "purchase", 2.0),
        ("a", T0 + 60, "purchase", 2.0),  # exact repeat: duplicate
        ("a", "2024-03-01T00:01:00+00:00", "purchase", 2.0),  # the same instant written differently: duplicate
        ("a", T0 + 60, "purchase", 3.0),  # another value: another event
        ("a", T0 + 120, "purchase", 2.0),  # re-sent later: without an id, another event
        ("a", T0 + 60, "click", NAN),
        ("a", T0 + 60, "click", NAN),  # missing values are equal: duplicate
        columns=("decision_id", "time", "type", "value"),
    )
    result, _ = reference_night(ds, es, spec(cutoff=T0 + HOUR))
    assert result.events == zero_counts(attributed=4, duplicate=3)
    assert result.rewards == {"a": 2.0 + 3.0 + 2.0 + 1.0}


def test_missing_event_id_matches_no_other_event():
    ds = decisions(("a", T0))
    es = events(
        ("a", T0 + 60, "click", NAN, None), ("a", T0 + 60, "click", NAN, None), ("a", T0 + 61, "click", NAN, "")
    )
    result, _ = reference_night(ds, es, spec(aggregate="count", cutoff=T0 + HOUR))
    assert result.events == zero_counts(attributed=3)


# --- decisions --------------------------------------------------------------------------------------------------


def test_invalid_decisions_are_quarantined_and_their_events_unknown():
    ds = decisions(("", T0), ("b", "garbage"), (None, T0), ("c", T0), ("d", None))
    es = events(("b", T0 + 60, "click", NAN, "b1"), ("c", T0 + 60, "click", NAN, "c1"))
    result, _ = reference_night(ds, es, spec(cutoff=T0 + HOUR))
    assert result.rewards == {"c": 1.0}
    assert result.quarantined == [("", "invalid_decision"), ("b", "invalid_decision"), ("", "invalid_decision"),
                                  ("d", "invalid_decision")]  # fmt: skip
    assert result.quarantined_decisions == {"": "invalid_decision", "b": "invalid_decision", "d": "invalid_decision"}
    assert result.records == {"read": 5, "written": 1, "quarantined": 4, "pending": 0}
    assert result.events == zero_counts(attributed=1, unknown_decision=1)


def test_an_id_read_twice_in_one_run_keeps_the_first():
    ds = decisions(("a", T0), ("a", T0 + 60))
    es = events(("a", T0 + 30, "click", NAN, "e1"))
    result, _ = reference_night(ds, es, spec(cutoff=T0 + HOUR))
    assert result.rewards == {"a": 1.0}  # before the second one's time, in the first one's window
    assert result.quarantined == [("a", "duplicate_decision")]
    assert result.records == {"read": 2, "written": 1, "quarantined": 1, "pending": 0}


# --- nights -----------------------------------------------------------------------------------------------------

LATE = T0 + 23 * HOUR + 50 * MIN  # a decision 10 minutes before midnight


def test_a_decision_waits_one_night_and_settles_the_next():
    s = spec()
    night1 = decisions(("a", LATE), ("b", T0 + HOUR))
    events1 = events(
        ("a", LATE + 2 * MIN, "click", NAN, "a1"),
        ("a", "garbage", "click", NAN, "a2"),
        ("b", T0 + HOUR + 5 * MIN, "purchase", 3.0, "b1"),
        ("b", LATE + 5 * MIN, "click", NAN, "b2"),  # the latest event read: the cutoff
        file="night1.csv",
    )
    r1, state1 = reference_night(night1, events1, s)
    assert r1.cutoff_us == (LATE + 5 * MIN) * US
    assert r1.pending == {"a"} and r1.rewards == {"b": 3.0}
    assert r1.events == zero_counts(attributed=1, late=1, pending=1, malformed=1)
    assert r1.records == {"read": 2, "written": 1, "quarantined": 0, "pending": 1}
    assert state1.events.key.tolist() == [("id", "a1")]  # a's events, less the malformed one (counted once, here)

    night2 = decisions(("c", T0 + 30 * HOUR))
    events2 = events(
        ("a", LATE + 15 * MIN, "purchase", 4.0, "a3"),  # arrives a night late, inside a's window
        ("a", LATE + 35 * MIN, "click", NAN, "a4"),  # late
        ("a", LATE + 2 * MIN, "click", NAN, "a1"),  # sent again: the carried copy counts as read first
        ("c", T0 + 30 * HOUR + MIN, "click", NAN, "c1"),
        file="night2.csv",
    )
    r2, state2 = reference_night(night2, events2, s, state1)
    assert r2.cutoff_us == (T0 + 30 * HOUR + MIN) * US
    assert r2.rewards == {"a": 1.0 + 4.0}
    assert r2.pending == {"c"}
    assert r2.event_log.category.tolist() == ["attributed", "attributed", "late", "duplicate", "pending"]
    assert r2.event_log.carried.tolist() == [True, False, False, False, False]
    assert r2.events == zero_counts(attributed=2, late=1, duplicate=1, pending=1)
    assert r2.records == {"read": 2, "written": 1, "quarantined": 0, "pending": 1}
    assert state2.decisions.decision_id.tolist() == ["c"]


def test_carried_events_come_first_on_time_ties():
    night1 = decisions(("a", LATE))
    r1, state1 = reference_night(night1, events(("a", LATE + 5 * MIN, "purchase", 9.0, "p1", "z.csv", 99)), spec())
    assert r1.pending == {"a"}
    night2_events = events(
        ("a", LATE + 5 * MIN, "purchase", 1.0, "p2", "a.csv", 2),  # a.csv line 2, but read after the carried p1
        ("ghost", T0 + 30 * HOUR, "click", NAN, "g", "a.csv", 3),
    )
    r2, _ = reference_night(decisions(), night2_events, spec(aggregate="first"), state1)
    assert r2.rewards == {"a": 9.0}
    same_id = night2_events.assign(event_id=["p1", "g"])
    r2, _ = reference_night(decisions(), same_id, spec(aggregate="sum"), state1)
    assert r2.rewards == {"a": 9.0}
    assert r2.events == zero_counts(attributed=1, duplicate=1, unknown_decision=1)


def test_auto_cutoff_ignores_carried_events_and_falls_back_to_decisions():
    r1, state1 = reference_night(decisions(("a", LATE)), events(("a", LATE + 9 * MIN, "click", NAN, "a1")), spec())
    assert r1.cutoff_us == (LATE + 9 * MIN) * US and r1.pending == {"a"}
    # Night 2 reads one event, earlier than the carried one: the cutoff is the event read.
    r2, state2 = reference_night(decisions(), events(("ghost", LATE + 6 * MIN, "click", NAN, "g")), spec(), state1)
    assert r2.cutoff_us == (LATE + 6 * MIN) * US and r2.pending == {"a"}
    # No event read: the latest decision time in D (the carried ones included).
    r3, _ = reference_night(decisions(), no_events(), spec(), state2)
    assert r3.cutoff_us == LATE * US and r3.pending == {"a"}
    r3, state3 = reference_night(decisions(("n", T0 + 25 * HOUR)), None, spec(), state2)
    assert r3.cutoff_us == (T0 + 25 * HOUR) * US
    assert r3.rewards == {"a": 1.0} and r3.pending == {"n"}
    assert r3.records == {"read": 2, "written": 1, "quarantined": 0, "pending": 1}
    assert len(state3.events) == 0


def test_a_decision_read_again_while_pending_is_quarantined():
    r1, state1 = reference_night(decisions(("a", LATE)), events(("ghost", LATE + 5 * MIN, "click", NAN, "g")), spec())
    assert r1.pending == {"a"}
    night2 = decisions(("a", T0 + 26 * HOUR))  # read again, with another time
    events2 = events(
        ("a", T0 + 24 * HOUR + 10 * MIN, "purchase", 4.0, "p"),  # in the first a's window, before the second a
        ("ghost", T0 + 30 * HOUR, "click", NAN, "g2"),
    )
    r2, state2 = reference_night(night2, events2, spec(), state1)
    assert r2.quarantined_decisions == {"a": "duplicate_decision"}
    assert r2.rewards == {"a": 4.0}
    assert r2.records == {"read": 2, "written": 1, "quarantined": 1, "pending": 0}
    assert len(state2.decisions) == 0


def test_the_same_night_twice_gives_the_same_result_and_state():
    s = spec(aggregate={"click": "max", "purchase": "first"})
    (d0, e0), (d1, e1) = random_nights(3, n_nights=2, decisions_per_night=80)
    _, state1 = reference_night(d0, e0, s)
    assert len(state1.decisions) > 0 and len(state1.events) > 0
    before = ReferenceState(state1.decisions.copy(), state1.events.copy())
    a, state_a = reference_night(d1, e1, s, state1)
    b, state_b = reference_night(d1, e1, s, state1)
    assert state1.equals(before)  # the run did not touch its input state
    assert (a.rewards, a.quarantined, a.pending, a.events, a.records, a.cutoff_us) == (
        b.rewards, b.quarantined, b.pending, b.events, b.records, b.cutoff_us,
    )  # fmt: skip
    pd.testing.assert_frame_equal(a.event_log, b.event_log)
    pd.testing.assert_frame_equal(state_a.decisions, state_b.decisions)
    pd.testing.assert_frame_equal(state_a.events, state_b.events)


# --- the random streams -----------------------------------------------------------------------------------------

SPEC = spec(aggregate={"click": "max", "purchase": "sum"})


def run_nights(nights, s=SPEC):
    state, results = None, []
    for d, e in nights:
        result, state = reference_night(d, e, s, state)
        results.append(result)
    return results


def test_random_nights_cover_every_case():
    nights = random_nights(0)
    assert [str(d.decision_time.dtype) for d, _ in nights] == ["Int64", "object", "Int64"]  # s, iso, ms
    assert [str(e.time.dtype) for _, e in nights] == ["object", "Int64", "Int64"]  # iso, ms, s
    results = run_nights(nights)
    totals = {c: sum(r.events[c] for r in results) for c in CATEGORIES}
    assert all(n > 0 for n in totals.values()), totals
    reasons = {reason for r in results for _, reason in r.quarantined}
    assert reasons == {"invalid_decision", "duplicate_decision"}
    assert all(r.pending for r in results)
    # decisions pending one night settle the next, with carried and newly read events attributed
    settled_late = [d for r0, r1 in zip(results, results[1:]) for d in r0.pending if d in r1.rewards]
    assert settled_late
    both = set()
    for r in results[1:]:
        attributed = r.event_log[r.event_log.category == "attributed"]
        both |= set(attributed[attributed.carried].decision_id) & set(attributed[~attributed.carried].decision_id)
    assert both
    # first-with-ties material: distinct events of one decision at the very same time
    e = nights[0][1]
    assert e.duplicated(["decision_id", "time", "type"]).any()
    # re-sent copies: one event id at several times
    assert (e.dropna(subset=["time"]).groupby("event_id").time.nunique() > 1).any()


def test_random_nights_is_deterministic_and_switches_off():
    for (d_a, e_a), (d_b, e_b) in zip(random_nights(5, n_nights=2, decisions_per_night=40), random_nights(5, 2, 40)):
        pd.testing.assert_frame_equal(d_a, d_b)
        pd.testing.assert_frame_equal(e_a, e_b)
    quiet = random_nights(
        5, 2, 100, duplicate_rate=0, resend_rate=0, malformed_rate=0, bad_value_rate=0, reread_rate=0,
        invalid_decision_rate=0, unknown_rate=0, delayed_rate=0,
    )  # fmt: skip
    for r in run_nights(quiet):
        assert r.events["malformed"] == r.events["duplicate"] == r.records["quarantined"] == 0
    no_columns = random_nights(5, 2, 100, with_type=False, with_event_id=False, event_formats=("us", "datetime"))
    assert "type" not in no_columns[0][1] and "event_id" not in no_columns[0][1]
    results = run_nights(no_columns, spec(rewards={"purchase": "value"}, aggregate="first"))
    assert sum(r.events["attributed"] for r in results) > 0


def test_five_thousand_decisions_are_quick():
    import time

    (d, e), = random_nights(11, n_nights=1, decisions_per_night=5000)  # fmt: skip
    start = time.perf_counter()
    result, _ = reference_night(d, e, SPEC)
    assert time.perf_counter() - start < 2.0
    assert result.records["read"] == 5000


def read_file(path, fmt: str) -> pd.DataFrame:
    text_columns = {"decision_id": str, "event_id": str, "type": str}
    if fmt == "csv":
        return pd.read_csv(path, dtype=text_columns)
    if fmt == "parquet":
        return pd.read_parquet(path)
    return pd.read_json(path, lines=True, dtype=text_columns, convert_dates=False)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_write_night_read_order_matches_a_reader(tmp_path, fmt):
    nights = random_nights(2, n_nights=2, decisions_per_night=60, event_formats=("datetime", "iso"))
    state_mem = state_disk = None
    for k, (d, e) in enumerate(nights):
        dpath, epaths, e_written = write_night(tmp_path / f"night{k}", d, e, fmt)
        assert [p.name for p in epaths] == [f"events-{k:02d}-0.{fmt}", f"events-{k:02d}-1.{fmt}"]
        read_back = []
        for p in epaths:
            frame = read_file(p, fmt)
            frame["_file"] = str(p)
            frame["_line"] = np.arange(len(frame)) + {"csv": 2, "parquet": 0, "jsonl": 1}[fmt]
            read_back.append(frame)
        read_back = pd.concat(read_back, ignore_index=True)
        assert list(zip(read_back._file, read_back._line)) == list(zip(e_written._file, e_written._line))
        if fmt == "csv":  # _line is the file's line number, the header being line 1
            lines = {f: open(f).read().splitlines() for f in set(e_written._file)}
            for f, line, d_id in zip(e_written._file, e_written._line, e_written.decision_id):
                if isinstance(d_id, str) and d_id:
                    assert lines[f][line - 1].startswith(d_id + ",")
        mem, state_mem = reference_night(d, e_written, SPEC, state_mem)
        disk, state_disk = reference_night(read_file(dpath, fmt), read_back, SPEC, state_disk)
        assert (mem.rewards, mem.pending, mem.events, mem.records) == (
            disk.rewards,
            disk.pending,
            disk.events,
            disk.records,
        )
        assert mem.event_log.category.tolist() == disk.event_log.category.tolist()


def test_write_night_renames_columns(tmp_path):
    (d, e), = random_nights(4, n_nights=1, decisions_per_night=10, n_event_files=1)  # fmt: skip
    renames = {"decision_id": "impression_id", "time": "event_time", "type": "event_type", "value": "amount"}
    _, (path,), written = write_night(
        tmp_path, d, e, "csv", event_columns=renames, decision_columns={"decision_time": "ts"}
    )
    assert open(path).readline().strip() == "impression_id,event_time,event_type,amount,event_id"
    assert open(tmp_path / "decisions.csv").readline().startswith("decision_id,ts,")
    assert list(written.columns) == list(e.columns)
    assert written._line.tolist() == list(range(2, len(e) + 2))
