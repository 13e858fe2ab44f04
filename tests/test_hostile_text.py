"""Hostile text from a model, a tool or a file, through every command that prints it.

Escape sequences (clear the screen, set the window title, a bare C1 CSI, a
carriage return, a right-to-left override) must reach the terminal spelled
out, and rich markup must show as written, never be read.
"""

from __future__ import annotations

import io
import json
import pathlib
import sys

import pytest
from rich.console import Console

from agentfsm import Agent, AgentState, start_run, tool
from agentfsm._approval import request_digest
from agentfsm._cli._main import _decide, dump_runs, load_runs, main
from agentfsm._printable import printable
from agentfsm.diagrams import trace_markdown
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore

HOSTILE = (
    "\x1b]0;pwned\x07\x1b[2J\x9b31m[bold red]markup[/bold red]\r\u202eevil"
    "<script>alert(1)</script><img src=x onerror=alert(2)>"
)
#: What must never reach a terminal raw.
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e")
#: What shows instead: the sequence spelled out, the markup as written.
SPELLED = ("\\u001b]0;pwned\\u0007", "\\u009b31m", "[bold red]markup[/bold red]", "\\u202eevil")

AGENT_MODULE = '''
from agentfsm import Agent, tool
from agentfsm.providers import ScriptedModel, call_tool, say

HOSTILE = {hostile!r}


@tool
def echo_back(text: str) -> str:
    """Say the text back."""
    return HOSTILE + text


agent = Agent(ScriptedModel([say(HOSTILE)], model_name=HOSTILE), [echo_back])
'''


@tool
def echo_back(text: str) -> str:
    """Say the text back."""
    return HOSTILE + text


def _safe(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the terminal"


def _spelled(text: str) -> None:
    _safe(text)
    for shown in SPELLED:
        assert shown in text, f"{shown!r} is not shown"


@pytest.fixture
def hostile(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[pathlib.Path, pathlib.Path]:
    """A saved run full of hostile text, paused with a hostile reason, and its trace file."""
    model = ScriptedModel([call_tool("echo_back", text=HOSTILE), say(HOSTILE)], model_name=HOSTILE)
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        run = start_run(Agent(model, [echo_back]), AgentState.of(HOSTILE), store, run_id="r1")
        for _ in range(5):  # past the tool's result
            run.step_sync()
        run.request_pause(HOSTILE)
        run.run_sync()
    assert run.agent_state.status == "paused"
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(dump_runs([run.trace])), encoding="utf-8")
    (tmp_path / "hostile_agent.py").write_text(AGENT_MODULE.format(hostile=HOSTILE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside what is checked
    return db, trace


def test_printable_spells_out_controls_and_keeps_text() -> None:
    assert printable("a\x1b[2Jb\tc\nd") == "a\\u001b[2Jb\tc\nd"
    assert printable("\x9b\u202e\x7f\x00") == "\\u009b\\u202e\\u007f\\u0000"
    assert printable("[red]é…[/red]") == "[red]é…[/red]"
    assert printable(3) == "3"
    # Spelled the JSON way, so a JSON string stays JSON and reads back as it was.
    assert json.loads(printable(json.dumps("\x9b\u202e", ensure_ascii=False))) == "\x9b\u202e"


def test_show(
    hostile: tuple[pathlib.Path, pathlib.Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(hostile[1])]) == 0
    out = capsys.readouterr().out
    _spelled(out)


def test_runs_list(
    hostile: tuple[pathlib.Path, pathlib.Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--db", str(hostile[0])]) == 0
    out = capsys.readouterr().out
    _safe(out)
    assert "\\u001b]0;pwned" in out  # the pause reason, in the summary column


@pytest.mark.parametrize("as_json", [False, True])
def test_runs_show(
    hostile: tuple[pathlib.Path, pathlib.Path], capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    assert main(["runs", "show", "r1", "--db", str(hostile[0]), *["--json"] * as_json]) == 0
    out = capsys.readouterr().out
    _safe(out)
    if as_json:
        doc = json.loads(out)  # still JSON, and the text reads back as it was
        assert json.dumps(HOSTILE)[1:-1] in json.dumps(doc)
    else:
        assert "paused: \\u001b]0;pwned" in out and "[bold red]markup[/bold red]" in out


def test_runs_resume(
    hostile: tuple[pathlib.Path, pathlib.Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["runs", "resume", "r1", "--db", str(hostile[0]), "--agent", "hostile_agent:agent"])
        == 0
    )
    captured = capsys.readouterr()
    _safe(captured.out + captured.err)
    assert "answer: \\u001b]0;pwned" in captured.out


def test_view_escapes_for_html(
    hostile: tuple[pathlib.Path, pathlib.Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for source in (["r1", "--db", str(hostile[0])], [str(hostile[1])]):
        assert main(["view", *source, "--out", "page.html"]) == 0
        page = pathlib.Path("page.html").read_text(encoding="utf-8")
        assert "<script>alert" not in page and "<img" not in page
        assert "\\u003cscript\\u003ealert(1)" in page
        _safe(capsys.readouterr().out)


@pytest.mark.parametrize("stream", [False, True])
def test_the_live_view_and_the_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    # The scripted provider says the prompt back: the model's text is the hostile text.
    assert main(["run", "--provider", "scripted", *["--stream"] * stream, HOSTILE]) == 0
    out = capsys.readouterr().out
    _spelled(out)


def test_the_approval_panel() -> None:
    console = Console(file=io.StringIO(), width=100, force_terminal=False, color_system=None)
    request = {"tool_name": HOSTILE, "display_text": HOSTILE, "arguments": {HOSTILE: HOSTILE}}
    # The decision is bound to the request as shown, hostile text and all.
    assert _decide(request, "reject", console) == {
        "type": "reject",
        "digest": request_digest(request),
    }
    out = console.file.getvalue()  # type: ignore[attr-defined]
    _spelled(out)


def test_errors_from_a_file_are_spelled_out(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runs": [{"format": HOSTILE}]}), encoding="utf-8")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    _safe(err)
    assert "pwned" in err and err.count("\n") == 1


# ---------------------------------------------------------------- odd values in a trace file


def _odd_trace_file(path: pathlib.Path, tools: object) -> pathlib.Path:
    """A saved trace whose step details hold values of types no run records: a number for
    the tool calls, ``tools`` as ``tools`` says, markup and escapes in every field."""
    run = Agent(
        ScriptedModel([call_tool("echo_back", text="x", call_id="c1"), say("done")]), [echo_back]
    ).start(AgentState.of("go"))
    run.run_sync()
    document = dump_runs([run.trace])
    (saved,) = document["runs"]
    transitions = saved["value"]["transitions"]
    for transition in transitions:
        transition["elapsed"] = 0.0
    assert [t["source"] for t in transitions[:4]] == [
        "expanding",
        "calling",
        "interrupt_check",
        "executing",
    ]
    transitions[0]["detail"] = {"inserted": {"x": 1}, "[red]k": "[link=http://x]v\x1b[2J"}
    transitions[1]["detail"] = {"model": "[bold red]m[/]", "tool_calls": 1.5, "usage": "lots"}
    transitions[3]["detail"] = {"tools": tools, "errors": "[blink]e"}
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize(("tools", "ran"), [(3, "ran 3"), (None, "ran None"), ("ab", "ran ab")])
def test_show_writes_odd_detail_values_as_text(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tools: object,
    ran: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    trace = _odd_trace_file(tmp_path / "odd.json", tools)
    assert main(["show", str(trace)]) == 0
    out = capsys.readouterr().out
    _safe(out)
    rows = [line.split("│")[-2].strip() for line in out.splitlines() if line.count("│") > 6]
    assert rows[:4] == [
        "+{'x': 1} messages; [red]k=[link=http://x]v\\u001b[2J",
        "[bold red]m[/] -> 1.5; usage=lots",
        "",
        f"{ran} ([blink]e failed)",
    ]
    assert "tools run    0" in out  # a detail that lists no tools counts none


@pytest.mark.parametrize(("tools", "ran"), [(3, "ran 3"), (None, "ran None")])
def test_trace_markdown_writes_odd_detail_values_as_text(
    tmp_path: pathlib.Path, tools: object, ran: str
) -> None:
    (trace,) = load_runs(json.loads(_odd_trace_file(tmp_path / "odd.json", tools).read_text()))
    lines = trace_markdown(trace).splitlines()
    assert lines[4:8] == [
        "| 1 | `expanding` | `expanded` | `calling` | 0.0 "
        "| +{'x': 1} messages; [red]k=[link=http://x]v\\u001b[2J |",
        "| 2 | `calling` | `called` | `interrupt_check` | 0.0 "
        "| [bold red]m[/] -> 1.5; usage=lots |",
        "| 3 | `interrupt_check` | `clear` | `executing` | 0.0 |  |",
        f"| 4 | `executing` | `executed` | `propagating` | 0.0 | {ran} ([blink]e failed) |",
    ]
