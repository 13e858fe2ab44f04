"""Diagrams drawn from the machine table: every path, the drawings, one run, the live view."""

from __future__ import annotations

import asyncio
import io
import pathlib
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from agentfsm import STANDARD, AgentState, LLMChain, Message, Trace, Transition, tool
from agentfsm import _paths as pm
from agentfsm._demo import DEMO_PROMPT, demo_agent
from agentfsm._mermaid import mermaid_text
from agentfsm.diagrams import _files as diagram_files
from agentfsm.diagrams import _writers as d
from agentfsm.diagrams import summary, trace_table, watch
from agentfsm.diagrams._console import RunView
from agentfsm.providers import ScriptedModel, call_tool, say

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
REGENERATE = (
    "regenerate with: python -c 'from agentfsm.diagrams import _writers as d; import pathlib; "
    'g = pathlib.Path("tests/golden"); (g / "machine.mmd").write_text(d.machine_mermaid()); '
    '(g / "machine.dot").write_text(d.machine_dot()); '
    '(g / "paths.md").write_text(d.paths_markdown())\' and review the diff'
)


def _no_chain() -> LLMChain:
    return LLMChain(ScriptedModel([]))


def _trace(entry: str, *edges: tuple[str, str, str], elapsed: float = 0.001) -> Trace:
    chain = _no_chain()
    return Trace(entry, [Transition(s, t, dst, chain, elapsed) for s, t, dst in edges])


def _demo_traces(decision: str) -> list[Trace]:
    """The demo's first run and its resume with ``decision`` (its file written to a scratch
    folder)."""
    agent = demo_agent(delay=0, stream=False, folder=tempfile.mkdtemp())

    async def go() -> list[Trace]:
        first = agent.start(AgentState.of(DEMO_PROMPT))
        await first.run()
        second = await agent.start_resume(first.agent_state, [{"type": decision}], unbound=True)
        await second.run()
        return [first.trace, second.trace]

    return asyncio.run(go())


# ---------------------------------------------------------------- every path


def test_paths_cover_every_edge_and_end_in_a_terminal() -> None:
    found = pm.paths()
    taken = {e for p in found for e in p.edges}
    assert [e for e in STANDARD.edges if e not in taken] == []
    for p in found:
        assert p.terminal in STANDARD.terminals
        assert all(s not in STANDARD.terminals for s in p.states[:-1])
        assert STANDARD.is_path(p.states, p.triggers), p.text
        assert p.states[0] == STANDARD.entries[p.entry]
        assert p.situation


def test_paths_go_round_the_loop_at_most_once_and_repeat_no_state_within_a_lap() -> None:
    loop = set(pm.loop_edges())
    assert {(e.source, e.dest) for e in loop} == {("deciding", "expanding")}
    found = pm.paths()
    assert len({p.edges for p in found}) == len(found)
    for p in found:
        assert sum(e in loop for e in p.edges) <= 1
        laps: list[list[str]] = [[p.states[0]]]
        for e in p.edges:
            if e in loop:
                laps.append([])
            laps[-1].append(e.dest)
        for lap in laps:
            assert len(lap) == len(set(lap)), p.text
    assert any(sum(e in loop for e in p.edges) == 1 for p in found)
    assert pm.paths(loops=0) == [p for p in found if not set(p.edges) & loop]


def test_every_entry_reaches_every_terminal() -> None:
    found = pm.paths()
    for entry in STANDARD.entries:
        assert {p.terminal for p in found if p.entry == entry} == set(STANDARD.terminals)


def test_situations_come_from_the_whys() -> None:
    by_text = {p.text: p for p in pm.paths()}
    loop = "expanding calling interrupt_check executing propagating until_check deciding"
    assert by_text[f"{loop} ok"].situation == "the model answered without asking for tools"
    assert (
        by_text["expanding calling interrupt_check interrupted"].situation
        == "the model asked for a tool that needs approval"
    )
    two_laps = by_text[f"{loop} {loop} ok"].situation
    assert two_laps.startswith("the chain needs a response")
    assert two_laps.endswith("; then the model answered without asking for tools")
    # A why many states share says where it happened.
    assert by_text["expanding paused"].situation == "a step paused with a cause (in Expanding)"


# ---------------------------------------------------------------- the drawings


def _labels(mermaid: str) -> list[str]:
    return [line.split(" : ", 1)[1] for line in mermaid.splitlines() if " : " in line]


def test_machine_mermaid_draws_the_table() -> None:
    text = d.machine_mermaid()
    assert text.startswith("stateDiagram-v2\n")
    for e in STANDARD.edges:
        assert f"{pm.state_label(e.source)} --> {pm.state_label(e.dest)} : {e.trigger}" in text
    for situation, state in STANDARD.entries.items():
        assert f"[*] --> {pm.state_label(state)} : {situation}" in text
    for t in STANDARD.terminals:
        assert f"{pm.state_label(t)} --> [*]" in text
    # Every why is on the drawing: on its edge, or once in a note for a shared one.
    flat = text.replace("<br/>", " ")
    for e in STANDARD.edges:
        assert e.why in flat, e.why


def test_mermaid_labels_hold_nothing_the_parser_reads_as_syntax() -> None:
    for text in (d.machine_mermaid(), d.run_mermaid(_demo_traces("approve"))):
        for label in _labels(text):
            assert not re.search(r"[:;#{}\[\]\"]", label), label
    assert mermaid_text('a: b; c # {d} "e"') == "a - b, c no. (d) 'e'"


def test_machine_dot_labels_every_edge_with_trigger_and_why() -> None:
    text = d.machine_dot()
    assert text.startswith('digraph "standard" {')
    assert text.count(" -> ") == len(STANDARD.edges) + len(STANDARD.entries) + 1  # + comment
    flat = text.replace("<BR/>", " ").replace('</FONT> <FONT POINT-SIZE="9">', " ")
    for e in STANDARD.edges:
        assert f"<B>{e.trigger}</B>" in text
        assert e.why in flat, e.why


@pytest.mark.parametrize(
    ("name", "draw"),
    [
        ("machine.mmd", d.machine_mermaid),
        ("machine.dot", d.machine_dot),
        ("paths.md", d.paths_markdown),
    ],
)
def test_golden(name: str, draw: Callable[[], str]) -> None:
    expected = (GOLDEN / name).read_text(encoding="utf-8")
    assert draw() == expected, f"{name} changed; {REGENERATE}"


def test_committed_diagrams_are_what_the_table_draws() -> None:
    for name, text in diagram_files.diagram_files(svg=False).items():
        committed = (ROOT / "diagrams" / name).read_text(encoding="utf-8")
        assert committed == text, f"diagrams/{name} is stale; run: agentfsm diagrams"
    assert (ROOT / "diagrams" / "machine.svg").is_file()


def test_machine_markdown_embeds_the_mermaid_and_the_edge_table() -> None:
    text = d.machine_markdown()
    assert "```mermaid\n" + d.machine_mermaid() + "```" in text
    for e in STANDARD.edges:
        assert f"| `{e.source}` | `{e.trigger}` | `{e.dest}` | {e.why} |" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_svg_is_byte_stable() -> None:
    first, second = d.render_svg(d.machine_dot()), d.render_svg(d.machine_dot())
    assert first is not None and first == second
    assert "Generated by graphviz" not in first
    assert first.lstrip().startswith("<?xml")


def test_no_svg_without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d.shutil, "which", lambda _: None)
    assert d.render_svg("digraph {}") is None
    assert "machine.svg" not in diagram_files.diagram_files()


# ---------------------------------------------------------------- one run on the machine


def test_run_mermaid_highlights_and_counts_what_the_run_took() -> None:
    trace = _trace(
        "expanding",
        ("expanding", "expanded", "calling"),
        ("calling", "called", "interrupt_check"),
        ("interrupt_check", "clear", "executing"),
        ("executing", "executed", "propagating"),
        ("propagating", "propagated", "until_check"),
        ("until_check", "unsatisfied", "deciding"),
        ("deciding", "loop", "expanding"),
        ("expanding", "expanded", "calling"),
        ("calling", "failed", "error"),
    )
    text = d.run_mermaid(trace)
    assert "Expanding --> Calling : expanded x2" in text
    assert "Deciding --> Expanding : loop x1" in text
    assert "Calling --> Error : failed x1" in text
    assert "Deciding --> Ok : done\n" in text
    assert 'state "Calling x2" as Calling' in text
    assert "[*] --> Expanding : fresh x1" in text
    assert "class Error ended_error" in text
    assert re.search(r"class .*Ok.* idle", text)
    assert d.run_mermaid(trace, STANDARD) == text


def test_a_live_run_draws_on_its_own_machine() -> None:
    agent = demo_agent(delay=0, stream=False)
    run = agent.start(AgentState.of(DEMO_PROMPT))
    run.run_sync()
    assert "InterruptCheck --> Interrupted : interrupted x1" in d.run_mermaid(run.trace, run.table)


def test_run_dot_thickens_and_counts_the_edges_taken() -> None:
    traces = _demo_traces("approve")
    text = d.run_dot(traces)
    assert 'label="loop x3"' in text and "penwidth=" in text
    # the resumed segment enters where the approval was asked
    assert 'label="pending tool calls x1"' in text and 'label="fresh x1"' in text
    assert re.search(r'"ok" \[label=<Ok<BR/><FONT POINT-SIZE="9">x1</FONT>>', text)


def test_a_run_and_its_resume_are_one_story() -> None:
    first, second = _demo_traces("reject")
    assert first.terminal == "interrupted" and first.entry == "expanding"
    assert second.entry == "interrupt_check" and second.terminal == "ok"
    for trace in (first, second):
        assert STANDARD.is_path(trace.states, trace.triggers)
    page = d.run_markdown([first, second], title="demo")
    assert page.count("```mermaid") == 3
    assert "## Run 1: ended `interrupted`" in page and "## Run 2: ended `ok`" in page


# ---------------------------------------------------------------- traces as text


def test_compress_path() -> None:
    loop = "expanding calling interrupt_check executing propagating until_check deciding"
    assert pm.compress_path(f"{loop} {loop} {loop} ok".split()) == "(expanding … deciding)x3 ok"
    assert pm.compress_path(f"{loop} ok".split()) == "expanding … deciding ok"
    assert (
        pm.compress_path(f"propagating until_check deciding {loop} ok".split())
        == "propagating … deciding expanding … deciding ok"
    )
    assert pm.compress_path(["expanding", "paused"]) == "expanding paused"
    assert pm.compress_path([]) == ""


def test_trace_markdown_has_a_row_per_transition() -> None:
    trace = _demo_traces("approve")[0]
    text = d.trace_markdown(trace)
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(trace)
    assert "scripted-demo -> read_note, read_note" in text
    assert "ran search_notes" in text


def test_describe_detail() -> None:
    chain = _no_chain()
    assert d.describe_detail(Transition("a", "b", "c", chain)) == ""
    calling = Transition("calling", "called", "x", chain, detail={"model": "m", "tool_calls": []})
    assert d.describe_detail(calling) == "m -> answer"
    ran = Transition("executing", "executed", "x", chain, detail={"tools": ["a", "b"], "errors": 1})
    assert d.describe_detail(ran) == "ran a, b (1 failed)"


# ---------------------------------------------------------------- the console


def _console() -> Console:
    return Console(file=io.StringIO(), width=120, force_terminal=False, color_system=None)


def test_trace_table_and_summary() -> None:
    trace = _demo_traces("approve")[0]
    console = _console()
    console.print(trace_table(trace, title="run 1"))
    console.print(summary(trace))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "run 1" in out and "interrupt_check" in out and "write_file" in out
    assert "model calls  3" in out and "tools run    3" in out
    assert "(expanding … deciding)x2 expanding … interrupt_check interrupted" in out


async def test_watch_shows_steps_streamed_text_and_a_summary() -> None:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    model = ScriptedModel([call_tool("lookup", q="x"), say("all streamed words")], stream=True)
    from agentfsm import Agent

    run = Agent(model, [lookup]).start(AgentState((Message.user("go"),)))
    console = _console()
    result = await watch(run, console, title="live")
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert result.chain.last_message is not None
    assert run.trace.terminal == "ok"
    assert "all streamed words" in out
    assert "ended" in out and "ok" in out and "model calls  2" in out
    assert "(expanding … deciding)x2 ok" in out


def test_run_view_collects_deltas() -> None:
    view = RunView("v")
    view.begin("calling")

    class Delta:
        content = "hello "

    view.on_delta(_no_chain(), Delta())
    view.on_delta(_no_chain(), Delta())
    assert view.streamed == "hello hello "
    view.begin("calling")
    assert view.streamed == ""
    assert set(view.callbacks) == {"on_llm_new_delta"}


def test_the_diagrams_command_draws_a_users_own_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm._cli._main import main

    (tmp_path / "drawn_editor.py").write_text(
        "from agentfsm import STANDARD\n"
        "from agentfsm._steps import check_pause\n"
        'EDITOR = STANDARD.insert("reviewing", [check_pause], after="calling", '
        'name="drawn_editor")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    assert main(["diagrams", "--machine", "drawn_editor:EDITOR", "--out", str(out)]) == 0
    assert "Reviewing" in (out / "machine.mmd").read_text()
    assert main(["diagrams", "--machine", "drawn_editor:EDITOR", "--out", str(out), "--check"]) == 0
    assert main(["diagrams", "--machine", "drawn_editor:NOPE", "--out", str(out)]) == 2
    assert "has no attribute 'NOPE' for diagrams --machine" in capsys.readouterr().err


def test_a_diagrams_folder_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm._cli._main import main

    (tmp_path / "file").write_text("")
    assert main(["diagrams", "--out", str(tmp_path / "file" / "below")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write the diagrams to --out" in err[0]


def test_the_overview_reads_at_a_pages_width() -> None:
    """The home page's drawing: the triggers alone, in type as large as the page's, and
    narrow enough that a page's column (about 800 px) shrinks it little."""
    import re
    import shutil

    from agentfsm.diagrams import diagram_files

    files = diagram_files()
    overview = files["overview.dot"]
    assert "fontsize=15" in overview and "fontsize=9" not in overview
    assert "when" not in overview  # no edge's why: those are machine.svg's
    assert "label=<<B>paused</B>>, style=dashed" not in overview  # shared edges said once
    assert "paused from any state" in overview
    if shutil.which("dot") is None:
        return
    width = re.search(r'<svg width="(\d+)pt"', files["overview.svg"])
    assert width is not None and int(width.group(1)) <= 900, width
    full = re.search(r'<svg width="(\d+)pt"', files["machine.svg"])
    assert full is not None and int(full.group(1)) > int(width.group(1))


def test_the_site_loads_no_script_from_elsewhere() -> None:
    """Offline, a Mermaid block the site drew in the browser would show its source anyway:
    the site draws no Mermaid (no fence of its own, no script from a CDN) and shows the
    machines as SVG files it serves itself."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    config = (root / "mkdocs.yml").read_text(encoding="utf-8")
    settings = [line for line in config.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in settings if "mermaid" in line or "custom_fences" in line]
    assert "extra_javascript" not in config and "cdn" not in config.lower()
    index = (root / "docs" / "index.md").read_text(encoding="utf-8")
    assert "](diagrams/overview.svg)" in index
    assert (root / "diagrams" / "overview.svg").is_file()
