"""Path cases: for every path of a machine, a scenario that drives a run along it.

A :class:`Scenario` is everything a run depends on, written down: the
conversation it starts from, the model's replies in order, the tools and what
they do, the options, the answers ``should_continue`` gives, the states where a
pause is requested and those where a step fails. :func:`path_cases` plans one
for each path of a table (:func:`agentfsm.paths.paths`) by reading the path: a
reply is chosen by what the rest of its lap does (asks for a tool that needs
approval, calls the target tool, answers), a pause edge is a requested pause, a
fail edge a failing model call or step. Each plan is run once and kept only if
its run took exactly that path; a path no plan forces is kept too, with the
reason (:attr:`PathCase.unforceable`), never dropped.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._chain import LLMChain
from .._errors import AgentfsmError, ChainError
from .._machine import Edge, MachineTable
from .._messages import Message, ToolCall, ToolResult
from .._middleware import HumanInTheLoop
from .._modes.langchain import (
    SINGLE_CALL,
    STEP,
    UNTIL_SUCCESS,
    UNTIL_TOOL_USED,
    WHILE_NEEDS_RESPONSE,
)
from .._modes.standard import StandardMode
from .._paths import Path, paths
from .._results import Continue, Failed, Paused, PipelineResult
from .._run import Run
from .._steps import reset_run_count
from .._tools import Tool, ToolOutput, tool
from .._trace import Trace

if TYPE_CHECKING:
    from _pytest.mark.structures import ParameterSet

__all__ = ["PathCase", "Scenario", "assert_took", "path_cases"]

_Key = tuple[str, str]

# ---------------------------------------------------------------- the tools scenarios use


@tool
def lookup(q: str) -> str:
    """Look something up; the model goes on after it."""
    return f"found {q}"


@tool
def target(answer: str) -> str:
    """The tool a run waits for (option ``tool_names``)."""
    return f"submitted {answer}"


@tool
def guarded(path: str) -> str:
    """A tool that needs approval before it runs."""
    return f"deleted {path}"


@tool
def interrupting(question: str) -> ToolOutput:
    """A tool that stops the run to ask a human."""
    return ToolOutput(f"asked: {question}", interrupt={"question": question})


@tool
def broken() -> str:
    """A tool that always fails."""
    raise RuntimeError("broken on purpose")


#: The tools every scenario offers the model.
TOOLS: Final[tuple[Tool, ...]] = (lookup, target, guarded, interrupting, broken)

#: What each kind of reply asks for: a tool and its arguments, or nothing (text).
_CALLS: Final[Mapping[str, tuple[str, dict[str, Any]] | None]] = {
    "say": None,
    "lookup": ("lookup", {"q": "weather"}),
    "target": ("target", {"answer": "42"}),
    "guarded": ("guarded", {"path": "/tmp/x"}),
    "interrupting": ("interrupting", {"question": "go on?"}),
    "broken": ("broken", {}),
}


def _reply(kind: str, index: int) -> Message:
    call = _CALLS[kind]
    if call is None:
        return Message.assistant(f"answer {index}")
    name, arguments = call
    return Message.assistant(
        None, [ToolCall(call_id=f"call_{index}", name=name, arguments=arguments)]
    )


def _tool_message(kind: str, index: int) -> Message:
    """The results a reply of ``kind`` gets, as if its tool had run."""
    call = _CALLS[kind]
    assert call is not None
    name = call[0]
    result = ToolResult(tool_call_id=f"call_{index}", name=name, content=f"{name} done")
    if kind == "interrupting":
        result = attrs.evolve(result, is_interrupt=True, interrupt_data={"question": "go on?"})
    elif kind == "broken":
        result = attrs.evolve(result, is_error=True)
    return Message.tool([result])


def _failure() -> ChainError:
    return ChainError("bad_request", "the scenario's model call fails", retryable=False)


# ---------------------------------------------------------------- scenarios


class _ScenarioFault(AgentfsmError, RuntimeError):
    """Raised by a scenario's step where its path takes a fail edge."""


class _Director:
    """Counts the visits of each state of one run; requests the scenario's pauses."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.visits: dict[str, int] = {}

    def enter(self, run: Run, state: str) -> None:
        visit = self.visits.get(state, -1) + 1
        self.visits[state] = visit
        if (state, visit) in self.scenario.pauses:
            run.request_pause("requested by the scenario")

    def transition(self, run: Run, transition: Any) -> None:
        if not run.done:
            self.enter(run, transition.dest)

    def fault(self, state: str) -> Callable[[PipelineResult, Any], PipelineResult]:
        def fail_here(result: PipelineResult, opts: Any = None) -> PipelineResult:
            if isinstance(result, Continue) and (state, self.visits[state]) in self.scenario.faults:
                raise _ScenarioFault(f"the {state} step fails (visit {self.visits[state] + 1})")
            return result

        return fail_here


@attrs.frozen
class Scenario:
    """What a run is given, so that it goes one way: a test's whole world, declared.

    ``messages`` start the conversation; ``replies`` are the model's, in order
    (a :class:`~agentfsm.ChainError` is a failing call); ``tools`` are offered;
    ``options`` go to the run; ``decisions`` are ``should_continue``'s answers
    in order; ``pauses`` and ``faults`` are ``(state, visit)`` pairs (visit 0
    is the first time the run is in that state) where a pause is requested
    before the state's work, or where a step of the state fails.
    """

    table: MachineTable
    entry: str
    messages: tuple[Message, ...]
    replies: tuple[Message | ChainError, ...] = ()
    tools: tuple[Tool, ...] = TOOLS
    options: Mapping[str, Any] = attrs.field(factory=dict)
    decisions: tuple[bool, ...] = ()
    pauses: frozenset[tuple[str, int]] = frozenset()
    faults: frozenset[tuple[str, int]] = frozenset()

    def model(self) -> Any:
        """A scripted model that gives :attr:`replies` in order."""
        # import time: the plugin loads with pytest, this on use
        from agentfsm.providers import ScriptedModel

        return ScriptedModel(list(self.replies), model_name=f"{self.table.name}-scenario")

    def start(self, *, model: Any = None) -> Run:
        """A run of the scenario, at its entry, not yet stepped."""
        chain = LLMChain(model if model is not None else self.model(), tools=self.tools)
        chain = chain.add_messages(self.messages)
        director = _Director(self)
        options = dict(self.options)
        if self.faults:
            options["extra_steps"] = {
                state: [director.fault(state)] for state in {s for s, _ in self.faults}
            }
        if self.decisions:
            answers = iter(self.decisions)
            options["should_continue"] = lambda chain: next(answers, False)
        run = _starter(self.table)(self.table, chain, self.entry, options)
        run.add_hook(director)
        director.enter(run, run.state)
        return run

    def run(self, *, model: Any = None) -> Run:
        """The scenario run to its end."""
        run = self.start(model=model)
        run.run_sync()
        return run


Starter = Callable[[MachineTable, LLMChain, str, Mapping[str, Any]], Run]


def _start_standard(
    table: MachineTable, chain: LLMChain, entry: str, opts: Mapping[str, Any]
) -> Run:
    return StandardMode(table).start(chain, opts)


def _start_counted(
    table: MachineTable, chain: LLMChain, entry: str, opts: Mapping[str, Any]
) -> Run:
    return Run(table, reset_run_count(chain), table.entries[entry], opts)


def _start_plain(table: MachineTable, chain: LLMChain, entry: str, opts: Mapping[str, Any]) -> Run:
    return Run(table, chain, table.entries[entry], opts)


_STANDARD_ENTRIES: Final = frozenset({"fresh", "pending tool calls", "tool results"})


def _starter(table: MachineTable) -> Starter:
    if table is WHILE_NEEDS_RESPONSE:
        return _start_counted
    if set(table.entries) >= _STANDARD_ENTRIES and table not in _LANGCHAIN:
        return _start_standard
    return _start_plain


# ---------------------------------------------------------------- planning


@attrs.frozen
class _Profile:
    """How to read a machine's paths: which state asks the model, which reply each
    lap needs, what the conversation starts with, and the options."""

    #: The state whose every visit (but a paused one) asks the model once.
    calling: str
    #: ``(edge in the lap, reply kind)``, the first whose edge the lap takes wins.
    rules: tuple[tuple[_Key, str], ...]
    #: The reply when no rule matches.
    default: str
    #: The tail of the starting conversation, by entry and the reply kind of the
    #: lap before the first model call (or None when no rule matched).
    start: Callable[[str, str | None], tuple[Message, ...]]
    options: Callable[[Path], dict[str, Any]] = lambda path: {}
    #: The state that asks ``should_continue``, if any.
    deciding: str | None = None


def _user_only(entry: str, kind: str | None) -> tuple[Message, ...]:
    return ()


def _answered_first(entry: str, kind: str | None) -> tuple[Message, ...]:
    return (_reply("say", 0),) if kind == "say" else ()


def _standard_start(entry: str, kind: str | None) -> tuple[Message, ...]:
    if entry == "fresh":
        return ()
    kind = "lookup" if kind in (None, "say") else kind  # the entry is a tool call
    if entry == "pending tool calls":
        return (_reply(kind, 0),)
    return (_reply(kind, 0), _tool_message(kind, 0))


def _standard_options(path: Path) -> dict[str, Any]:
    options: dict[str, Any] = {"middleware": [HumanInTheLoop(interrupt_on={"guarded": True})]}
    if ("until_check", "satisfied") in _keys(path.edges):
        options["tool_names"] = ["target"]
    return options


def _until_tool_options(path: Path) -> dict[str, Any]:
    if ("checking_tools", "failed") in _keys(path.edges):
        return {"tool_names": ["missing"]}
    return {"tool_names": ["target"]}


_STANDARD_RULES: Final[tuple[tuple[_Key, str], ...]] = (
    (("interrupt_check", "interrupted"), "guarded"),
    (("propagating", "interrupted"), "interrupting"),
    (("until_check", "satisfied"), "target"),
    (("deciding", "done"), "say"),
)

_STANDARD_PROFILE: Final = _Profile(
    calling="calling",
    rules=_STANDARD_RULES,
    default="lookup",
    start=_standard_start,
    options=_standard_options,
)

_PROFILES: Final[Mapping[str, _Profile]] = {
    SINGLE_CALL.name: _Profile(calling="calling", rules=(), default="say", start=_user_only),
    STEP.name: _Profile(
        calling="stepping", rules=(), default="say", start=_user_only, deciding="deciding"
    ),
    WHILE_NEEDS_RESPONSE.name: _Profile(
        calling="calling",
        rules=((("deciding", "done"), "say"),),
        default="lookup",
        start=_answered_first,
    ),
    UNTIL_SUCCESS.name: _Profile(
        calling="calling",
        rules=((("checking", "succeeded"), "say"),),
        default="broken",
        start=_answered_first,
    ),
    UNTIL_TOOL_USED.name: _Profile(
        calling="calling",
        rules=((("until_check", "satisfied"), "target"), (("deciding", "done"), "say")),
        default="lookup",
        start=_user_only,
        options=_until_tool_options,
    ),
}

_LANGCHAIN: Final = (SINGLE_CALL, STEP, WHILE_NEEDS_RESPONSE, UNTIL_SUCCESS, UNTIL_TOOL_USED)


def _profile(table: MachineTable) -> _Profile | None:
    if table.name in _PROFILES and table in _LANGCHAIN:
        return _PROFILES[table.name]
    if set(table.entries) >= _STANDARD_ENTRIES and "calling" in table.steps:
        return _STANDARD_PROFILE
    return None


def _keys(edges: Iterable[Edge]) -> set[_Key]:
    return {(e.source, e.trigger) for e in edges}


def _kind(profile: _Profile, lap: Sequence[Edge]) -> str | None:
    keys = _keys(lap)
    for key, kind in profile.rules:
        if key in keys:
            return kind
    return None


def _plan(table: MachineTable, path: Path, profile: _Profile) -> Scenario:
    edges = path.edges
    calls = [i for i, e in enumerate(edges) if e.source == profile.calling]
    first = calls[0] if calls else len(edges)
    tail = profile.start(path.entry, _kind(profile, edges[:first]))
    replies: list[Message | ChainError] = []
    decisions: list[bool] = []
    pauses: set[tuple[str, int]] = set()
    faults: set[tuple[str, int]] = set()
    visits: dict[str, int] = {}
    for i, edge in enumerate(edges):
        visit = visits.get(edge.source, -1) + 1
        visits[edge.source] = visit
        if edge.on is Paused:
            pauses.add((edge.source, visit))
            continue
        if edge.source == profile.calling:
            if edge.on is Failed:
                replies.append(_failure())
                continue
            after = [j for j in calls if j > i]
            lap = edges[i + 1 : after[0] if after else len(edges)]
            kind = _kind(profile, lap) or profile.default
            replies.append(_reply(kind, len(replies) + 1))
            continue
        if edge.source == profile.deciding:
            decisions.append(edge.trigger != "done")  # a failing step needs Continue
        if edge.on is Failed and not _natural_failure(table, path, edge):
            faults.add((edge.source, visit))
    return Scenario(
        table=table,
        entry=path.entry,
        messages=(Message.user("go"), *tail),
        replies=tuple(replies),
        options=profile.options(path),
        decisions=tuple(decisions),
        pauses=frozenset(pauses),
        faults=frozenset(faults),
    )


def _natural_failure(table: MachineTable, path: Path, edge: Edge) -> bool:
    """A fail edge the options already cause (a target tool the chain lacks)."""
    return table is UNTIL_TOOL_USED and edge.source == "checking_tools"


# ---------------------------------------------------------------- cases


def _took(trace: Trace) -> tuple[tuple[str, str, str], ...]:
    return tuple((t.source, t.trigger, t.dest) for t in trace)


def _path_steps(path: Path) -> tuple[tuple[str, str, str], ...]:
    return tuple((e.source, e.trigger, e.dest) for e in path.edges)


def assert_took(run: Run | Trace, path: Path) -> None:
    """Fail with both paths unless the run took exactly ``path``'s edges."""
    trace = run.trace if isinstance(run, Run) else run
    took, wanted = _took(trace), _path_steps(path)
    if took == wanted:
        return
    lines = [f"the run took another path than {path.text!r}", "", "wanted:"]
    lines += [f"  {i:>3} {s} --{t}--> {d}" for i, (s, t, d) in enumerate(wanted)]
    lines += ["took:"]
    lines += [f"  {i:>3} {s} --{t}--> {d}" for i, (s, t, d) in enumerate(took)]
    raise AssertionError("\n".join(lines))


@attrs.frozen
class PathCase:
    """One path of a machine and the scenario that takes it.

    ``unforceable`` says why no scenario takes the path (and then ``scenario``
    is the closest one planned, whose run goes elsewhere); None when it does.
    """

    table: MachineTable
    path: Path
    scenario: Scenario | None
    unforceable: str | None = None

    @property
    def id(self) -> str:
        """The test id: the machine and the path's states."""
        return f"{self.table.name}: {self.path.text}"

    def run(self) -> Run:
        """The scenario's run, to its end."""
        if self.scenario is None:
            raise AssertionError(f"{self.id} cannot be forced: {self.unforceable}")
        return self.scenario.run()

    def check(self) -> Run:
        """Run the scenario and assert its trace is exactly the path; the run."""
        run = self.run()
        assert_took(run, self.path)
        return run

    @property
    def param(self) -> ParameterSet:
        """The case for ``pytest.mark.parametrize``; an unforceable one is a strict xfail."""
        # pytest is the test extra's: only a parametrized case needs it
        import pytest

        marks: tuple[Any, ...] = ()
        if self.unforceable is not None:
            marks = (pytest.mark.xfail(strict=True, reason=f"unforceable: {self.unforceable}"),)
        return pytest.param(self, id=self.id, marks=marks)


def path_cases(
    table: MachineTable,
    *,
    loops: int = 1,
    plan: Callable[[Path], Scenario | None] | None = None,
) -> list[PathCase]:
    """A case for every path of ``table`` (:func:`agentfsm.paths.paths`, same ``loops``).

    Each case's scenario was run once and took its path; a path no scenario
    takes is a case with :attr:`PathCase.unforceable` saying why. The scenarios
    are planned here for the standard machine, the machines derived from it and
    the LangChain modes'; ``plan(path)`` plans them for any other machine (None:
    no scenario for that path), and is checked the same way; a scenario of the plan
    that raises is a ValueError naming its path (a strict xfail would test nothing).
    """
    profile = _profile(table)
    out: list[PathCase] = []
    for path in paths(table, loops=loops):
        if plan is not None:
            planned = plan(path)
            if planned is None:
                out.append(
                    PathCase(
                        table=table,
                        path=path,
                        scenario=None,
                        unforceable="the plan gives no scenario for it",
                    )
                )
            else:
                out.append(_verified(table, path, planned, planned_by_user=True))
            continue
        if profile is None:
            out.append(
                PathCase(
                    table=table,
                    path=path,
                    scenario=None,
                    unforceable=f"no scenario planner knows the {table.name} machine "
                    "(its entries are neither the standard ones nor a LangChain mode's); "
                    "pass plan=",
                )
            )
            continue
        scenario = _plan(table, path, profile)
        out.append(_verified(table, path, scenario))
    return out


#: True while :func:`path_cases` tries its scenarios: coverage counts none of those runs.
PLANNING: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "agentfsm_planning", default=False
)


def _verified(
    table: MachineTable, path: Path, scenario: Scenario, *, planned_by_user: bool = False
) -> PathCase:
    token = PLANNING.set(True)
    try:
        run = scenario.run()
    except Exception as exc:
        if planned_by_user:  # a broken plan is an error, never a case that tests nothing
            raise ValueError(
                f"The plan's scenario for the path {path.text!r} raised "
                f"{type(exc).__name__}: {exc}. A plan gives a scenario that runs, or None "
                "for a path it cannot force."
            ) from exc
        reason = f"its scenario raised {type(exc).__name__}: {exc}"  # the planner's own
        return PathCase(table=table, path=path, scenario=scenario, unforceable=reason)
    finally:
        PLANNING.reset(token)
    took = _took(run.trace)
    if took == _path_steps(path):
        return PathCase(table=table, path=path, scenario=scenario)
    states = " ".join([run.trace.entry, *(d for _, _, d in took)])
    reason = f"{_why(table, path)}; the closest scenario takes {states!r}"
    return PathCase(table=table, path=path, scenario=scenario, unforceable=reason)


def _why(table: MachineTable, path: Path) -> str:
    """What the path asks that no run can do, as far as the plan sees it."""
    profile = _profile(table)
    edges = path.edges
    if profile is not None and path.entry != "fresh":
        before = next((i for i, e in enumerate(edges) if e.source == profile.calling), len(edges))
        for edge in edges[:before]:
            if (edge.source, edge.trigger) in dict(profile.rules) and dict(profile.rules)[
                (edge.source, edge.trigger)
            ] == "say":
                return (
                    f"{edge.source} --{edge.trigger}--> {edge.dest} needs the model to have "
                    f"answered ({edge.why}), but no model call comes before it and a run "
                    f"entering at {path.entry!r} holds a tool call or result, so its chain "
                    "needs a response"
                )
    return f"no planned scenario takes it (the path: {path.situation})"
