"""A table's fingerprint covers its steps' code: a changed body or other arguments show."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import agentfsm._machine as m
from agentfsm import STANDARD, MachineTable
from agentfsm._cli._main import main
from agentfsm._identity import compute_identity, names_identity, step_code, step_name
from agentfsm._machine import fingerprint_of
from agentfsm._versions import MachineShape
from agentfsm.steps import Continue, PipelineResult
from agentfsm.versions import check_resume, diff, shape_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(m, "_DECLARED", {k: dict(v) for k, v in m._DECLARED.items()})
    yield


def _with(step: Any, name: str, version: int = 1) -> MachineTable:
    return STANDARD.replace("deciding", (step,), name=name, version=version)


def _module(tmp_path: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / f"{name}.py").write_text(
        "from agentfsm.steps import Continue\n\n\ndef decide(result, opts=None):\n" + body
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_a_changed_step_body_changes_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _module(tmp_path, "steps_a", "    return result\n", monkeypatch)
    b = _module(tmp_path, "steps_b", "    return Continue(result.chain)\n", monkeypatch)
    c = _module(tmp_path, "steps_c", "    return result\n", monkeypatch)
    one, two = _with(a.decide, "body_changed"), _with(b.decide, "body_changed", 2)
    assert a.decide.__qualname__ == b.decide.__qualname__ == "decide"
    assert names_identity(one) == names_identity(two)  # what fingerprints covered before
    assert one.fingerprint != two.fingerprint
    assert _with(c.decide, "body_same").fingerprint == one.fingerprint  # another module, same code
    changes = diff(one, two)
    assert not changes.same and changes.code_changed == (("deciding", "decide"),)
    assert changes.states_changed == ()
    assert "notice: the code of step decide in state deciding changed" in "\n".join(changes.lines())
    assert "code changed decide (state deciding)" in changes.summary()


def _limited(result: PipelineResult, opts: Mapping[str, Any], limit: int = 0) -> PipelineResult:
    return result


def _factory(limit: int) -> Any:
    def decide(result: PipelineResult, opts: Mapping[str, Any]) -> PipelineResult:
        return result if limit else Continue(result.chain)

    return decide


def test_arguments_a_step_was_made_with_change_the_fingerprint() -> None:
    three = functools.partial(_limited, limit=3)
    assert step_code(three) == step_code(functools.partial(_limited, limit=3))
    assert step_code(three) != step_code(functools.partial(_limited, limit=5))
    assert step_code(functools.partial(_limited, 3)) != step_code(functools.partial(_limited, 4))
    assert (
        _with(three, "partial_3").fingerprint
        != _with(functools.partial(_limited, limit=5), "partial_5").fingerprint
    )
    assert step_code(_factory(1)) != step_code(_factory(0))  # a closure's values count
    assert step_code(_factory(2)) == step_code(_factory(2))


def test_two_lambdas_differ_and_objects_count_by_their_type_only() -> None:
    same = lambda r, o: r  # noqa: E731
    other = lambda r, o: Continue(r.chain)  # noqa: E731
    first, second = (lambda r, o: r), (lambda r, o: o)  # one line, two lambdas
    assert step_code(same) != step_code(other)
    assert step_code(first) != step_code(second)
    assert _with(same, "lambda_a").fingerprint != _with(other, "lambda_b").fingerprint
    held = functools.partial(_limited, limit=object())  # no address may leak in
    assert step_code(held) == step_code(functools.partial(_limited, limit=object()))


_PRINT = """
import functools, json
from agentfsm import STANDARD
from tests.test_fingerprints import _limited
t = STANDARD.replace("deciding", (functools.partial(_limited, limit=3),), name="child_proc")
print(json.dumps([STANDARD.fingerprint, t.fingerprint]))
"""


def test_fingerprints_are_the_same_in_another_process() -> None:
    here = _with(functools.partial(_limited, limit=3), "child_proc")
    out = subprocess.run(
        [sys.executable, "-c", _PRINT], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [STANDARD.fingerprint, here.fingerprint]


def test_a_shape_keeps_code_and_effects_and_an_old_shape_keeps_its_fingerprint() -> None:
    shape = shape_of(STANDARD)
    assert shape.fingerprint == STANDARD.fingerprint
    assert shape.effects is not None and shape.effects["interrupt_check"] == (("approval",),)
    again = MachineShape.from_data(json.loads(json.dumps(shape.to_data())))
    assert again == shape and again.fingerprint == STANDARD.fingerprint
    data = shape.to_data()
    del data["code"], data["effects"]  # a shape saved before they were kept
    old = MachineShape.from_data(data)
    assert old.fingerprint == fingerprint_of(names_identity(STANDARD)) != STANDARD.fingerprint
    assert old.gates == ("interrupt_check",)  # its effects read from the steps, by name


def test_a_run_recorded_with_a_names_only_fingerprint_goes_on_unchanged() -> None:
    from agentfsm import Trace

    legacy = fingerprint_of(names_identity(STANDARD))
    trace = Trace(
        entry="expanding", machine="standard", machine_version=1, machine_fingerprint=legacy
    )
    assert check_resume(trace, STANDARD).policy == "unchanged"


_DIFF = """
from agentfsm import STANDARD


def decide(result, opts=None):
    return result


V1 = STANDARD.replace("deciding", (decide,), name="cli_recoded")
"""


def test_machines_diff_gives_a_changed_step_code_as_a_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cli_recoded_a.py").write_text(_DIFF)
    (tmp_path / "cli_recoded_b.py").write_text(
        _DIFF.replace("return result", "return result if result else result").replace(
            'name="cli_recoded"', 'name="cli_recoded", version=2'
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("cli_recoded_a", "cli_recoded_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["machines", "diff", "cli_recoded_a:V1", "cli_recoded_b:V1", "--no-diagram"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[2:] == [
        "notice: the code of step decide in state deciding changed (same name, another body "
        "or other arguments)"
    ]


def test_comments_docstrings_and_layout_leave_a_steps_code_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that rewords a step's docstring or comments keeps saved runs' fingerprints;
    a change of what it does changes them."""
    sources = {
        "same_a": 'def decide(result, opts=None):\n    """Say why."""\n    return result\n',
        "same_b": (
            "def decide(result,\n           opts=None):\n    # now a comment\n    return result\n"
        ),
        "other": "def decide(result, opts=None):\n    return None\n",
    }
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    codes = {name: step_code(importlib.import_module(name).decide) for name in sources}
    assert codes["same_a"] == codes["same_b"] != codes["other"]


# ---------------------------------------------------------------- what a step's code is made of


def _digest(data: Any) -> str:
    """16 hex digits of the SHA-256 of ``data`` as sorted, compact JSON (the module says so)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tree(function: Any) -> str:
    """A docstring-free function's source as the syntax tree a fingerprint holds."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _plain(result: Any, opts: Any = None, *, scale: float = 1.5) -> Any:
    return len(result)


def _described_plain(closure: list[Any] | None = None) -> dict[str, Any]:
    return {
        "function": "_plain",
        "source": _tree(_plain),
        "compiled": None,
        "names": ["len"],
        "locals": ["result", "opts", "scale"],
        "column": None,
        "defaults": [None],
        "kwdefaults": {"scale": "1.5"},
        "closure": closure or [],
    }


class _Counter:
    """A callable object: counted by its class, its ``__call__`` and its public attributes."""

    def __init__(self) -> None:
        self.limit = 2
        self.table = STANDARD
        self._seen = object()  # private: not part of what the step does

    def __call__(self, result: Any, opts: Any) -> Any:
        return result

    def step(self, result: Any, opts: Any) -> Any:
        return result


def test_a_steps_code_is_the_digest_of_the_parts_the_module_names() -> None:
    """The parts are pinned: a saved run's fingerprint must mean the same in the next release."""
    assert step_code(_plain) == _digest(_described_plain())
    bound = functools.partial(_plain, 2.5, [1, {"a": None}], scale=True)
    assert step_code(bound) == _digest(
        {
            "partial": _described_plain(),
            "args": ["2.5", [1, {"a": None}]],
            "keywords": {"scale": True},
        }
    )
    counter = _Counter()
    call = {
        **_described_plain(),
        "function": "_Counter.__call__",
        "source": _tree(_Counter.__call__),
    }
    call |= {"names": [], "locals": ["self", "result", "opts"], "defaults": [], "kwdefaults": {}}
    assert step_code(counter) == _digest(
        {
            "object": "_Counter",
            "call": call,
            "attributes": {"limit": 2, "table": {"machine": STANDARD.fingerprint}},
        }
    )
    method = {**call, "function": "_Counter.step", "source": _tree(_Counter.step)}
    assert step_code(counter.step) == _digest({"method": method, "of": "_Counter"})


def test_values_are_followed_four_levels_deep_and_other_objects_count_by_type() -> None:
    """A closure's value is followed to depth 4; beyond, and for any object that is not
    plain data, a callable or a table, only its type's name counts."""
    deep = [[[[object()]]]]
    odd = {1: "not string-keyed"}

    def holding(result: Any, opts: Any) -> Any:
        return (deep, odd)

    got = step_code(holding)
    want_deep = [[[{"type": "list"}]]]  # the innermost list is past the depth: its type only
    data = {
        "function": holding.__qualname__,
        "source": _tree(holding),
        "compiled": None,
        "names": [],
        "locals": ["result", "opts"],
        "column": None,
        "defaults": [],
        "kwdefaults": {},
        "closure": [want_deep, {"type": "dict", "name": None}],
    }
    assert got == _digest(data)


class _Plan:
    """Not a table, though it has steps: counted by its type."""

    def __init__(self) -> None:
        self.steps = ["plan"]


def test_a_partial_its_arguments_a_method_and_a_mapping_each_spend_one_level() -> None:
    """A value nested as deep stops at the same point through each way in: a partial's
    function, its arguments and keywords, a bound method's function, a mapping's values,
    a callable object's attributes each spend one of the four levels; an object with
    steps but no fingerprint is no table; a class counts by its name."""
    deep = [[["x"]]]
    plan = _Plan()

    def holding(result: Any, opts: Any) -> Any:
        return deep

    class Holder:
        def step(self, result: Any, opts: Any) -> Any:
            return deep

    def planned(result: Any, opts: Any) -> Any:
        return plan

    kind = _Plan

    def typed(result: Any, opts: Any) -> Any:
        return kind

    class Deep:
        def __init__(self) -> None:
            self.limit = [[[["z"]]]]

        def __call__(self, result: Any, opts: Any) -> Any:
            return result

    def function(f: Any, closure: list[Any]) -> dict[str, Any]:
        return {
            "function": f.__qualname__,
            "source": _tree(f),
            "compiled": None,
            "names": [],
            "locals": ["self", "result", "opts"]
            if "self" in f.__code__.co_varnames
            else ["result", "opts"],
            "column": None,
            "defaults": [],
            "kwdefaults": {},
            "closure": closure,
        }

    at_two = [[{"type": "list"}]]  # ``deep`` met with two levels left: its third list by type
    step = functools.partial(holding, [[[["y"]]]], key={"a": {"b": {"c": {"d": 1}}}})
    assert step_code(step) == _digest(
        {
            "partial": function(holding, [at_two]),
            "args": [[[[{"type": "list"}]]]],
            "keywords": {"key": {"a": {"b": {"c": {"type": "dict"}}}}},
        }
    )
    method = Holder().step
    assert step_code(method) == _digest(
        {"method": function(Holder.step, [at_two]), "of": Holder.__qualname__}
    )
    assert step_code(planned) == _digest(function(planned, [{"type": "_Plan", "name": None}]))
    # A class is counted by its name; a callable object's attributes spend a level too.
    assert step_code(typed) == _digest(function(typed, [{"type": "type", "name": "_Plan"}]))
    assert step_code(Deep()) == _digest(
        {
            "object": Deep.__qualname__,
            "call": function(Deep.__call__, []),
            "attributes": {"limit": [[[{"type": "list"}]]]},
        }
    )

    # A function's defaults, positional and keyword, spend a level too.
    def defaulted(result: Any, opts: Any = [[["x"]]], *, k: Any = [[["y"]]]) -> Any:  # noqa: B006
        return result

    assert step_code(defaulted) == _digest(
        {
            **function(defaulted, []),
            "defaults": [at_two],
            "kwdefaults": {"k": at_two},
            "locals": ["result", "opts", "k"],
        }
    )
    # A callable with no attributes of its own (a builtin): its type, no call, no attributes.
    assert step_code(len) == _digest(
        {"object": "builtin_function_or_method", "call": None, "attributes": {}}
    )


# Lambdas whose line is no statement of its own: counted by the line's text.
# fmt: off
_SPLIT = {
    "one": lambda result, opts=None: result, "other": 1,
}
_SPLIT_TOO = {
    "one": lambda result, opts=None: len(result), "other": 1,
}
# fmt: on


def test_a_lambda_on_a_line_that_is_no_statement_counts_by_that_lines_text() -> None:
    assert step_code(_SPLIT["one"]) != step_code(_SPLIT_TOO["one"])
    assert step_code(_SPLIT["one"]) == step_code(_SPLIT["one"])


def _compiled_parts(code: Any) -> dict[str, Any]:
    """What the module says a compiled function counts by: bytecode, constants (a nested
    function's compiled code; a constant tuple followed one level: its items by type), names."""
    constants: list[Any] = []
    for constant in code.co_consts:
        if isinstance(constant, type(code)):
            constants.append(_compiled_parts(constant))
        elif isinstance(constant, tuple):
            constants.append([{"type": type(item).__qualname__} for item in constant])
        else:
            constants.append(constant)
    return {"bytecode": code.co_code.hex(), "constants": constants, "names": list(code.co_names)}


def test_a_function_without_source_counts_by_its_compiled_code() -> None:
    namespace: dict[str, Any] = {}
    source = (
        "def made(result, opts):\n"
        "    pick = lambda: result.chain\n"
        "    return pick() if opts in ((1, 2), (3,)) else None\n"
    )
    exec(source, namespace)  # no file to read
    made = namespace["made"]
    compiled = _compiled_parts(made.__code__)
    assert {"bytecode", "constants", "names"} == set(compiled)
    assert [type(c).__name__ for c in compiled["constants"]].count("dict") == 1  # the lambda
    assert [c for c in compiled["constants"] if isinstance(c, list)] == [
        [{"type": "tuple"}, {"type": "tuple"}]
    ]
    assert step_code(made) == _digest(
        {
            "function": "made",
            "source": None,
            "compiled": compiled,
            "names": [],
            "locals": ["result", "opts", "pick"],
            "column": None,
            "defaults": [],
            "kwdefaults": {},
            "closure": [],
        }
    )


def test_a_lambda_counts_where_it_starts_on_its_line() -> None:
    first, second = (lambda r, o: r), (lambda r, o: r)  # one line, the same code
    assert step_code(first) != step_code(second)


def test_a_steps_name_is_its_qualified_name_or_its_class() -> None:
    assert step_name(_plain) == "_plain"
    assert step_name(functools.partial(_plain, scale=2.0)) == "_plain"
    assert step_name(_Counter()) == "_Counter"
    assert step_name(_Counter().step) == "_Counter.step"


def test_a_fingerprint_is_sixteen_hex_digits_of_the_tables_identity() -> None:
    data = compute_identity(STANDARD)
    assert STANDARD.fingerprint == _digest(data) == fingerprint_of(data)
    assert data["code"] == {
        state: [step_code(step) for step in steps]
        for state, steps in sorted(STANDARD.steps.items())
    }
    assert data["working"] == sorted(STANDARD.working)
    assert data["terminals"] == sorted(STANDARD.terminals)
