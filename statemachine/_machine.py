"""Machines: a table of states, entries, edges and each state's steps.

A :class:`MachineTable` is the single source of truth of a machine: the shared
``transitions.Machine`` is built from it (once), runs move along it, each working
state's work is its steps, and the diagrams are drawn from it, so every trace is
a path of the published diagram. A table that is not a machine is refused when
it is declared (:class:`MachineDefinitionError`, naming the state at fault); a
declared machine is found again by its name (:func:`machine_named`), which is how
a saved run finds the machine it ran on. A table has a :attr:`~MachineTable.version`
(several versions of one name may be declared) and a :attr:`~MachineTable.fingerprint`
of what its runs depend on, so a saved run knows whether its machine changed (see
:mod:`agentfsm.versions`). A table derives others
(:meth:`MachineTable.insert`, :meth:`MachineTable.replace`), each checked and
named like any declared one. The standard machine is declared this way in
:mod:`agentfsm.modes.standard`.

One idea: the table and what makes a table a machine. Its checks, its default edges, its
work (steps piped) and the registry of declared tables by name all read the table's
fields, and the table runs them when it is made.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

from ._chain import LLMChain
from ._errors import MachineDefinitionError, UnknownMachineError
from ._identity import compute_identity, fingerprint_of, step_name
from ._options import Options
from ._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from ._steps import Step

if TYPE_CHECKING:
    from transitions import Machine

__all__ = [
    "COROUTINE",
    "RESULTS",
    "Detail",
    "Edge",
    "MachineDefinitionError",
    "MachineTable",
    "Outcome",
    "UnknownMachineError",
    "Work",
    "fingerprint_of",
    "identity",
    "machine_named",
    "machine_versions",
    "not_a_result",
    "step_name",
]

#: The last release's shape of a state's work's result, with a detail; kept for one release.
Outcome: TypeAlias = tuple[PipelineResult, Mapping[str, Any] | None]
#: A state's work, its steps piped: ``Continue(chain)`` and the run's options in, the
#: result out (directly when no step awaited anything). A state of one step is that step.
Work: TypeAlias = Callable[
    [Continue, Mapping[str, Any]], PipelineResult | Awaitable[PipelineResult]
]
#: What a state's transition records about its work (``Transition.detail``), from the
#: chain the state started with and the result its steps gave.
Detail: TypeAlias = Callable[[LLMChain, PipelineResult], Mapping[str, Any] | None]

#: The classes a step may return.
RESULTS: Final[frozenset[type[Any]]] = frozenset({Continue, Ok, Paused, Interrupted, Failed})
_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")
#: What most awaitable steps return: checked by class before ``inspect.isawaitable``.
COROUTINE: Final[type[Any]] = types.CoroutineType


def _sources(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        sources: tuple[Any, ...] = (value,)  # a source that is not a state name is checked later
    else:
        sources = tuple(value)
    if not sources:
        raise MachineDefinitionError("An edge leaves at least one state; its source is empty")
    return sources


@attrs.frozen(init=False, repr=False)
class Edge:
    """One transition: when ``source``'s work returns an ``on`` result, ``trigger``
    moves the run to ``dest``, because ``why``.

    ``source`` may name several states (``("expanding", "executing")``): the table
    holds one edge per source, in that order, so each of its edges has one.
    """

    #: The states the edge leaves; one, in a table.
    sources: tuple[str, ...]
    dest: str
    #: The result type of ``source``'s work that fires this edge.
    on: type[PipelineResult]
    trigger: str
    why: str

    def __init__(
        self,
        source: str | Iterable[str],
        dest: str,
        *,
        on: type[PipelineResult],
        trigger: str,
        why: str,
    ) -> None:
        self.__attrs_init__(sources=_sources(source), dest=dest, on=on, trigger=trigger, why=why)

    @property
    def source(self) -> str:
        """The state the edge leaves (a table's edges leave one each)."""
        if len(self.sources) != 1:
            raise ValueError(
                f"{self!r} leaves {len(self.sources)} states; a table holds one edge per source"
            )
        return self.sources[0]

    def __repr__(self) -> str:
        source = self.sources[0] if len(self.sources) == 1 else self.sources
        on = getattr(self.on, "__name__", self.on)
        return (
            f"Edge({source!r}, {self.dest!r}, on={on}, trigger={self.trigger!r}, why={self.why!r})"
        )


def _steps(value: Mapping[str, Iterable[Step]]) -> dict[str, tuple[Step, ...]]:
    for state, steps in value.items():
        if callable(steps) or isinstance(steps, str):
            raise MachineDefinitionError(
                f"The steps of state {state!r} are a sequence of steps: write ({steps!r},)"
            )
    return {state: tuple(steps) for state, steps in value.items()}


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _edges(value: Iterable[Edge]) -> tuple[Edge, ...]:
    """One edge per source: an edge from several states becomes one from each."""
    out: list[Edge] = []
    for e in value:
        if isinstance(e, Edge) and len(e.sources) > 1:
            out += [Edge(s, e.dest, on=e.on, trigger=e.trigger, why=e.why) for s in e.sources]
        else:
            out.append(e)  # a non-edge is named by the checks
    return tuple(out)


def _entries(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _details(value: Mapping[str, Detail]) -> dict[str, Detail]:
    return dict(value)


@attrs.frozen(repr=False)
class MachineTable:
    """A machine: each working state's steps, the terminals, the entries and the edges.

    Declaring one checks that it is a machine (see :class:`MachineDefinitionError`)
    and makes it findable by name. A run in a working state pipes the state's
    steps (each ``step(result, opts)``, async or not) until one returns a result
    that is not ``Continue``, or none is left; the type of that result picks the
    edge out (:attr:`Edge.on`). Any state can pause (``Run.request_pause``, a
    cancelled task) and fail (a step that raises), so each has an edge on
    ``Paused`` and one on ``Failed``: the table adds them (see
    :attr:`default_edges`) where it has the ``paused`` and ``error`` terminals.
    """

    #: Names the machine in saved runs and diagrams; snake_case, unique per process.
    name: str
    #: Each working state's steps, in the order they run; the order of the states
    #: is the order diagrams read them in.
    steps: Mapping[str, tuple[Step, ...]] = attrs.field(converter=_steps)
    terminals: tuple[str, ...] = attrs.field(converter=_names)
    #: Where a run starts, by the situation its chain is in.
    entries: Mapping[str, str] = attrs.field(converter=_entries)
    #: The declared edges, one per source, then the default ones (:attr:`default_edges`).
    edges: tuple[Edge, ...] = attrs.field(converter=_edges)
    #: What each state's transitions record about its work, for the states that say.
    details: Mapping[str, Detail] = attrs.field(factory=dict, converter=_details)
    #: The class of its runs' options (:class:`~agentfsm.options.Options` or a subclass).
    options: type[Options] = attrs.field(default=Options, kw_only=True)
    #: Whether each working state with no edge on ``Paused`` gets one to the
    #: ``paused`` terminal (trigger ``paused``), and each with none on ``Failed`` one
    #: to ``error`` (trigger ``failed``), when the table has that terminal and the
    #: state has no other edge with that trigger. Declared edges win; the defaults
    #: follow them, the pause edges first, in the order of the states.
    default_edges: bool = attrs.field(default=True, kw_only=True)
    #: Which version of the machine called :attr:`name` this is: a changed machine that
    #: runs in flight may meet is declared with the next one (several may be declared).
    version: int = attrs.field(default=1, kw_only=True)

    def __repr__(self) -> str:
        """The table by name, version and size: ``help(Agent)`` and a traceback show
        which machine, not every step of it."""
        return (
            f"<MachineTable {self.name} v{self.version}: {len(self.working)} working states, "
            f"{len(self.edges)} edges>"
        )

    def __attrs_post_init__(self) -> None:
        if self.default_edges:
            object.__setattr__(self, "edges", (*self.edges, *_defaults(self)))
        _check(self)
        declare(self)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A stable hash of what a run depends on: the states, the entries, the edges
        (source, dest, trigger, result type) and each state's steps, by qualified name
        and by code (:mod:`agentfsm._identity` says exactly what a step's code covers:
        its source, the plain data it was made with).

        The ``why`` texts, the details, the options and the order the states are
        listed in are left out: rewording an edge or redrawing the diagram keeps the
        fingerprint, and saved runs go on. Moving a step to another module keeps it;
        renaming it, or changing its body or the arguments it was made with, changes it.
        """
        return fingerprint_of(self._identity)

    @functools.cached_property
    def _identity(self) -> Mapping[str, Any]:
        return compute_identity(self)

    @functools.cached_property
    def working(self) -> tuple[str, ...]:
        return tuple(self.steps)

    @functools.cached_property
    def children(self) -> Mapping[str, tuple[MachineTable, ...]]:
        """``{state: child machines}``: the machines a state's steps run as their work
        (a step whose ``machine`` attribute is a table), for the states that have any."""
        found: dict[str, tuple[MachineTable, ...]] = {}
        for state, its_steps in self.steps.items():
            tables = tuple(
                child
                for step in its_steps
                if isinstance(child := getattr(step, "machine", None), MachineTable)
            )
            if tables:
                found[state] = tables
        return found

    @functools.cached_property
    def states(self) -> tuple[str, ...]:
        return (*self.working, *self.terminals)

    @functools.cached_property
    def machine(self) -> Machine:
        """The one ``transitions.Machine`` of this table; runs are added to it as models."""
        from ._fsm import SharedMachine  # import time: transitions loads with the first run

        return SharedMachine(
            model=None,
            states=list(self.states),
            transitions=[
                {"trigger": e.trigger, "source": e.source, "dest": e.dest} for e in self.edges
            ],
            initial=None,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )

    @functools.cached_property
    def triggers(self) -> Mapping[str, Mapping[type[PipelineResult], str]]:
        """``{state: {result type: trigger}}``: the trigger each result of a state fires."""
        out: dict[str, dict[type[PipelineResult], str]] = {s: {} for s in self.working}
        for e in self.edges:
            out[e.source][e.on] = e.trigger
        return out

    @functools.cached_property
    def exits(
        self,
    ) -> Mapping[str, Mapping[type[PipelineResult], tuple[str, Any, Detail | None]]]:
        """``{state: {result type: (trigger, event, detail)}}``: :attr:`triggers` with the
        shared machine's event of each and the state's :attr:`details`, so a run's step
        looks up its way out and how to describe it at once."""
        events = self.machine.events
        return {
            state: {
                kind: (trigger, events[trigger], self.details.get(state))
                for kind, trigger in by_kind.items()
            }
            for state, by_kind in self.triggers.items()
        }

    @functools.cached_property
    def _work(self) -> Mapping[str, Work]:
        return {s: _pipe(steps) for s, steps in self.steps.items()}

    def work(self, extra_steps: Mapping[str, Sequence[Step]] | None = None) -> Mapping[str, Work]:
        """Each working state's steps as one callable, ``work[state](chain, opts)``.

        ``extra_steps`` (``{"calling": [my_check]}``) run after a state's own steps.
        """
        if not extra_steps:
            return self._work
        unknown = sorted(set(extra_steps) - set(self.steps))
        if unknown:
            raise ValueError(
                f"extra_steps names unknown state(s) {unknown}; states: {list(self.steps)}"
            )
        work = dict(self._work)
        for state, extra in extra_steps.items():
            added = tuple(extra)
            for step in added:
                if not callable(step):
                    raise ValueError(f"extra_steps[{state!r}]: {step!r} is not a step")
            work[state] = _pipe((*self.steps[state], *added))
        return work

    @functools.cached_property
    def successors(self) -> Mapping[str, Mapping[str, str]]:
        """``{source: {trigger: dest}}``."""
        out: dict[str, dict[str, str]] = {s: {} for s in self.states}
        for e in self.edges:
            out[e.source][e.trigger] = e.dest
        return out

    def edge(self, source: str, trigger: str) -> Edge | None:
        for e in self.edges:
            if e.source == source and e.trigger == trigger:
                return e
        return None

    @staticmethod
    def named(name: str, version: int | None = None) -> MachineTable:
        """The declared machine called ``name`` (of ``version``; none, the newest): how a
        saved run finds the machine it ran on. UnknownMachineError if none is declared."""
        return machine_named(name, version)

    def is_path(self, states: Sequence[str], triggers: Iterable[str] | None = None) -> bool:
        """Whether ``states`` starts at an entry and follows edges of the table."""
        if not states or states[0] not in self.entries.values():
            return False
        pairs = list(itertools.pairwise(states))
        if triggers is None:
            return all(b in self.successors[a].values() for a, b in pairs)
        return all(
            self.successors[a].get(t) == b for (a, b), t in zip(pairs, triggers, strict=True)
        )

    # ------------------------------------------------------------ deriving

    def insert(
        self,
        state: str,
        steps: Iterable[Step],
        *,
        after: str,
        name: str,
        version: int = 1,
        trigger: str | None = None,
        why: str | None = None,
        detail: Detail | None = None,
        edges: Iterable[Edge] = (),
    ) -> MachineTable:
        """This machine with working ``state`` (running ``steps``) where ``after`` goes on.

        ``after``'s ``Continue`` edge (a state has at most one) now enters
        ``state``, with its trigger and why; ``state`` leaves on ``Continue`` to
        where that edge went, by ``trigger`` (default ``<state>_done``) because
        ``why``. ``after``'s other edges, and the entries, stay as they are: a run
        that enters the old successor by an entry or another edge does not pass
        through ``state``. ``edges`` are more edges out of ``state`` (on
        ``Failed`` with a why of its own, say); they win over the default pause
        and fail edges it gets otherwise. ``state`` comes after ``after`` in the
        order of the states; ``detail`` is what its transitions record. The new
        table is ``name``'s ``version`` (a next version of this machine keeps its name).
        """
        fail = _deriving(self, f"cannot insert {state!r} after {after!r}")
        if state in self.states:
            raise fail(f"{state!r} is already a state of it")
        if after not in self.steps:
            raise fail(f"{after!r} is not one of its working states {list(self.working)}")
        through = self.exit(after, Continue)
        if through is None:
            going_on = [s for s in self.working if self.exit(s, Continue) is not None]
            raise fail(
                f"{after!r} has no edge on Continue to lead through {state!r}; "
                f"the states that go on are {going_on}"
            )
        own = _edges(edges)
        for e in own:
            if not isinstance(e, Edge) or e.sources != (state,):
                raise fail(f"edges= holds edges out of {state!r}; {e!r} is not one")
        onward = Edge(
            state,
            through.dest,
            on=Continue,
            trigger=trigger if trigger is not None else f"{state}_done",
            why=why if why is not None else f"the {state} steps are done",
        )
        into = Edge(after, state, on=Continue, trigger=through.trigger, why=through.why)
        table_edges: list[Edge] = []
        for e in self._declared:
            table_edges += [into, onward, *own] if e is through else [e]
        table_steps: dict[str, Iterable[Step]] = {}
        for s, its_steps in self.steps.items():
            table_steps[s] = its_steps
            if s == after:
                table_steps[state] = steps
        details = dict(self.details)
        if detail is not None:
            details[state] = detail
        return self._derived(name, version, table_steps, table_edges, details)

    def replace(
        self,
        state: str,
        steps: Iterable[Step],
        *,
        name: str,
        version: int = 1,
        detail: Detail | None = None,
    ) -> MachineTable:
        """This machine with working ``state`` running ``steps`` instead: same edges.

        ``detail`` replaces what the state's transitions record; none keeps its own.
        """
        if state not in self.steps:
            raise _deriving(self, f"cannot replace the steps of {state!r}")(
                f"{state!r} is not one of its working states {list(self.working)}"
            )
        details = dict(self.details)
        if detail is not None:
            details[state] = detail
        return self._derived(name, version, {**self.steps, state: steps}, self._declared, details)

    def exit(self, state: str, on: type[PipelineResult]) -> Edge | None:
        """The edge out of ``state`` that an ``on`` result fires, if it has one."""
        for e in self.edges:
            if e.on is on and e.source == state:
                return e
        return None

    @property
    def _declared(self) -> tuple[Edge, ...]:
        """The edges but the default ones, which a derived table adds again in its order."""
        if not self.default_edges:
            return self.edges
        return tuple(e for e in self.edges if _DEFAULTS.get(e.on) != (e.dest, e.trigger, e.why))

    def _derived(
        self,
        name: str,
        version: int,
        steps: Mapping[str, Iterable[Step]],
        edges: Iterable[Edge],
        details: Mapping[str, Detail],
    ) -> MachineTable:
        return MachineTable(
            name=name,
            steps=steps,
            terminals=self.terminals,
            entries=self.entries,
            edges=edges,
            details=details,
            default_edges=self.default_edges,
            options=self.options,
            version=version,
        )


# ---------------------------------------------------------------- identity


# step_name and fingerprint_of live in ._identity, which says what a fingerprint covers.


def identity(table: MachineTable) -> Mapping[str, Any]:
    """What :attr:`MachineTable.fingerprint` hashes, as plain JSON data (read once per
    table; the caller does not change it)."""
    return table._identity


# ---------------------------------------------------------------- a state's steps, piped


def _pipe(steps: tuple[Step, ...]) -> Work:
    """``steps`` as one state's work: each in turn, until a result is not ``Continue``.

    A state of one step has that step as its work: the run checks what it returns (and
    awaits it when it is awaitable). Of several, steps that return their result
    directly run without a coroutine; from the first one that returns an awaitable on,
    the work goes on in one.
    """
    if len(steps) == 1:
        return steps[0]

    def work(
        start: Continue, opts: Mapping[str, Any]
    ) -> PipelineResult | Awaitable[PipelineResult]:
        result: Any = start
        rest = iter(steps)
        for step in rest:
            result = step(result, opts)
            if result.__class__ is not Continue:
                if result.__class__ not in RESULTS:
                    return _awaiting(result, step, rest, opts)
                break
        return result  # type: ignore[no-any-return]

    return work


async def _awaiting(
    out: Any, step: Step, rest: Iterator[Step], opts: Mapping[str, Any]
) -> PipelineResult:
    """The rest of a state's work, from the awaitable ``step`` returned."""
    while True:
        if out.__class__ is not COROUTINE and not inspect.isawaitable(out):
            raise TypeError(not_a_result(step, out))
        result = await out
        if result.__class__ not in RESULTS:
            raise TypeError(not_a_result(step, result))
        awaiting = False
        if result.__class__ is Continue:
            for step in rest:
                out = step(result, opts)
                if out.__class__ is Continue:
                    result = out
                    continue
                if out.__class__ in RESULTS:
                    result = out
                else:
                    awaiting = True
                break
        if not awaiting:
            return result  # type: ignore[no-any-return]


def not_a_result(step: object, value: Any) -> str:
    """Why ``value``, which ``step`` returned, ends its run: it is no pipeline result."""
    name = getattr(step, "__qualname__", repr(step))
    return (
        f"the step {name} returned {type(value).__name__}, not a pipeline result "
        "(Continue, Ok, Paused, Interrupted or Failed)"
    )


# ---------------------------------------------------------------- checks and names


#: The declared machines, by name and version: how a saved run finds the machine it ran
#: on. It holds the tables a program declares (a handful), never anything per run; only
#: :func:`declare` and :func:`forget` change it.
_DECLARED: dict[str, dict[int, MachineTable]] = {}


def machine_named(name: str, version: int | None = None) -> MachineTable:
    """The declared machine called ``name``: how a saved run finds the machine it ran on.

    ``version`` picks one of its versions; none, the newest declared.
    """
    versions = _DECLARED.get(name)
    if not versions:
        raise UnknownMachineError(
            f"No machine named {name!r} is declared in this process (declared: "
            f"{sorted(_DECLARED)}). Import the module that declares it before loading "
            "or resuming runs made on it."
        )
    if version is None:
        return versions[max(versions)]
    try:
        return versions[version]
    except KeyError:
        raise UnknownMachineError(
            f"The {name} machine has no version {version!r} declared in this process "
            f"(declared: {sorted(versions)})."
        ) from None


def machine_versions(name: str) -> tuple[MachineTable, ...]:
    """Every declared version of the machine called ``name``, oldest first."""
    versions = _DECLARED.get(name, {})
    return tuple(versions[v] for v in sorted(versions))


def _shape(table: MachineTable) -> tuple[Any, ...]:
    return table.working, table.terminals, table.entries, table.edges


def declare(table: MachineTable) -> None:
    """Make ``table`` findable by name; a table of the same shape (a reload) replaces its twin.

    Every table is declared when it is made; declaring one again puts it back."""
    versions = _DECLARED.setdefault(table.name, {})
    known = versions.get(table.version)
    if known is not None and _shape(known) != _shape(table):
        raise MachineDefinitionError(
            f"Another machine named {table.name!r} is already declared as version "
            f"{table.version}, with other states or edges; give this one a name of its own, "
            "or the next version (saved runs find their machine by name and version)."
        )
    versions[table.version] = table


def forget(name: str, version: int) -> None:
    """Make the ``version`` of the machine called ``name`` no longer findable (a table
    made for one run, not declared by the code); the name goes when its last version does."""
    versions = _DECLARED.get(name)
    if versions is None:
        return
    versions.pop(version, None)
    if not versions:
        del _DECLARED[name]


def _check(table: MachineTable) -> None:
    """Refuse a table that is not a machine, naming the state or edge at fault."""
    if not isinstance(table.name, str) or not _NAME.fullmatch(table.name):
        raise MachineDefinitionError(
            f"A machine's name is snake_case ([a-z][a-z0-9_]*): it names the machine in "
            f"saved runs and diagrams; got {table.name!r}."
        )

    def fail(message: str) -> MachineDefinitionError:
        return MachineDefinitionError(f"The {table.name} machine: {message}.")

    _check_states(table, fail)
    _check_edges(table, fail)
    _check_graph(table, fail)
    _check_children(table, fail)


_Fail: TypeAlias = Callable[[str], MachineDefinitionError]


def _check_states(table: MachineTable, fail: _Fail) -> None:
    if not table.steps:
        raise fail("it has no working state; declare each one with its steps")
    if not table.terminals:
        raise fail("it has no terminal; a run must be able to end")
    if not table.entries:
        raise fail("it has no entry; name the state a run starts in")
    for state, count in Counter(table.states).items():
        if not isinstance(state, str) or not _NAME.fullmatch(state):
            raise fail(f"state {state!r} is not snake_case ([a-z][a-z0-9_]*)")
        if count > 1:
            raise fail(f"state {state!r} is declared twice; a state is working or terminal, once")
    for state, steps in table.steps.items():
        for step in steps:
            if not callable(step):
                raise fail(f"state {state!r} has {step!r} among its steps, which is not callable")
    for state, detail in table.details.items():
        if state not in table.steps or not callable(detail):
            raise fail(f"details[{state!r}] must be a callable for a working state")
    if isinstance(table.version, bool) or not isinstance(table.version, int) or table.version < 1:
        raise fail(f"its version is {table.version!r}, not a whole number from 1")
    if not (isinstance(table.options, type) and issubclass(table.options, Options)):
        raise fail(f"its options are {table.options!r}, not Options or a subclass of it")
    for situation, state in table.entries.items():
        if state not in table.steps:
            raise fail(f"entry {situation!r} leads to {state!r}, which is not a working state")


def _check_edges(table: MachineTable, fail: _Fail) -> None:
    by_trigger: dict[tuple[str, str], Edge] = {}
    by_result: dict[tuple[str, type[PipelineResult]], Edge] = {}
    for e in table.edges:
        if not isinstance(e, Edge):
            raise fail(f"{e!r} among the edges is not an Edge")
        named = f"edge {e.source} --{e.trigger}--> {e.dest}"
        if e.source in table.terminals:
            raise fail(f"terminal {e.source!r} has an edge out ({named}); a terminal ends the run")
        if e.source not in table.steps:
            raise fail(f"{named} leaves {e.source!r}, which is not a state of this machine")
        if e.dest not in table.states:
            raise fail(f"{named} enters {e.dest!r}, which is not a state of this machine")
        if not isinstance(e.trigger, str) or not _NAME.fullmatch(e.trigger):
            raise fail(f"{named}: the trigger is not snake_case ([a-z][a-z0-9_]*)")
        if e.on not in RESULTS:
            raise fail(
                f"{named} fires on {e.on!r}, which is not a pipeline result type "
                "(Continue, Ok, Paused, Interrupted, Failed)"
            )
        if not isinstance(e.why, str) or not e.why.strip() or "\n" in e.why:
            raise fail(f"{named} needs a one-line why")
        if e.on is Continue and e.dest in table.terminals:
            raise fail(
                f"{named} ends the run on Continue; a run ends on Ok, Paused, Interrupted or Failed"
            )
        twin = by_trigger.setdefault((e.source, e.trigger), e)
        if twin is not e:
            raise fail(
                f"state {e.source!r} has the trigger {e.trigger!r} twice (to {twin.dest!r} "
                f"and to {e.dest!r})"
            )
        twin = by_result.setdefault((e.source, e.on), e)
        if twin is not e:
            raise fail(
                f"state {e.source!r} has two edges on {e.on.__name__} ({twin.trigger!r} and "
                f"{e.trigger!r}); one result type fires one edge"
            )


def _reached(starts: Iterable[str], links: Mapping[str, set[str]]) -> set[str]:
    seen = set(starts)
    frontier = list(seen)
    while frontier:
        for state in links.get(frontier.pop(), ()):
            if state not in seen:
                seen.add(state)
                frontier.append(state)
    return seen


def _check_graph(table: MachineTable, fail: _Fail) -> None:
    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    for e in table.edges:
        forward.setdefault(e.source, set()).add(e.dest)
        backward.setdefault(e.dest, set()).add(e.source)
    for state in table.working:
        if state not in forward:
            raise fail(f"state {state!r} has no way out: no edge leaves it")
    reachable = _reached(table.entries.values(), forward)
    for state in table.states:
        if state not in reachable:
            raise fail(f"state {state!r} is unreachable: no entry or edge leads to it")
    ending = _reached(table.terminals, backward)
    for state in table.working:
        if state not in ending:
            raise fail(f"state {state!r} has no path to a terminal: a run there never ends")
    for state in table.working:
        has = {e.on for e in table.edges if e.source == state}
        for kind, cause in ((Paused, "a pause is requested"), (Failed, "a step raises")):
            if kind not in has:
                raise fail(
                    f"state {state!r} has no edge on {kind.__name__}; a run takes it from "
                    f"any state when {cause} ({_no_default(table, state, kind)})"
                )


def _check_children(table: MachineTable, fail: _Fail) -> None:
    """Refuse a machine that runs itself: one whose child machines, however deep, include
    a machine of its own name (its run would start its own run inside, without end, and
    its drawing would hold itself)."""
    cycle = _cycle_through(table, table.name, set())
    if cycle is not None:
        chain = " -> ".join(f"{name} ({state})" for name, state in cycle)
        raise fail(
            f"it contains itself: {chain} -> {table.name}; a machine cannot run a machine "
            "of its own name as a child, however deep"
        )


def _cycle_through(table: MachineTable, name: str, seen: set[int]) -> list[tuple[str, str]] | None:
    """``[(machine, state), ...]`` from ``table`` down to a child machine called ``name``,
    each machine with the state that runs the next; None when there is no such path."""
    seen.add(id(table))
    for state, children in table.children.items():
        for child in children:
            if child.name == name:
                return [(table.name, state)]
            if id(child) not in seen:
                deeper = _cycle_through(child, name, seen)
                if deeper is not None:
                    return [(table.name, state), *deeper]
    return None


def _no_default(table: MachineTable, state: str, kind: type[PipelineResult]) -> str:
    """Why the table gave ``state`` no default edge on ``kind``."""
    terminal, trigger, _ = _DEFAULTS[kind]
    if not table.default_edges:
        return "the table declares its own: default_edges=False"
    if terminal not in table.terminals:
        return f"a default edge goes to the {terminal!r} terminal, which this table lacks"
    return f"the default edge's trigger {trigger!r} is taken by another of its edges"


#: The default edges, by the result they fire on: (terminal, trigger, why).
_DEFAULTS: Final[Mapping[type[PipelineResult], tuple[str, str, str]]] = {
    Paused: ("paused", "paused", "a step paused with a cause"),
    Failed: ("error", "failed", "a callback or an added step failed"),
}


def _defaults(table: MachineTable) -> list[Edge]:
    """The pause and fail edges ``table`` lacks, to its ``paused`` and ``error`` terminals."""
    edges = [e for e in table.edges if isinstance(e, Edge)]
    taken = {(e.sources[0], e.on) for e in edges} | {(e.sources[0], e.trigger) for e in edges}
    out: list[Edge] = []
    for kind, (terminal, trigger, why) in _DEFAULTS.items():
        if terminal not in table.terminals:
            continue
        out += [
            Edge(state, terminal, on=kind, trigger=trigger, why=why)
            for state in table.steps
            if (state, kind) not in taken and (state, trigger) not in taken
        ]
    return out


def _deriving(table: MachineTable, what: str) -> _Fail:
    def fail(message: str) -> MachineDefinitionError:
        return MachineDefinitionError(f"The {table.name} machine: {what}: {message}.")

    return fail
