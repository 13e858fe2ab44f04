"""Evals: a dataset run many times on a configuration, and two configurations compared.

The stochastic scripted model makes runs' paths vary as a real model's do, seeded, so
every number here is exact: which runs passed, which changes a comparison finds, and how
often two evals of one configuration are called different (the false-positive rate the
evals page states).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import Agent, HumanInTheLoop, Message, StoreError, tool
from agentfsm._cli import main
from agentfsm.evals import Case, Dataset, EvalReport, Expect, compare, evaluate, evaluate_sync
from agentfsm.providers import OpenAIChat, ScriptedModel, call_tool, fail, say
from agentfsm.store import SQLiteStore
from agentfsm.testing import Cassette, StochasticModel, record
from tests.providers.fake_server import FakeServer, Reply
from tests.providers.openai_wire import completion

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
#: A path pattern: laps of the loop, then ok.
LAPS = "(expanding calling interrupt_check executing propagating until_check deciding)+ ok"


@tool
def lookup(query: str) -> str:
    """Look a fact up."""
    return f"{query}: 42"


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def stochastic(loop: float, error: float, seed: int) -> Agent:
    """An agent that looks up once (or fails, with chance ``error``), then answers, or
    looks up again with chance ``loop`` each turn."""
    model = StochasticModel(
        [
            [(1 - error, call_tool("lookup", query="fact")), (error, fail("server_error"))],
            [(1 - loop, say("It is 42.")), (loop, call_tool("lookup", query="more"))],
        ],
        seed=seed,
    )
    return Agent(model, [lookup], max_runs=8)


QA = Dataset(
    [Case(f"question {i}", name=f"q{i}") for i in range(5)],
    name="qa",
    expect=[Expect.ends_in("ok"), Expect.contains("42")],
)


# ---------------------------------------------------------------- the model


def test_the_stochastic_model_draws_the_same_replies_for_the_same_seed() -> None:
    def texts(seed: int) -> list[str]:
        model = StochasticModel([[(0.5, say("heads")), (0.5, say("tails"))]], seed=seed)
        agent = Agent(model)
        return [agent.execute_sync("toss").messages[-1].text or "" for _ in range(12)]

    assert texts(3) == texts(3)
    assert texts(3) != texts(4)
    assert set(texts(3)) == {"heads", "tails"}


def test_the_stochastic_model_refuses_a_turn_it_cannot_draw_from() -> None:
    with pytest.raises(ValueError, match="turn 0: the weights add up to 0; give one a weight"):
        StochasticModel([[(0, say("a")), (0.0, say("b"))]])
    with pytest.raises(TypeError, match=r"turn 1 is a reply or a list of \(weight, reply\) pairs"):
        StochasticModel([say("a"), [say("b")]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="needs at least one turn"):
        StochasticModel([])


# ---------------------------------------------------------------- expectations


def test_each_expectation_is_checked_against_the_path_and_the_answer() -> None:
    """A scripted run: one lookup, then the answer; every expectation's verdict is exact."""

    def agent() -> Agent:  # a list-scripted model answers one conversation: one per run
        return Agent(ScriptedModel([call_tool("lookup", query="x"), say("It is 42.")]), [lookup])

    case = Case(
        "what is it?",
        [
            Expect.ends_in("ok"),
            Expect.ends_in("error"),
            Expect.visits("executing"),
            Expect.never_visits("interrupted"),
            Expect.never_visits("executing"),
            Expect.edge("deciding", "loop", at_most=1),
            Expect.edge("deciding", "loop", at_least=2),
            Expect.path(
                "(expanding calling interrupt_check executing propagating until_check deciding)+ ok"
            ),
            Expect.path(
                "expanding calling interrupt_check executing propagating until_check deciding ok"
            ),
            Expect.contains("42"),
            Expect.equals("It is 42."),
            Expect.matches(r"\b4\d\b"),
            Expect.output(lambda text: text.endswith("."), "ends with a full stop"),
        ],
        name="one",
    )
    report = evaluate_sync(agent, Dataset([case]), runs=3, name="scripted")
    (result,) = report.cases
    assert [result.rate(i).passed for i in range(13)] == [3, 0, 3, 3, 0, 3, 0, 3, 0, 3, 3, 3, 3]
    assert result.expectations[5] == "takes deciding --loop--> at most 1x"
    assert report.terminals() == {"ok": 3}
    assert len(report.paths) == 1
    assert report.states(0) == [
        "expanding",
        "calling",
        "interrupt_check",
        "executing",
        "propagating",
        "until_check",
        "deciding",
        "expanding",
        "calling",
        "interrupt_check",
        "executing",
        "propagating",
        "until_check",
        "deciding",
        "ok",
    ]
    assert report.path_counts() == {0: 3}
    assert report.edge_totals()[("deciding", "loop", "expanding")] == 3


def test_an_expectation_naming_what_the_machine_lacks_is_refused_before_any_run() -> None:
    model = ScriptedModel([say("never asked")])
    bad = Dataset([Case("hi", [Expect.never_visits("aproving")], name="typo")])
    with pytest.raises(
        ValueError,
        match=r"case 'typo': never visits aproving: 'aproving' is not a state of the standard "
        r"machine; did you mean 'propagating'\?",
    ):
        evaluate_sync(Agent(model), bad, runs=1)
    edge = Dataset([Case("hi", [Expect.edge("deciding", "lop", at_most=1)])])
    with pytest.raises(ValueError, match="no edge 'lop' leaves 'deciding'; did you mean 'loop'"):
        evaluate_sync(Agent(model), edge, runs=1)
    terminal = Dataset([Case("hi", [Expect.ends_in("okay")])])
    with pytest.raises(
        ValueError, match="'okay' is not a terminal of the standard machine; did you mean 'ok'"
    ):
        evaluate_sync(Agent(model), terminal, runs=1)
    assert model.calls == 0


def test_bad_expectations_and_options_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="needs at_least=, at_most= or both"):
        Expect.edge("deciding", "loop")
    with pytest.raises(ValueError, match="at_least=3 is more than at_most=1"):
        Expect.edge("deciding", "loop", at_least=3, at_most=1)
    with pytest.raises(ValueError, match="not a regular expression"):
        Expect.matches("(")
    with pytest.raises(ValueError, match="two cases are named 'a'"):
        Dataset([Case("x", name="a"), Case("y", name="a")])
    with pytest.raises(ValueError, match="runs is a whole number of at least 1, got 0"):
        evaluate_sync(Agent(ScriptedModel([])), QA, runs=0)
    with pytest.raises(TypeError, match="takes an Agent, or a function making one per run"):
        evaluate_sync("agent", QA)  # type: ignore[arg-type]


# ---------------------------------------------------------------- datasets as files


def test_a_dataset_file_round_trips_and_bad_ones_name_the_fix(tmp_path: Path) -> None:
    doc = {
        "name": "qa",
        "expect": [{"ends_in": "ok"}],
        "cases": [
            {
                "name": "sum",
                "input": "What is 2 + 40?",
                "expect": [
                    {"contains": "42"},
                    {"edge": "deciding loop", "at_most": 2},
                    {"never_visits": "interrupted"},
                    {"path": LAPS},
                ],
            },
            {
                "input": [{"role": "user", "content": "hello"}],
                "expect": [{"ends_in": ["ok", "paused"]}],
            },
        ],
    }
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(doc))
    dataset = Dataset.load(path)
    assert dataset.names == ["sum", "case-2"]
    assert [e.label for e in dataset.expectations(0)] == [
        "ends in ok",
        "answer contains '42'",
        "takes deciding --loop--> at most 2x",
        "never visits interrupted",
        f"path {LAPS}",
    ]
    assert dataset.cases[1].input[0] == Message.user("hello")  # type: ignore[index]
    again = dataset.to_json()
    assert again["cases"][0] == {
        "name": "sum",
        "input": "What is 2 + 40?",
        "expect": doc["cases"][0]["expect"],
    }  # type: ignore[index]
    assert Dataset.from_json(again).names == dataset.names
    path.write_text(json.dumps({"cases": [{"input": "x", "expect": [{"end_in": "ok"}]}]}))
    with pytest.raises(
        ValueError, match=r"case 1: expect: .* names no one expectation; did you mean 'ends_in'\?"
    ):
        Dataset.load(path)
    path.write_text(
        json.dumps({"cases": [{"input": "x", "expect": [{"edge": "deciding", "at_most": 1}]}]})
    )
    with pytest.raises(ValueError, match=r'"edge" is "SOURCE TRIGGER"'):
        Dataset.load(path)
    with pytest.raises(ValueError, match="no such file"):
        Dataset.load(tmp_path / "none.json")


# ---------------------------------------------------------------- the report


def test_the_report_counts_terminals_paths_edges_and_approvals() -> None:
    """A model that asks to write a file (gated: the run interrupts) or answers at once."""
    model = StochasticModel(
        [[(0.5, call_tool("write_file", path="a.md", text="hi")), (0.5, say("done"))]], seed=11
    )
    agent = Agent(model, [write_file], middleware=[HumanInTheLoop({"write_file": True})])
    dataset = Dataset(
        [Case("write a.md", [Expect.never_visits("interrupted")], name="write")], name="files"
    )
    report = evaluate_sync(agent, dataset, runs=40, concurrency=4, name="gated")
    terminals = report.terminals()
    assert sum(terminals.values()) == 40 and set(terminals) == {"ok", "interrupted"}
    (case,) = report.cases
    assert case.rate(0).passed == terminals["ok"]
    assert {" ".join(report.states(i)) for i in report.path_counts()} == {
        "expanding calling interrupt_check interrupted",
        "expanding calling interrupt_check executing propagating until_check deciding ok",
    }
    low, high = case.rate(0).interval
    assert low < case.rate(0).value < high
    again = EvalReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again == report
    assert report.to_json()["summary"]["terminals"] == dict(sorted(terminals.items()))


# ---------------------------------------------------------------- comparing


def test_a_real_change_is_detected_and_the_same_configuration_is_not() -> None:
    baseline = evaluate_sync(stochastic(0.2, 0.02, seed=1), QA, runs=10, name="baseline")
    same = evaluate_sync(stochastic(0.2, 0.02, seed=2), QA, runs=10, name="same")
    loops = evaluate_sync(stochastic(0.75, 0.02, seed=3), QA, runs=10, name="loops more")
    errors = evaluate_sync(stochastic(0.2, 0.3, seed=4), QA, runs=10, name="fails more")

    unchanged = compare(baseline, same)
    assert unchanged.changes == [] and unchanged.ok
    assert unchanged.verdict.startswith("no change at alpha=0.05 (Fisher's exact test")

    looping = compare(baseline, loops)
    assert "deciding --loop--> expanding" in {r.what for r in looping.changes if r.kind == "edge"}
    assert looping.ok  # looping more is a change, not a regression: every run still passes
    failing = compare(baseline, errors)
    assert {(r.kind, r.what) for r in failing.regressions} == {
        ("overall", "met every expectation"),
        ("terminal", "ends in error"),
    }
    with pytest.raises(
        AssertionError,
        match=r"(?s)fails more regressed against baseline: .*\n"
        r"  ends in error: 2% -> 34% \(p=0.000732\)",
    ):
        failing.check()
    # a threshold larger than the drop lets it through
    assert compare(baseline, errors, threshold=0.5).ok


def _false_positives(seeds: int) -> tuple[int, int, int, int]:
    """Of ``seeds`` pairs of evals of one configuration: how many a comparison calls changed
    at alpha 0.05 with Holm's correction, with Benjamini-Hochberg's, and of all the single
    tests, how many had an unadjusted p under 0.05, of how many."""
    holm = bh = raw = tests = 0
    for seed in range(seeds):
        a = evaluate_sync(stochastic(0.2, 0.02, seed=2 * seed), QA, runs=10, name="a")
        b = evaluate_sync(stochastic(0.2, 0.02, seed=2 * seed + 1), QA, runs=10, name="b")
        holm += bool(compare(a, b).changes)
        by_rate = compare(a, b, correction="bh")
        bh += bool(by_rate.changes)
        p_values = [r.p for r in by_rate.rows if r.p is not None]
        tests += len(p_values)
        raw += sum(p < 0.05 for p in p_values)
    return holm, bh, raw, tests


def test_the_false_positive_rate_over_a_hundred_seeds_is_the_one_the_docs_state() -> None:
    holm, bh, raw, tests = _false_positives(100)
    assert holm <= 5 and bh <= 5  # alpha = 0.05
    page = " ".join((ROOT / "docs" / "evals.md").read_text().split())
    stated = re.search(
        r"called (\d+) of the 100 pairs changed .* With Benjamini-Hochberg it called (\d+) of "
        r"100; of the ([\d,]+) single tests, (\d+) \(",
        page,
    )
    assert stated is not None
    assert (int(stated[1]), int(stated[2]), int(stated[3].replace(",", "")), int(stated[4])) == (
        holm,
        bh,
        tests,
        raw,
    )


def test_comparing_two_datasets_is_refused() -> None:
    a = evaluate_sync(stochastic(0.2, 0.0, 1), QA, runs=1)
    other = Dataset([Case("x", name="q0")], name="other")
    b = evaluate_sync(stochastic(0.2, 0.0, 1), other, runs=1)
    with pytest.raises(
        ValueError, match=r"ran dataset 'qa' and .* ran 'other'; compare two evals of one dataset"
    ):
        compare(a, b)


# ---------------------------------------------------------------- the store


def test_reports_are_saved_in_the_store_and_read_back(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        report = evaluate_sync(stochastic(0.2, 0.02, 5), QA, runs=2, name="saved", store=store)
        assert [row[:3] for row in store.evals()] == [(report.id, "saved", "qa")]
        assert EvalReport.load(store, report.id) == report
        with pytest.raises(
            StoreError, match=rf"no eval '{report.id[:-1]}' in .*; did you mean '{report.id}'\?"
        ):
            EvalReport.load(store, report.id[:-1])
        with pytest.raises(
            StoreError, match=r"no eval 'other' in .*; it keeps 1: agentfsm eval list"
        ):
            EvalReport.load(store, "other")


# ---------------------------------------------------------------- cassettes and providers


def test_an_eval_replays_a_cassette_once_per_run(tmp_path: Path) -> None:
    path = tmp_path / "qa.json"
    recorded = Agent(
        record(ScriptedModel([call_tool("lookup", query="q"), say("42")]), path), [lookup]
    )
    recorded.execute_sync("question 0")
    report = evaluate_sync(
        lambda: Agent(Cassette(path), [lookup]), Dataset([Case("question 0")]), runs=3
    )
    assert report.overall.passed == 3 and report.terminals() == {"ok": 3}


async def test_an_eval_runs_against_an_openai_compatible_server_on_loopback() -> None:
    """Usage and the cost the server reports (as OpenRouter does) are summed per run."""
    server = FakeServer()

    def answer(request: object) -> Reply:
        body = request.json  # type: ignore[attr-defined]
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if tool_results:
            reply = completion("It is 42.", usage=(30, 5))
        else:
            reply = completion(
                None,
                [("c1", "lookup", '{"query": "fact"}')],
                finish_reason="tool_calls",
                usage=(20, 8),
            )
        reply["usage"]["cost"] = 0.0005
        return Reply(json=reply)

    server.default = answer
    model = OpenAIChat("gpt-test", base_url=server.url, api_key="k", timeout=5.0)
    try:
        report = await evaluate(Agent(model, [lookup]), QA, runs=2, concurrency=3, name="loopback")
    finally:
        await model.aclose()
        server.close()
    assert report.overall.passed == 10
    assert len(server.requests) == 20
    assert {(o.input_tokens, o.output_tokens) for o in report.outcomes} == {(50, 13)}
    assert report.cost() == pytest.approx(0.01)
    assert report.model == "openai:gpt-test"


# ---------------------------------------------------------------- the command line


AGENTS = '''
from agentfsm import Agent, tool
from agentfsm.providers import call_tool, fail, say
from agentfsm.testing import StochasticModel

@tool
def lookup(query: str) -> str:
    """Look a fact up."""
    return "42"

def make(loop, error, seed):
    return Agent(StochasticModel([
        [(1 - error, call_tool("lookup", query="x")), (error, fail("server_error"))],
        [(1 - loop, say("It is 42.")), (loop, call_tool("lookup", query="more"))],
    ], seed=seed), [lookup], max_runs=8)

steady = make(0.2, 0.02, 1)
steady_again = make(0.2, 0.02, 2)
failing = make(0.2, 0.3, 3)
'''


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", "eval", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_runs_saves_compares_and_gates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "evalagents.py").write_text(AGENTS)
    (tmp_path / "qa.json").write_text(json.dumps(QA.to_json()))
    db = str(tmp_path / "evals.db")
    # once as a user runs it, in a process of its own; then in this one, for speed
    first = _cli(
        "run",
        "qa.json",
        "--agent",
        "evalagents:steady",
        "--name",
        "steady",
        "--db",
        db,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert "met every expectation" in first.stdout
    saved = re.search(r"saved: eval (\S+) in", first.stdout)
    assert saved is not None
    monkeypatch.chdir(tmp_path)

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(["eval", *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = cli(
        "run",
        "qa.json",
        "--agent",
        "evalagents:steady_again",
        "--against",
        saved[1],
        "--db",
        db,
        "--json",
        "--no-save",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["comparison"]["verdict"].startswith("no change at alpha=0.05")
    assert doc["summary"]["runs"] == 50
    code, _, _ = cli(
        "run", "qa.json", "--agent", "evalagents:failing", "--name", "failing", "--db", db
    )
    assert code == 0
    listed = json.loads(cli("list", "--db", db, "--json")[1])
    assert [e["name"] for e in listed] == ["failing", "steady"]
    code, out, _ = cli("compare", saved[1], listed[0]["id"], "--db", db)
    assert code == 1
    assert "REGRESSION" in out and "ends in error" in out
    assert cli("compare", saved[1], listed[0]["id"], "--db", db, "--max-drop", "60")[0] == 0
    code, _, err = cli(
        "run", "qa.json", "--agent", "evalagents:failing", "--no-save", "--fail-under", "95"
    )
    assert code == 1 and "under --fail-under 95%" in err
    code, _, err = cli("run", "qa.json", "--agent", "evalagents:stedy", "--no-save")
    assert code == 2 and "has no attribute 'stedy'" in err
    code, _, err = cli("show", "nope", "--db", db)
    assert code == 2 and "no eval 'nope'" in err
    code, out, _ = cli("show", listed[0]["id"], "--db", db)
    assert code == 0 and "failing on qa: 5 cases x 10 runs" in out


# ---------------------------------------------------------------- the pytest gate

GATED = '''
from agentfsm import Agent, tool
from agentfsm.evals import Case, Dataset, Expect, evaluate_sync
from agentfsm.providers import call_tool, fail, say
from agentfsm.testing import StochasticModel

@tool
def lookup(query: str) -> str:
    """Look a fact up."""
    return "42"

QA = Dataset([Case(f"q{i}", name=f"q{i}") for i in range(5)], name="qa",
             expect=[Expect.ends_in("ok")])

def agent(error, seed):
    return Agent(StochasticModel([
        [(1 - error, call_tool("lookup", query="x")), (error, fail("server_error"))],
        say("It is 42."),
    ], seed=seed), [lookup])

def test_baseline(eval_gate):
    assert eval_gate(evaluate_sync(agent(0.02, 1), QA, runs=10, name="support"), None) is None

def test_same(eval_gate):
    comparison = eval_gate(evaluate_sync(agent(0.02, 2), QA, runs=10, name="candidate"), "support")
    assert comparison.ok

def test_worse(eval_gate):
    eval_gate(evaluate_sync(agent(0.4, 3), QA, runs=10, name="candidate"), "support")
'''


def test_the_pytest_plugin_gates_an_eval_against_a_saved_baseline(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(GATED)
    db = str(tmp_path / "evals.db")
    # in file order: the baseline is saved first, then each candidate is judged against it
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--agentfsm-eval-db",
        db,
        "--agentfsm-eval-save",
    )
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "candidate regressed against support" in out
    assert "ends in error: 2% -> 44% (p=6.22e-06)" in out


def test_a_run_that_cannot_start_is_an_outcome_and_a_regression() -> None:
    """No messages and no system prompt: the run is refused before the machine starts."""
    dataset = Dataset([Case([], [Expect.ends_in("ok")], name="empty")], name="edge cases")
    report = evaluate_sync(lambda: Agent(ScriptedModel([say("hi")])), dataset, runs=3)
    assert report.terminals() == {"none": 3}
    assert {o.error for o in report.outcomes} == {
        "no_messages: The agent state has no messages and the agent no system prompt: there "
        "is nothing to send. Start from AgentState.of(prompt) or add a user message first."
    }
    fine = Dataset(
        [Case([Message.user("hi")], [Expect.ends_in("ok")], name="empty")], name="edge cases"
    )
    good = evaluate_sync(lambda: Agent(ScriptedModel([say("hi")])), fine, runs=20)
    bad = evaluate_sync(lambda: Agent(ScriptedModel([say("hi")])), dataset, runs=20)
    assert ("terminal", "ends in none") in {
        (r.kind, r.what) for r in compare(good, bad).regressions
    }
