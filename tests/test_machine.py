"""The table itself: well formed, and the shared machine built from it honours it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from transitions import MachineError

from agentfsm import (
    STANDARD,
    Edge,
    Failed,
    Interrupted,
    MachineDefinitionError,
    MachineTable,
    Ok,
    Paused,
)
from agentfsm._machine import machine_named
from agentfsm.steps import Continue, PipelineResult


def test_one_edge_per_source_and_trigger() -> None:
    keys = [(e.source, e.trigger) for e in STANDARD.edges]
    assert len(keys) == len(set(keys))
    assert all(e.why for e in STANDARD.edges)


def test_every_state_is_reachable_and_every_working_state_can_end() -> None:
    seen = set(STANDARD.entries.values())
    frontier = list(seen)
    while frontier:
        for dest in STANDARD.successors[frontier.pop()].values():
            if dest not in seen:
                seen.add(dest)
                frontier.append(dest)
    assert seen == set(STANDARD.states)
    for state in STANDARD.working:
        assert set(STANDARD.successors[state].values()) & {"paused", "error"}
    for terminal in STANDARD.terminals:
        assert STANDARD.successors[terminal] == {}


def test_the_machine_is_built_once_and_refuses_illegal_moves() -> None:
    assert STANDARD.machine is STANDARD.machine

    class Cursor:
        state: str

    cursor = Cursor()
    STANDARD.machine.add_model(cursor, initial="expanding")
    try:
        assert not hasattr(cursor, "expanded")  # nothing is bound onto a run
        STANDARD.machine.events["expanded"].trigger(cursor)
        assert cursor.state == "calling"
        with pytest.raises(MachineError):
            STANDARD.machine.events["loop"].trigger(cursor)
        assert cursor.state == "calling"
    finally:
        STANDARD.machine.remove_model(cursor)


def test_callbacks_added_to_a_machine_still_run() -> None:
    table = attrs.evolve(STANDARD, name="copy")
    seen: list[str] = []
    table.machine.after_state_change = [lambda: seen.append("after")]
    table.machine.get_state("calling").add_callback("enter", lambda: seen.append("enter"))

    class Cursor:
        state: str

    cursor = Cursor()
    table.machine.add_model(cursor, initial="expanding")
    table.machine.events["expanded"].trigger(cursor)
    assert cursor.state == "calling" and seen == ["enter", "after"]
    table.machine.remove_model(cursor)


def test_is_path() -> None:
    assert STANDARD.is_path(["expanding", "calling", "error"])
    assert STANDARD.is_path(["expanding", "calling", "error"], ["expanded", "failed"])
    assert not STANDARD.is_path(["expanding", "calling", "error"], ["expanded", "paused"])
    assert not STANDARD.is_path(["calling", "error"])
    assert not STANDARD.is_path(["expanding", "executing"])
    assert isinstance(STANDARD, MachineTable)


# ---------------------------------------------------------------- the standard table's edges

#: The standard table's edges as they were typed out one by one before the table
#: added its pause and fail edges itself: the defaults must give exactly these.
TYPED_OUT = [
    ("expanding", "calling", Continue, "expanded"),
    ("calling", "interrupt_check", Continue, "called"),
    ("calling", "error", Failed, "failed"),
    ("calling", "paused", Paused, "paused"),
    ("interrupt_check", "executing", Continue, "clear"),
    ("interrupt_check", "interrupted", Interrupted, "interrupted"),
    ("executing", "propagating", Continue, "executed"),
    ("propagating", "until_check", Continue, "propagated"),
    ("propagating", "interrupted", Interrupted, "interrupted"),
    ("until_check", "ok", Ok, "satisfied"),
    ("until_check", "deciding", Continue, "unsatisfied"),
    ("deciding", "expanding", Continue, "loop"),
    ("deciding", "ok", Ok, "done"),
    ("deciding", "error", Failed, "failed"),
    *[
        (s, "paused", Paused, "paused")
        for s in ("expanding", "interrupt_check", "executing", "propagating")
    ],
    ("until_check", "paused", Paused, "paused"),
    ("deciding", "paused", Paused, "paused"),
    *[
        (s, "error", Failed, "failed")
        for s in ("expanding", "interrupt_check", "executing", "propagating", "until_check")
    ],
]


def test_the_standard_table_with_its_default_edges_is_the_typed_out_one() -> None:
    assert [(e.source, e.dest, e.on, e.trigger) for e in STANDARD.edges] == TYPED_OUT
    defaults = STANDARD.edges[14:]
    assert {e.why for e in defaults if e.on is Paused} == {"a step paused with a cause"}
    assert {e.why for e in defaults if e.on is Failed} == {"a callback or an added step failed"}
    assert STANDARD.default_edges
    # The edges a table holds already carry the defaults: declaring them again adds none.
    again = attrs.evolve(STANDARD, name="standard_again")
    assert again.edges == STANDARD.edges
    assert attrs.evolve(STANDARD, name="standard_typed", default_edges=False).edges == (
        STANDARD.edges
    )


def test_the_standard_machine_lives_with_its_mode() -> None:
    from agentfsm import _machine as machine
    from agentfsm._modes import standard

    assert standard.STANDARD is STANDARD
    assert not hasattr(machine, "STANDARD")  # machine.py holds the generic table only
    assert STANDARD.steps["interrupt_check"] == (standard.check_approvals,)


# ---------------------------------------------------------------- edges


def test_an_edge_reads_source_first_and_may_leave_several_states() -> None:
    one = Edge("a", "b", on=Continue, trigger="went", why="it went")
    assert (one.source, one.sources, one.dest, one.on, one.trigger, one.why) == (
        "a",
        ("a",),
        "b",
        Continue,
        "went",
        "it went",
    )
    named = Edge(source="a", dest="b", on=Continue, trigger="went", why="it went")
    assert named == one and hash(named) == hash(one)
    assert repr(one) == "Edge('a', 'b', on=Continue, trigger='went', why='it went')"
    both = Edge(("a", "b"), "c", on=Failed, trigger="failed", why="it broke")
    assert both.sources == ("a", "b")
    with pytest.raises(ValueError, match="leaves 2 states; a table holds one edge per source"):
        _ = both.source
    with pytest.raises(MachineDefinitionError, match="at least one state"):
        Edge((), "c", on=Failed, trigger="failed", why="nowhere")


def _write(result: PipelineResult, opts: Any) -> PipelineResult:
    return result


def _small(name: str, edges: tuple[Edge, ...], **kw: Any) -> MachineTable:
    return MachineTable(
        name=name,
        steps={"writing": (_write,), "reading": (_write,)},
        terminals=("ok", "paused", "error"),
        entries={"new": "writing"},
        edges=edges,
        **kw,
    )


_LOOP = (
    Edge("writing", "reading", on=Continue, trigger="wrote", why="a page is written"),
    Edge("reading", "ok", on=Ok, trigger="done", why="the pages read well"),
    Edge("reading", "writing", on=Continue, trigger="again", why="another page"),
)


def test_a_tuple_source_is_one_edge_per_source_in_the_table() -> None:
    table = _small(
        "tuple_sources",
        (
            *_LOOP,
            Edge(("writing", "reading"), "paused", on=Paused, trigger="stop", why="stopped"),
            Edge(("reading", "writing"), "error", on=Failed, trigger="broke", why="it broke"),
        ),
    )
    assert [(e.source, e.trigger, e.dest) for e in table.edges[3:]] == [
        ("writing", "stop", "paused"),
        ("reading", "stop", "paused"),
        ("reading", "broke", "error"),
        ("writing", "broke", "error"),
    ]
    assert all(e.sources == (e.source,) for e in table.edges)
    assert table.successors["reading"] == {
        "done": "ok",
        "again": "writing",
        "stop": "paused",
        "broke": "error",
    }


def test_a_table_adds_the_pause_and_fail_edges_a_state_lacks() -> None:
    mine = Edge("reading", "error", on=Failed, trigger="failed", why="the reader broke")
    table = _small("default_edges", (*_LOOP, mine))
    assert [(e.source, e.dest, e.on, e.trigger) for e in table.edges[4:]] == [
        ("writing", "paused", Paused, "paused"),
        ("reading", "paused", Paused, "paused"),
        ("writing", "error", Failed, "failed"),
    ]
    assert table.edge("reading", "failed") is table.edges[3]  # the declared edge wins
    assert table.triggers["reading"][Failed] == "failed"
    # An edge on another trigger counts as the state's own, and so does the trigger itself.
    other = Edge("writing", "ok", on=Paused, trigger="shelved", why="shelved")
    table = _small("default_edges_taken", (*_LOOP, other))
    assert table.edge("writing", "paused") is None and table.edge("writing", "shelved")
    used = Edge("writing", "error", on=Interrupted, trigger="failed", why="the writer gave up")
    with pytest.raises(
        MachineDefinitionError,
        match=r"state 'writing' has no edge on Failed; a run takes it from any state when a "
        r"step raises \(the default edge's trigger 'failed' is taken by another of its edges\)",
    ):
        _small("default_edges_refused", (*_LOOP, used))


def test_a_table_that_opts_out_of_default_edges_declares_them() -> None:
    writing_stops = (
        Edge("writing", "paused", on=Paused, trigger="paused", why="asked to stop"),
        Edge("writing", "error", on=Failed, trigger="failed", why="it broke"),
    )
    with pytest.raises(
        MachineDefinitionError,
        match=r"state 'reading' has no edge on Paused.*\(the table declares its own: default_",
    ):
        _small("no_defaults", (*_LOOP, *writing_stops), default_edges=False)
    stops = (
        Edge(("writing", "reading"), "paused", on=Paused, trigger="paused", why="asked to stop"),
        Edge(("writing", "reading"), "error", on=Failed, trigger="failed", why="it broke"),
    )
    table = _small("no_defaults", (*_LOOP, *stops), default_edges=False)
    assert len(table.edges) == 7 and not table.default_edges


def test_no_default_edge_without_its_terminal() -> None:
    with pytest.raises(
        MachineDefinitionError,
        match=r"'writing' has no edge on Paused.*to the 'paused' terminal, which this table lacks",
    ):
        MachineTable(
            name="no_paused_terminal",
            steps={"writing": (_write,), "reading": (_write,)},
            terminals=("ok", "error"),
            entries={"new": "writing"},
            edges=_LOOP,
        )
    table = MachineTable(
        name="no_paused_terminal",
        steps={"writing": (_write,), "reading": (_write,)},
        terminals=("ok", "stopped", "error"),
        entries={"new": "writing"},
        edges=(
            *_LOOP,
            Edge(("writing", "reading"), "stopped", on=Paused, trigger="stop", why="stopped"),
        ),
    )
    assert {e.dest for e in table.edges if e.on is Failed} == {"error"}
    assert {e.dest for e in table.edges if e.on is Paused} == {"stopped"}


# ---------------------------------------------------------------- deriving


def _compact(result: PipelineResult, opts: Any) -> PipelineResult:
    return result


def _edge_rows(table: MachineTable) -> list[tuple[str, str, str, str, str]]:
    return [(e.source, e.trigger, e.dest, e.on.__name__, e.why) for e in table.edges]


_TURN = ("expanding", "calling", "interrupt_check", "executing", "propagating", "until_check")


def test_insert_leads_a_continue_edge_through_the_new_state() -> None:
    table = STANDARD.insert("compacting", (_compact,), after="deciding", name="loop_compacting")
    assert table.name == "loop_compacting" and machine_named("loop_compacting") is table
    assert table.working == (*STANDARD.working, "compacting")
    assert table.steps["compacting"] == (_compact,)
    assert table.terminals == STANDARD.terminals and table.entries == STANDARD.entries
    assert table.details == STANDARD.details
    loop = STANDARD.edge("deciding", "loop")
    assert loop is not None
    rows = _edge_rows(STANDARD)
    at = rows.index(("deciding", "loop", "expanding", "Continue", loop.why))
    paused = ("compacting", "paused", "paused", "Paused", "a step paused with a cause")
    failed = ("compacting", "failed", "error", "Failed", "a callback or an added step failed")
    assert (
        _edge_rows(table)
        == [
            *rows[:at],
            ("deciding", "loop", "compacting", "Continue", loop.why),
            (
                "compacting",
                "compacting_done",
                "expanding",
                "Continue",
                "the compacting steps are done",
            ),
            *rows[at + 1 : 20],  # the declared edges and the pause edges up to deciding's
            paused,
            *rows[20:],
            failed,
        ]
    )
    assert table.is_path([*_TURN, "deciding", "compacting", "expanding", "calling", "error"])
    assert not table.is_path([*_TURN, "deciding", "expanding"])


def test_insert_takes_a_trigger_why_detail_and_edges_of_the_new_state() -> None:
    def detail(chain: Any, result: PipelineResult) -> None:
        return None

    own = Edge("checking", "interrupted", on=Interrupted, trigger="held", why="held for review")
    table = STANDARD.insert(
        "checking",
        [_compact],
        after="calling",
        name="calling_checked",
        trigger="checked",
        why="the reply passed the check",
        detail=detail,
        edges=[own],
    )
    assert table.working[:3] == ("expanding", "calling", "checking")
    assert table.details["checking"] is detail
    assert table.edge("calling", "called") == Edge(
        "calling", "checking", on=Continue, trigger="called", why="the model replied in full"
    )
    assert table.successors["checking"] == {
        "checked": "interrupt_check",
        "held": "interrupted",
        "paused": "paused",
        "failed": "error",
    }
    assert table.edge("checking", "held") is table.edges[3]  # right after its way on


def test_insert_derives_from_a_derived_table() -> None:
    once = STANDARD.insert("first", (_compact,), after="expanding", name="inserted_once")
    twice = once.insert("second", (_compact,), after="first", name="inserted_twice")
    assert twice.working[:4] == ("expanding", "first", "second", "calling")
    assert [(e.source, e.dest) for e in twice.edges[:3]] == [
        ("expanding", "first"),
        ("first", "second"),
        ("second", "calling"),
    ]
    paused = [e.source for e in twice.edges if e.on is Paused and e.trigger == "paused"]
    assert paused[1:4] == ["expanding", "first", "second"]  # after calling's own, in state order
    assert len(twice.edges) == len(STANDARD.edges) + 2 * 3


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"after": "nowhere"}, r"cannot insert 'compacting' after 'nowhere': 'nowhere' is not"),
        ({"after": "ok"}, "'ok' is not one of its working states"),
        ({"after": "interrupt_check", "state": "calling"}, "'calling' is already a state"),
        ({"after": "expanding", "state": "ok"}, "'ok' is already a state"),
        (
            {"edges": [Edge("calling", "ok", on=Ok, trigger="fine", why="fine")]},
            "edges= holds edges out of 'compacting'",
        ),
        ({"trigger": "Bad Trigger"}, "the trigger is not snake_case"),
        ({"why": ""}, "needs a one-line why"),
        ({"name": "standard"}, "Another machine named 'standard'"),
    ],
)
def test_a_bad_insert_is_refused(kw: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"after": "expanding", "name": "bad_insert", **kw}
    state = args.pop("state", "compacting")
    with pytest.raises(MachineDefinitionError, match=match):
        STANDARD.insert(state, (_compact,), **args)


def test_insert_needs_a_state_that_goes_on() -> None:
    table = _small(
        "no_going_on",
        (
            Edge("writing", "reading", on=Continue, trigger="wrote", why="a page is written"),
            Edge("reading", "ok", on=Ok, trigger="done", why="the pages read well"),
        ),
    )
    with pytest.raises(
        MachineDefinitionError,
        match=r"The no_going_on machine: cannot insert 'x' after 'reading': 'reading' has no "
        r"edge on Continue to lead through 'x'; the states that go on are \['writing'\]",
    ):
        table.insert("x", (_compact,), after="reading", name="nothing_here")


def test_insert_keeps_a_tables_choice_of_no_defaults() -> None:
    stops = (
        Edge(("writing", "reading"), "paused", on=Paused, trigger="paused", why="asked to stop"),
        Edge(("writing", "reading"), "error", on=Failed, trigger="failed", why="it broke"),
    )
    table = _small("typed_out", (*_LOOP, *stops), default_edges=False)
    with pytest.raises(MachineDefinitionError, match="state 'x' has no edge on Paused"):
        table.insert("x", (_compact,), after="writing", name="typed_out_x")
    stop_x = (
        Edge("x", "paused", on=Paused, trigger="paused", why="asked to stop"),
        Edge("x", "error", on=Failed, trigger="failed", why="it broke"),
    )
    derived = table.insert("x", (_compact,), after="writing", name="typed_out_x", edges=stop_x)
    assert not derived.default_edges
    assert [e.why for e in derived.edges if e.source == "x"] == [
        "the x steps are done",
        "asked to stop",
        "it broke",
    ]


def test_replace_swaps_a_states_steps_and_keeps_its_edges() -> None:
    table = STANDARD.replace("deciding", (_compact,), name="replaced_deciding")
    assert table.name == "replaced_deciding"
    assert table.steps["deciding"] == (_compact,)
    assert {s: v for s, v in table.steps.items() if s != "deciding"} == {
        s: v for s, v in STANDARD.steps.items() if s != "deciding"
    }
    assert table.working == STANDARD.working
    assert table.edges == STANDARD.edges
    assert table.details == STANDARD.details

    def detail(chain: Any, result: PipelineResult) -> None:
        return None

    described = STANDARD.replace("calling", [_compact], name="replaced_calling", detail=detail)
    assert described.details["calling"] is detail and described.edges == STANDARD.edges
    with pytest.raises(
        MachineDefinitionError,
        match="cannot replace the steps of 'ok': 'ok' is not one of its working states",
    ):
        STANDARD.replace("ok", (_compact,), name="replaced_ok")
    with pytest.raises(MachineDefinitionError, match="not callable"):
        STANDARD.replace("calling", ("call_llm",), name="replaced_badly")  # type: ignore[arg-type]
