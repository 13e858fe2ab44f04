"""What an eval runs and checks: cases, each an input and the expectations of its runs.

An expectation is about the path a run took (the terminal it ended in, a state it
visited or never visited, how often it took an edge, a path pattern as
:func:`agentfsm.testing.assert_path` takes it) or about its answer (the text
contains, equals or matches something, or a function of it says yes). Each knows its
label (``ends in ok``, ``never visits interrupted``, ``takes deciding --loop--> at
most 2x``) and its JSON form, so a dataset is a file as well as code.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from .._messages import Message
from .._path_pattern import compile_path
from .._state import AgentState

if TYPE_CHECKING:
    from .._machine import MachineTable

__all__ = ["Case", "Dataset", "Expect", "Observed"]

Kind = Literal[
    "ends_in", "visits", "never_visits", "edge", "path", "contains", "equals", "matches", "output"
]
_KINDS: Final = (
    "ends_in",
    "visits",
    "never_visits",
    "edge",
    "path",
    "contains",
    "equals",
    "matches",
)


@attrs.frozen
class Observed:
    """What an expectation is checked against: one run's path and answer."""

    #: ``(source, trigger, dest)`` of every transition, in order.
    edges: tuple[tuple[str, str, str], ...]
    entry: str
    terminal: str | None
    #: The final answer's text (the last assistant message's), or None.
    text: str | None
    #: The typed answer of an agent with an ``output_type``, else the text.
    output: Any

    @property
    def states(self) -> list[str]:
        return [self.entry, *(d for _, _, d in self.edges)]


def _never(_: Any) -> bool:
    return False


@attrs.frozen(eq=False)
class Expect:
    """One expectation of a run; make one with its class methods (``Expect.ends_in("ok")``)."""

    kind: Kind
    #: The states, edge, pattern or text it names.
    args: tuple[Any, ...]
    label: str
    at_least: int | None = None
    at_most: int | None = None
    check: Callable[[Any], bool] = attrs.field(default=_never, repr=False)

    # ------------------------------------------------------------ path expectations

    @classmethod
    def ends_in(cls, *terminals: str) -> Expect:
        """The run ends in one of ``terminals`` (``"ok"``, ``"error"``...)."""
        _names("ends_in", terminals)
        return cls("ends_in", terminals, f"ends in {' or '.join(terminals)}")

    @classmethod
    def visits(cls, state: str) -> Expect:
        """The run passes through ``state`` at least once."""
        _names("visits", (state,))
        return cls("visits", (state,), f"visits {state}")

    @classmethod
    def never_visits(cls, state: str) -> Expect:
        """The run never enters ``state``."""
        _names("never_visits", (state,))
        return cls("never_visits", (state,), f"never visits {state}")

    @classmethod
    def edge(
        cls, source: str, trigger: str, *, at_least: int | None = None, at_most: int | None = None
    ) -> Expect:
        """The run takes the edge ``source --trigger-->`` between ``at_least`` and
        ``at_most`` times (either may be left out, not both)."""
        _names("edge", (source, trigger))
        if at_least is None and at_most is None:
            raise ValueError(
                f"Expect.edge({source!r}, {trigger!r}) needs at_least=, at_most= or both"
            )
        for name, bound in (("at_least", at_least), ("at_most", at_most)):
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 0
            ):
                raise ValueError(f"{name} is a whole number of at least 0, got {bound!r}")
        if at_least is not None and at_most is not None and at_least > at_most:
            raise ValueError(f"at_least={at_least} is more than at_most={at_most}")
        bounds = [f"at least {at_least}x"] * (at_least is not None) + [f"at most {at_most}x"] * (
            at_most is not None
        )
        label = f"takes {source} --{trigger}--> {' and '.join(bounds)}"
        return cls("edge", (source, trigger), label, at_least, at_most)

    @classmethod
    def path(cls, pattern: str) -> Expect:
        """The run's states match ``pattern``, as :func:`agentfsm.testing.assert_path`
        takes it (``"(expanding ... deciding)+ ok"``: ``+ * ?``, ``{n,m}``)."""
        if not isinstance(pattern, str) or not pattern.split():
            raise ValueError(f"Expect.path takes a path pattern, got {pattern!r}")
        return cls("path", (" ".join(pattern.split()),), f"path {' '.join(pattern.split())}")

    # ------------------------------------------------------------ answer expectations

    @classmethod
    def contains(cls, text: str) -> Expect:
        """The final answer's text contains ``text``."""
        return cls("contains", (_text("contains", text),), f"answer contains {text!r}")

    @classmethod
    def equals(cls, value: Any) -> Expect:
        """The answer is ``value``: the typed output of an agent with an ``output_type``,
        else the final text (compared with its surrounding blanks stripped)."""
        return cls("equals", (value,), f"answer equals {value!r}")

    @classmethod
    def matches(cls, regex: str) -> Expect:
        """The final answer's text matches the regular expression ``regex`` (anywhere)."""
        try:
            re.compile(_text("matches", regex))
        except re.error as exc:
            raise ValueError(
                f"Expect.matches({regex!r}): not a regular expression: {exc}"
            ) from None
        return cls("matches", (regex,), f"answer matches {regex!r}")

    @classmethod
    def output(cls, check: Callable[[Any], bool], label: str | None = None) -> Expect:
        """``check(answer)`` is true (the typed output, else the final text); code only:
        a dataset file cannot hold a function."""
        if not callable(check):
            raise TypeError(f"Expect.output takes a function of the answer, got {check!r}")
        name = label or getattr(check, "__name__", "check")
        return cls("output", (name,), f"answer passes {name}", check=check)

    # ------------------------------------------------------------ checking

    def check_states(self, table: MachineTable) -> None:
        """Refuse a state or edge ``table`` lacks, naming the closest one."""
        if self.kind in ("ends_in", "visits", "never_visits"):
            pool = table.terminals if self.kind == "ends_in" else table.states
            for state in self.args:
                _known(
                    state,
                    pool,
                    f"{self.label}: {state!r} is not a "
                    f"{'terminal' if self.kind == 'ends_in' else 'state'} of the "
                    f"{table.name} machine",
                )
        elif self.kind == "edge":
            source, trigger = self.args
            _known(
                source,
                table.working,
                f"{self.label}: {source!r} is not a working state of the {table.name} machine",
            )
            triggers = sorted({e.trigger for e in table.edges if e.source == source})
            _known(trigger, triggers, f"{self.label}: no edge {trigger!r} leaves {source!r}")
        elif self.kind == "path":
            compile_path(self.args[0], frozenset(table.states))

    def passed(self, run: Observed, table: MachineTable) -> bool:
        """Whether ``run`` meets this expectation."""
        kind, args = self.kind, self.args
        if kind == "ends_in":
            return run.terminal in args
        if kind == "visits":
            return args[0] in run.states
        if kind == "never_visits":
            return args[0] not in run.states
        if kind == "edge":
            taken = sum(1 for s, t, _ in run.edges if (s, t) == args)
            return (self.at_least is None or taken >= self.at_least) and (
                self.at_most is None or taken <= self.at_most
            )
        if kind == "path":
            pattern = compile_path(args[0], frozenset(table.states))
            return pattern.fullmatch(" ".join(run.states) + " ") is not None
        if kind == "contains":
            return run.text is not None and args[0] in run.text
        if kind == "matches":
            return run.text is not None and re.search(args[0], run.text) is not None
        if kind == "equals":
            if isinstance(run.output, str) and isinstance(args[0], str):
                return run.output.strip() == args[0].strip()
            return bool(run.output == args[0])
        return bool(self.check(run.output))

    def to_json(self) -> dict[str, Any]:
        """The expectation as a dataset file writes it (an ``output`` one cannot be)."""
        kind, args = self.kind, self.args
        if kind == "output":
            raise ValueError(f"{self.label!r} is a function: a dataset file cannot hold it")
        if kind == "edge":
            doc: dict[str, Any] = {"edge": f"{args[0]} {args[1]}"}
            if self.at_least is not None:
                doc["at_least"] = self.at_least
            if self.at_most is not None:
                doc["at_most"] = self.at_most
            return doc
        if kind == "ends_in":
            return {kind: list(args) if len(args) > 1 else args[0]}
        return {kind: args[0]}

    @classmethod
    def from_json(cls, doc: Any, where: str = "expect") -> Expect:
        """An expectation from its JSON form: ``{"ends_in": "ok"}``, ``{"visits": S}``,
        ``{"never_visits": S}``, ``{"edge": "SOURCE TRIGGER", "at_most": K}``,
        ``{"path": P}``, ``{"contains": T}``, ``{"equals": V}``, ``{"matches": R}``."""
        if not isinstance(doc, Mapping):
            raise ValueError(
                f'{where}: an expectation is an object such as {{"ends_in": "ok"}}, got {doc!r}'
            )
        kinds = [k for k in doc if k in _KINDS]
        extra = set(doc) - set(_KINDS) - {"at_least", "at_most"}
        if len(kinds) != 1 or extra:
            unknown = sorted(extra) or sorted(doc)
            hint = difflib.get_close_matches(unknown[0], _KINDS, n=1) if unknown else []
            said = f"; did you mean {hint[0]!r}?" if hint else f"; one of {list(_KINDS)}"
            raise ValueError(f"{where}: {dict(doc)!r} names no one expectation{said}")
        kind = kinds[0]
        value = doc[kind]
        try:
            if kind == "edge":
                words = value.split() if isinstance(value, str) else []
                if len(words) != 2:
                    raise ValueError(f'"edge" is "SOURCE TRIGGER" ("deciding loop"), got {value!r}')
                return cls.edge(
                    words[0], words[1], at_least=doc.get("at_least"), at_most=doc.get("at_most")
                )
            if "at_least" in doc or "at_most" in doc:
                raise ValueError('at_least and at_most go with "edge" only')
            if kind == "ends_in":
                terminals = value if isinstance(value, list) else [value]
                return cls.ends_in(*terminals)
            made: Expect = getattr(cls, kind)(value)
            return made
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None


def _names(kind: str, names: Sequence[Any]) -> None:
    if not names or not all(isinstance(n, str) and n and n.split() == [n] for n in names):
        raise ValueError(f"Expect.{kind} takes state names (one word each), got {list(names)!r}")


def _text(kind: str, text: Any) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"Expect.{kind} takes a non-empty string, got {text!r}")
    return text


def _known(name: str, pool: Sequence[str], said: str) -> None:
    if name in pool:
        return
    close = difflib.get_close_matches(name, list(pool), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; it has {list(pool)}"
    raise ValueError(said + hint)


def _expectations(value: Iterable[Expect]) -> tuple[Expect, ...]:
    return tuple(value)


def _cases(value: Iterable[Case]) -> tuple[Case, ...]:
    return tuple(value)


@attrs.frozen
class Case:
    """One input of a dataset and what each of its runs should do.

    ``input`` is a prompt, a list of messages or an :class:`~agentfsm.AgentState`;
    ``expect`` the expectations (the dataset's own are added to them).
    """

    input: str | AgentState | Sequence[Message]
    expect: Sequence[Expect] = attrs.field(default=(), converter=_expectations)
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        AgentState.given(self.input)  # refuse an input no run can start from, now
        bad = [e for e in self.expect if not isinstance(e, Expect)]
        if bad:
            raise TypeError(
                f"Case expect= takes Expect values (Expect.ends_in('ok')...), got {bad[0]!r}"
            )
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise ValueError(f"a case's name is a non-empty string, got {self.name!r}")

    @property
    def prompt(self) -> str:
        """The input in one line, for reports: the last user message's text."""
        state = AgentState.given(self.input)
        users = [m.text for m in state.messages if m.role == "user" and m.text]
        return " ".join((users[-1] if users else "").split())


@attrs.frozen
class Dataset:
    """Cases to run, with expectations every case shares (``expect``)."""

    cases: Sequence[Case] = attrs.field(converter=_cases)
    name: str = "dataset"
    expect: Sequence[Expect] = attrs.field(default=(), converter=_expectations)

    def __attrs_post_init__(self) -> None:
        if not self.cases:
            raise ValueError("a dataset needs at least one case")
        bad = [c for c in self.cases if not isinstance(c, Case)]
        if bad:
            raise TypeError(f"Dataset takes Case values, got {bad[0]!r}")
        names = self.names
        seen = {n for n in names if names.count(n) > 1}
        if seen:
            raise ValueError(f"two cases are named {sorted(seen)[0]!r}; case names are unique")

    @property
    def names(self) -> list[str]:
        """Each case's name: its own, or ``case-N`` (N from 1) for one without."""
        return [c.name or f"case-{i}" for i, c in enumerate(self.cases, 1)]

    def expectations(self, index: int) -> tuple[Expect, ...]:
        """The expectations of case ``index``: the dataset's, then the case's own."""
        return (*self.expect, *self.cases[index].expect)

    def check(self, table: MachineTable) -> None:
        """Refuse any expectation naming a state or edge ``table`` lacks."""
        for i, name in enumerate(self.names):
            for expectation in self.expectations(i):
                try:
                    expectation.check_states(table)
                except ValueError as exc:
                    raise ValueError(f"case {name!r}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The dataset as a file holds it (inputs as prompts or message lists)."""
        # import time: documents are written only when a dataset is saved
        from .._serialization import dump

        cases = []
        for case, name in zip(self.cases, self.names, strict=True):
            given = case.input
            value: Any = (
                given
                if isinstance(given, str)
                else [dump(m)["value"] for m in AgentState.given(given).messages]
            )
            cases.append(
                {"name": name, "input": value, "expect": [e.to_json() for e in case.expect]}
            )
        return {"name": self.name, "expect": [e.to_json() for e in self.expect], "cases": cases}

    @classmethod
    def from_json(cls, doc: Any, where: str = "dataset") -> Dataset:
        """A dataset from its JSON form: ``{"name": ..., "expect": [...], "cases": [{"name":
        ..., "input": "a prompt", "expect": [{"ends_in": "ok"}, ...]}, ...]}``."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("cases"), list):
            raise ValueError(f'{where}: a dataset is an object with a "cases" list')
        unknown = set(doc) - {"name", "expect", "cases"}
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {sorted(unknown)}; a dataset has name, expect, cases"
            )
        cases = [_case(c, f"{where}: case {i}") for i, c in enumerate(doc["cases"], 1)]
        shared = [Expect.from_json(e, f"{where}: expect") for e in _list(doc.get("expect"), where)]
        name = doc.get("name", "dataset")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f'{where}: "name" is a non-empty string')
        return cls(cases, name=name, expect=shared)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """The dataset in the JSON file at ``path``."""
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as file:
                doc = json.load(file)
        except FileNotFoundError:
            raise ValueError(f"{where}: no such file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{where}: cannot read a dataset: {exc}") from None
        return cls.from_json(doc, where)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f'{where}: "expect" is a list of expectations')
    return value


def _case(doc: Any, where: str) -> Case:
    # import time: documents are read only when a dataset file is
    from .._serialization import FORMAT, load

    if not isinstance(doc, Mapping) or "input" not in doc:
        raise ValueError(f'{where}: a case is an object with an "input"')
    unknown = set(doc) - {"name", "input", "expect"}
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {sorted(unknown)}; a case has name, input, expect"
        )
    given = doc["input"]
    if isinstance(given, list):
        try:
            given = [
                load({"format": FORMAT, "type": "Message", "value": m}, Message) for m in given
            ]
        except Exception as exc:
            raise ValueError(f'{where}: "input" is a prompt or a list of messages: {exc}') from None
    elif not isinstance(given, str):
        raise ValueError(f'{where}: "input" is a prompt or a list of messages')
    expect = [Expect.from_json(e, f"{where}: expect") for e in _list(doc.get("expect"), where)]
    try:
        return Case(given, expect, name=doc.get("name"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
