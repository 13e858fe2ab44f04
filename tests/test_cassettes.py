"""Cassettes: record a model's requests and replies, replay them, refuse what differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfsm import Agent, AgentState, ChainError, Failed, Message, Ok, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.testing import (
    Cassette,
    CassetteMismatchError,
    cassette_from_traces,
    record,
    redact,
    regression_test,
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _ask(model: object, question: str = "1+2?") -> object:
    return Agent(model, [add]).start(AgentState.of(question)).run_sync()  # type: ignore[arg-type]


def _recorded(tmp_path: Path, *replies: object) -> Path:
    path = tmp_path / "c.json"
    real = ScriptedModel(list(replies or (call_tool("add", a=1, b=2), say("3"))))
    result = _ask(record(real, path))
    assert isinstance(result, Ok | Failed)
    return path


def test_a_replayed_run_is_the_recorded_one(tmp_path: Path) -> None:
    path = _recorded(tmp_path)
    doc = json.loads(path.read_text())
    assert doc["model"] == "scripted"
    assert [len(e["request"]["messages"]) for e in doc["episodes"]] == [1, 3]
    assert doc["episodes"][0]["request"]["tools"][0]["name"] == "add"
    replay = Cassette(path)
    result = _ask(replay)
    assert isinstance(result, Ok) and result.chain.last_message.text == "3"
    assert replay.played == 2 and replay.name == "scripted"
    replay.check()


def test_a_different_request_fails_with_a_diff(tmp_path: Path) -> None:
    replay = Cassette(_recorded(tmp_path))
    result = _ask(replay, "2+2?")
    assert isinstance(result, Failed) and result.error.type == "cassette_mismatch"
    with pytest.raises(CassetteMismatchError) as info:
        replay.check()
    text = info.value.message
    assert "request 1 differs" in text
    assert '-      "content": "1+2?",' in text and '+      "content": "2+2?",' in text


def test_strict_refuses_a_request_past_the_recording(tmp_path: Path) -> None:
    path = _recorded(tmp_path, say("3"))
    replay = Cassette(path)
    _ask(replay)
    result = _ask(replay)
    assert isinstance(result, Failed)
    assert "request 2 is not in" in result.error.message


def test_new_episodes_records_past_the_recording(tmp_path: Path) -> None:
    path = _recorded(tmp_path, say("3"))
    more = ScriptedModel([say("4")])
    replay = Cassette(path, "new_episodes", model=more)
    _ask(replay)
    second = _ask(replay, "2+2?")
    assert isinstance(second, Ok) and second.chain.last_message.text == "4"
    assert len(json.loads(path.read_text())["episodes"]) == 2
    assert isinstance(_ask(Cassette(path)), Ok)


def test_new_episodes_needs_a_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the model"):
        Cassette(_recorded(tmp_path), "new_episodes")
    with pytest.raises(ValueError, match="mode is"):
        Cassette(_recorded(tmp_path), "all")  # type: ignore[arg-type]


def test_a_failing_call_is_recorded_and_replayed(tmp_path: Path) -> None:
    error = ChainError("bad_request", "no", retryable=False)
    path = _recorded(tmp_path, error)
    result = _ask(Cassette(path))
    assert isinstance(result, Failed) and result.error.type == "bad_request"


def test_keys_and_authorization_headers_are_redacted(tmp_path: Path) -> None:
    leaky = Message.assistant(
        "done",
        metadata={"headers": {"Authorization": "Bearer abc.def.ghi", "x-api-key": "k-123"}},
    )
    error = ChainError(
        "bad_request",
        "rejected key sk-ant-0123456789abcdefghij",
        retryable=False,
        details={"api_key": "secret-value", "request": {"authorization": "Basic xyz"}},
    )
    path = tmp_path / "c.json"
    real = ScriptedModel([leaky, error])
    _ask(record(real, path))
    _ask(record(real, tmp_path / "e.json"))
    text = path.read_text() + (tmp_path / "e.json").read_text()
    for secret in ("abc.def.ghi", "k-123", "0123456789abcdefghij", "secret-value", "xyz"):
        assert secret not in text
    assert text.count("[REDACTED]") >= 5
    assert redact({"note": "Bearer 0123456789"}) == {"note": "[REDACTED]"}


def _agent(model: object) -> Agent:
    return Agent(model, [add], system_prompt="You add.")  # type: ignore[arg-type]


def test_a_saved_run_becomes_a_cassette(tmp_path: Path) -> None:
    real = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    run = _agent(real).start(AgentState.of("1+2?"))
    run.run_sync()
    path = tmp_path / "saved.json"
    assert cassette_from_traces(run.trace, path) == 2
    doc = json.loads(path.read_text())
    assert doc["episodes"][0]["request"]["tools"] == [{"name": "add"}]
    replay = Cassette(path)
    again = _agent(replay).start(AgentState.of("1+2?"))
    again.run_sync()
    replay.check()
    assert again.trace.path == run.trace.path
    assert cassette_from_traces([run.trace], path, tools=[add]) == 2
    assert json.loads(path.read_text())["episodes"][0]["request"]["tools"][0]["description"]
    other = Cassette(path)
    _agent(other).start(AgentState.of("1+3?")).run_sync()
    assert other.mismatches


def test_a_saved_run_becomes_a_regression_test(tmp_path: Path) -> None:
    real = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    run = _agent(real).start(AgentState.of("1+2?"))
    run.run_sync()
    cassette_from_traces(run.trace, tmp_path / "saved.json")
    agent = "tests.test_cassettes:_agent"
    text = regression_test(
        run.trace, tmp_path / "saved.json", agent=agent, test=tmp_path / "test_saved.py"
    )
    assert "from tests.test_cassettes import _agent" in text
    assert repr(run.trace.path) in text and "Path(__file__).parent / 'saved.json'" in text
    compile(text, "test_saved.py", "exec")  # a valid test module
    # the cassette's place: absolute as given; relative, from the test file's folder
    absolute = regression_test(run.trace, tmp_path / "saved.json", agent=agent)
    assert f"CASSETTE = Path({(tmp_path / 'saved.json').as_posix()!r})" in absolute
    nested = regression_test(run.trace, "cassettes/saved.json", agent=agent, test="tests/t.py")
    assert "CASSETTE = Path(__file__).parent / '../cassettes/saved.json'" in nested
    as_given = regression_test(run.trace, "cassettes/saved.json", agent=agent)
    assert "CASSETTE = Path(__file__).parent / 'cassettes/saved.json'" in as_given


def test_runs_export_turns_a_saved_run_into_a_cassette_and_a_passing_test(
    tmp_path: Path,
) -> None:
    """A run seen in production becomes a regression test from the shell."""
    import subprocess
    import sys

    from agentfsm import AgentState, start_run
    from agentfsm._demo import calculator_agent
    from agentfsm.providers import ScriptedModel, call_tool, say
    from agentfsm.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.db")
    model = ScriptedModel([call_tool("add", a=2, b=40), say("2 + 40 = 42")])
    run = start_run(calculator_agent(model), AgentState.of("What is 2 + 40?"), store, run_id="calc")
    run.run_sync()
    store.close()
    cli = [sys.executable, "-m", "agentfsm", "runs", "export", "calc"]
    done = subprocess.run(
        [
            *cli,
            "--db",
            "runs.db",
            "--cassette",
            "calc.json",
            "--test",
            "test_calc.py",
            "--agent",
            "agentfsm._demo:calculator_agent",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 2 model call(s) of run calc to calc.json" in done.stdout
    replayed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_calc.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 passed" in replayed.stdout
    refused = subprocess.run(
        [*cli, "--db", "runs.db", "--cassette", "x.json", "--test", "t.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--test needs --agent" in refused.stderr


SHOP_AGENT = '''
"""A user's own machine and the agent that runs on it (the module a test imports)."""

from agentfsm import STANDARD, Agent, HumanInTheLoop, tool
from agentfsm.providers import call_tool, say


def tally(result, opts):
    """A step of the shop's own, between the until-tool check and the decision."""
    return result


SHOP = STANDARD.insert("tallying", (tally,), after="until_check", name="shop_standard")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def publish(text: str) -> str:
    """Publish the total (needs approval)."""
    return f"published {text}"


def script(messages):
    """Add, then publish, then done: a reply fixed by how far the conversation got."""
    turns = sum(m.role == "tool" for m in messages)
    if turns == 0:
        return call_tool("add", a=2, b=40)
    if turns == 1:
        return call_tool("publish", text="42")
    return say("done")


def make_agent(model):
    gate = HumanInTheLoop({"publish": True})
    return Agent(model, [add, publish], middleware=[gate], machine=SHOP)
'''


def test_runs_export_replays_a_resumed_run_of_a_users_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of a user's own machine, paused then resumed then approved (or rejected),
    exported from the shell with the cassette in another folder than the test: the
    tests written pass, each asserting every segment's path."""
    import os
    import subprocess
    import sys

    from agentfsm import start_run
    from agentfsm.providers import ScriptedModel
    from agentfsm.store import SQLiteStore, load_run

    (tmp_path / "shop_agent.py").write_text(SHOP_AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    import shop_agent  # type: ignore[import-not-found]

    def agent() -> Agent:
        return shop_agent.make_agent(ScriptedModel(shop_agent.script))  # type: ignore[no-any-return]

    with SQLiteStore(tmp_path / "runs.db") as store:
        asked = start_run(
            agent(), AgentState.of("2 + 40?"), store, run_id="asked", should_pause=lambda: True
        )
        asked.run_sync()
        assert agent().resume_run_sync("asked", store).status == "interrupted"
        assert (
            agent().resume_run_sync("asked", store, [{"type": "approve"}], unbound=True).status
            == "ok"
        )
        drained = start_run(agent(), AgentState.of("2 + 40?"), store, run_id="drained")
        for _ in range(4):  # past the tools of the first reply
            drained.step_sync()
        drained.request_pause("draining")
        drained.run_sync()
        assert agent().resume_run_sync("drained", store).status == "interrupted"
        assert (
            agent().resume_run_sync("drained", store, [{"type": "reject"}], unbound=True).status
            == "ok"
        )
        paths = {
            run_id: [t.path for t in load_run(store, run_id, strict=False).traces]
            for run_id in ("asked", "drained")
        }
    tallied = "propagating until_check tallying deciding"
    assert paths == {
        "asked": [
            "expanding calling paused",
            f"interrupt_check executing {tallied} expanding calling interrupt_check interrupted",
            f"interrupt_check executing {tallied} expanding calling interrupt_check "
            f"executing {tallied} ok",
        ],
        "drained": [
            "expanding calling interrupt_check executing propagating paused",
            f"{tallied} expanding calling interrupt_check interrupted",
            f"interrupt_check executing {tallied} expanding calling interrupt_check "
            f"executing {tallied} ok",
        ],
    }
    cli = [sys.executable, "-m", "agentfsm", "runs", "export", "--db", "runs.db"]
    agent_option = ["--agent", "shop_agent:make_agent"]
    elsewhere = tmp_path / "recorded" / "drained.json"
    exports = [
        (  # the user's machines named by the environment, a relative cassette
            [*cli, "asked", "--cassette", "cassettes/asked.json", "--test", "out/test_asked.py"],
            {"AGENTFSM_MACHINES": "shop_agent"},
        ),
        (  # ... or by --machines, and an absolute one
            [
                *cli,
                "drained",
                "--cassette",
                str(elsewhere),
                "--test",
                "out/test_drained.py",
                "--machines",
                "shop_agent",
            ],
            {},
        ),
    ]
    env = {k: v for k, v in os.environ.items() if k != "AGENTFSM_MACHINES"}
    for argv, more in exports:
        done = subprocess.run(
            [*argv, *agent_option],
            cwd=tmp_path,
            env={**env, **more},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    asked_test = (tmp_path / "out" / "test_asked.py").read_text()
    assert "CASSETTE = Path(__file__).parent / '../cassettes/asked.json'" in asked_test
    assert "decided = {'call_2': {'type': 'approve'}}" in asked_test
    drained_test = (tmp_path / "out" / "test_drained.py").read_text()
    assert "CASSETTE = Path(__file__).parent / '../recorded/drained.json'" in drained_test
    assert "decided = {'call_2': {'type': 'reject'}}" in drained_test
    for path in (*paths["asked"], *paths["drained"]):
        assert repr(path) in asked_test + drained_test
    replayed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "2 passed" in replayed.stdout
