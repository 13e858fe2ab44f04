"""Human in the loop: interrupt before gated calls, decide, resume (SPEC §5)."""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import pytest

from agentfsm import (
    STANDARD,
    ActionRequest,
    Agent,
    AgentState,
    Approval,
    Decision,
    DecisionError,
    HumanInTheLoop,
    Message,
    MessageExpansion,
    ToolCall,
    ToolOutput,
    tool,
)
from agentfsm._approval import rejected, request_digest, without_answer
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.testing import assert_path
from tests.support import LOOP, submit, texts

executed: list[tuple[str, dict[str, Any]]] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    executed.append(("write_file", {"path": path, "text": text}))
    return f"wrote {path}: {text}"


@tool
def read(path: str) -> str:
    """Read a file."""
    executed.append(("read", {"path": path}))
    return f"content of {path}"


@tool
def delete(path: str) -> str:
    """Delete a file."""
    executed.append(("delete", {"path": path}))
    return f"deleted {path}"


GATES = {
    "write_file": True,
    "delete": {"allowed_decisions": ["approve", "reject"]},
    "read": False,
    "submit": True,
}


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


def make(model: ScriptedModel, *tools: Any) -> Agent:
    tools = tools or (write_file, read, delete)
    names = {t.name for t in tools}
    hitl = HumanInTheLoop({name: c for name, c in GATES.items() if name in names})
    return Agent(model, tools, middleware=[hitl])


async def interrupted(a: Agent) -> AgentState:
    run = a.start(AgentState.of("go"))
    await run.run()
    assert_path(run, "expanding calling interrupt_check interrupted")
    return run.agent_state


def test_configs_normalize() -> None:
    hitl = HumanInTheLoop({"a": True, "b": False, "c": [], "d": {}, "e": ["reject"]})
    assert hitl.configs == {
        "a": {"allowed_decisions": ["approve", "edit", "reject"]},
        "d": {"allowed_decisions": ["approve", "edit", "reject"]},
        "e": {"allowed_decisions": ["reject"]},
    }
    with pytest.raises(ValueError, match="Unknown decision"):
        HumanInTheLoop({"a": ["maybe"]})


async def test_15_gated_call_interrupts_and_nothing_runs() -> None:
    state = await interrupted(
        make(ScriptedModel([call_tool("write_file", path="a", text="x", call_id="w1")]))
    )
    assert state.status == "interrupted"
    assert executed == []
    assert state.interrupt_data == {
        "type": "hitl",
        "action_requests": [
            {
                "tool_call_id": "w1",
                "tool_name": "write_file",
                "arguments": {"path": "a", "text": "x"},
                "display_text": "Write file",
            }
        ],
        "review_configs": {"write_file": {"allowed_decisions": ["approve", "edit", "reject"]}},
        "hitl_tool_call_ids": ["w1"],
    }


async def test_16_approve_enters_at_the_state_that_asked_and_runs_at_executing() -> None:
    model = ScriptedModel([call_tool("write_file", path="a", text="x"), say("written")])
    a = make(model)
    state = await interrupted(a)
    assert state.interrupted_at == "interrupt_check"
    request = Approval.of(state.interrupt_data).requests[0]
    run = await a.start_resume(state, [request.approve()])
    assert run.state == "interrupt_check" and executed == []  # nothing runs before a step
    await run.run()
    assert_path(run, f"interrupt_check executing propagating until_check deciding {LOOP} ok")
    assert executed == [("write_file", {"path": "a", "text": "x"})]
    gate, ran = run.trace.transitions[:2]
    assert (gate.trigger, ran.trigger) == ("clear", "executed")
    assert ran.detail == {
        "tools": ["write_file"],
        "errors": 0,
        "decisions": {request.tool_call_id: "approve"},
    }
    assert texts(run.chain)[-2:] == [("tool", "wrote a: x"), ("assistant", "written")]


async def test_17_reject_is_information_for_the_model() -> None:
    model = ScriptedModel([call_tool("delete", path="a"), say("ok, not deleting")])
    a = make(model)
    state = await a.resume(await interrupted(a), [{"type": "reject"}], unbound=True)
    assert state.status == "ok" and executed == []
    tool_message = state.messages[2]
    (result,) = tool_message.tool_results
    assert (result.content, result.is_error) == (
        "Tool call 'delete' was rejected by a human reviewer.",
        False,
    )
    assert model.requests[1].messages[-1] == tool_message


async def test_18_edit_runs_with_new_arguments() -> None:
    a = make(ScriptedModel([call_tool("write_file", path="a", text="x"), say("done")]))
    state = await a.resume(
        await interrupted(a),
        [{"type": "edit", "arguments": {"path": "b", "text": "y"}}],
        unbound=True,
    )
    assert executed == [("write_file", {"path": "b", "text": "y"})]
    assert state.messages[2].tool_results[0].content == "wrote b: y"


async def test_19_an_approved_tools_expansion_applies_before_the_next_call() -> None:
    @tool
    def write_and_show(path: str) -> object:
        """Write, then show the file."""
        return MessageExpansion.expand(
            "written", [Message.user(f"<file {path}>")], result_content="shown below"
        )

    model = ScriptedModel([call_tool("write_and_show", path="p"), say("seen")])
    a = Agent(model, [write_and_show], middleware=[HumanInTheLoop({"write_and_show": True})])
    state = await a.resume(await interrupted(a), [{"type": "approve"}], unbound=True)
    assert state.status == "ok"
    seen = model.requests[1].messages
    assert seen[-2].tool_results[0].content == "shown below"
    assert seen[-1] == Message.user("<file p>")


async def test_20_and_32_ungated_sibling_waits_and_both_results_in_call_order() -> None:
    model = ScriptedModel(
        [
            call_tools(("read", {"path": "r"}), ("write_file", {"path": "w", "text": "t"})),
            say("both"),
        ]
    )
    a = make(model)
    state = await interrupted(a)
    assert executed == []
    assert state.interrupt_data is not None
    assert [r["tool_name"] for r in state.interrupt_data["action_requests"]] == ["write_file"]
    done = await a.resume(state, [{"type": "approve"}], unbound=True)
    assert [r.content for r in done.messages[2].tool_results] == ["content of r", "wrote w: t"]
    assert [name for name, _ in executed] == ["read", "write_file"]


async def test_30_resumed_target_tool_satisfies_until_tool_without_a_model_call() -> None:
    model = ScriptedModel([call_tool("submit", answer="42")])
    a = make(model, submit)
    run = a.start(AgentState.of("go"), until_tool="submit")
    await run.run()
    assert_path(run, "expanding calling interrupt_check interrupted")
    resumed = await a.start_resume(
        run.agent_state, [{"type": "approve"}], until_tool="submit", unbound=True
    )
    await resumed.run()
    assert_path(resumed, "interrupt_check executing propagating until_check ok")
    assert resumed.agent_state.tool_result is not None
    assert resumed.agent_state.tool_result.content == "submitted 42"
    assert model.calls == 1


async def test_31_two_gated_calls_approve_and_edit() -> None:
    model = ScriptedModel(
        [
            call_tools(
                ("write_file", {"path": "1", "text": "a"}),
                ("write_file", {"path": "2", "text": "b"}),
            ),
            say("ok"),
        ]
    )
    a = make(model)
    state = await a.resume(
        await interrupted(a),
        [{"type": "approve"}, {"type": "edit", "arguments": {"path": "2", "text": "B"}}],
        unbound=True,
    )
    assert [r.content for r in state.messages[2].tool_results] == ["wrote 1: a", "wrote 2: B"]


async def test_a_resumed_result_that_interrupts_again_interrupts_again() -> None:
    @tool
    def ask(question: str) -> ToolOutput:
        """Ask the user."""
        return ToolOutput("asked", interrupt={"question": question})

    a = Agent(
        ScriptedModel([call_tool("ask", question="why?")]),
        [ask],
        middleware=[HumanInTheLoop({"ask": True})],
    )
    resumed = await a.start_resume(await interrupted(a), [{"type": "approve"}], unbound=True)
    await resumed.run()
    assert_path(resumed, "interrupt_check executing propagating interrupted")
    assert resumed.agent_state.interrupted_at == "propagating"
    assert resumed.agent_state.interrupt_data is not None
    assert resumed.agent_state.interrupt_data["question"] == "why?"


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        (
            [{"type": "approve"}, {"type": "approve"}],
            "Decision count (2) does not match HITL tool count (1)",
        ),
        (["approve"], "Decision at index 0 is not a map"),
        ([{}], "Decision at index 0 has no type; use 'approve', 'edit' or 'reject'"),
        (
            [{"type": "edit", "arguments": {}}],
            "Decision type 'edit' not allowed for tool 'delete'. Allowed: ['approve', 'reject']",
        ),
        ([{"type": "approve", "tool_call_id": "zzz"}], "Decision at index 0 names tool call 'zzz'"),
    ],
)
async def test_decisions_that_do_not_fit_change_nothing(decisions: list[Any], message: str) -> None:
    model = ScriptedModel([call_tool("delete", path="a"), say("x")])
    a = make(model)
    state = await interrupted(a)
    with pytest.raises(ValueError) as info:
        await a.resume(state, decisions)
    assert str(info.value).startswith(message)
    assert executed == [] and model.calls == 1


async def test_edit_needs_arguments() -> None:
    a = make(ScriptedModel([call_tool("write_file", path="a", text="x")]))
    with pytest.raises(ValueError, match="needs 'arguments'"):
        await a.resume(await interrupted(a), [{"type": "edit"}], unbound=True)


async def test_no_interrupt_in_state() -> None:
    a = make(ScriptedModel([]))
    with pytest.raises(ValueError) as info:
        await a.resume(AgentState.of("go"), [{"type": "approve"}], unbound=True)
    assert str(info.value) == (
        "No interrupt data found in state. Cannot process decisions without interrupt context."
    )


# ---------------------------------------------------------------- bound decisions, gates checked


async def test_a_decision_without_the_requests_digest_is_refused_unless_unbound() -> None:
    model = ScriptedModel([call_tool("write_file", path="a", text="x"), say("done")])
    a = make(model)
    state = await interrupted(a)
    with pytest.raises(DecisionError, match="carries no digest"):
        await a.resume(state, [{"type": "approve"}])
    assert executed == [] and model.calls == 1
    request = Approval.of(state.interrupt_data).requests[0]
    wire = {"type": "approve", "digest": request.digest}  # what the CLI's hint shows
    done = await a.resume(state, [wire])
    assert done.status == "ok" and executed == [("write_file", {"path": "a", "text": "x"})]


async def test_an_edit_of_the_saved_request_after_the_review_does_not_run() -> None:
    """The reviewer saw path 'a'; the state was edited to ask about path 'b' since."""
    a = make(ScriptedModel([call_tool("write_file", path="a", text="x"), say("done")]))
    state = await interrupted(a)
    seen = Approval.of(state.interrupt_data).requests[0].approve()
    reply = state.messages[-1]
    edited_call = attrs.evolve(reply.tool_calls[0], arguments={"path": "b", "text": "x"})
    edited = attrs.evolve(
        state, messages=(*state.messages[:-1], attrs.evolve(reply, tool_calls=(edited_call,)))
    )
    data = dict(edited.interrupt_data or {})
    data["action_requests"] = [
        {**data["action_requests"][0], "arguments": {"path": "b", "text": "x"}}
    ]
    edited = attrs.evolve(edited, interrupt_data=data)
    with pytest.raises(DecisionError, match="was made on another action request"):
        await a.resume(edited, [seen])
    assert executed == []


def test_a_gate_naming_a_tool_the_agent_lacks_is_refused_with_a_suggestion() -> None:
    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        return path

    with pytest.raises(ValueError, match=r"'delete_files'.*did you mean 'delete_file'"):
        Agent(ScriptedModel([]), [delete_file], middleware=[HumanInTheLoop({"delete_files": True})])


def test_a_gate_on_a_machine_without_an_approval_state_is_refused() -> None:
    def let_through(result: Any, opts: Any = None) -> Any:
        return result

    no_gate = STANDARD.replace("interrupt_check", [let_through], name="hitl_no_gate")
    with pytest.raises(ValueError, match=r"has none .*'approval' effect"):
        Agent(
            ScriptedModel([]),
            [write_file],
            middleware=[HumanInTheLoop({"write_file": True})],
            machine=no_gate,
        )


def test_a_gate_is_checked_when_a_run_is_built_too() -> None:
    """Not only an Agent: a run of the standard mode over a chain refuses the same gates."""
    from agentfsm import LLMChain
    from agentfsm._modes import StandardMode

    chain = LLMChain(ScriptedModel([]), tools=[write_file], messages=[Message.user("go")])
    with pytest.raises(ValueError, match=r"'write'.*did you mean 'write_file'"):
        StandardMode().start(chain, {"middleware": [HumanInTheLoop({"write": True})]})

    def let_through(result: Any, opts: Any = None) -> Any:
        return result

    no_gate = STANDARD.replace("interrupt_check", [let_through], name="hitl_no_gate_run")
    with pytest.raises(ValueError, match=r"has none .*'approval' effect"):
        StandardMode(no_gate).start(chain, {"middleware": [HumanInTheLoop({"write_file": True})]})


# ---------------------------------------------------------------- an approval's wire form


_REQUEST = {
    "tool_call_id": "c1",
    "tool_name": "write_file",
    "arguments": {"path": "a"},
    "display_text": "Write file",
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"type": "hitl"},
            "No approval interrupt found in state; cannot process decisions without it",
        ),
        (
            {"hitl_tool_call_ids": [], "action_requests": "c1"},
            "An approval's action_requests is not a list",
        ),
        (
            {"hitl_tool_call_ids": [], "action_requests": [{"tool_call_id": 1}]},
            "An approval's action request {'tool_call_id': 1} is not one",
        ),
        (
            {
                "hitl_tool_call_ids": ["c1"],
                "action_requests": [{**_REQUEST, "display_text": 3}],
            },
            "An approval's action request "
            + repr({**_REQUEST, "display_text": 3})[:120]
            + " is not one",
        ),
        (
            {
                "hitl_tool_call_ids": [],
                "action_requests": [],
                "review_configs": {"t": {"allowed_decisions": "approve"}},
            },
            "An approval's review_configs {'t': {'allowed_decisions': 'approve'}} "
            "are not tool configs",
        ),
        (
            {"hitl_tool_call_ids": [], "action_requests": [], "review_configs": {"t": None}},
            "An approval's review_configs {'t': None} are not tool configs",
        ),
        (
            {"hitl_tool_call_ids": ["c2"], "action_requests": [_REQUEST]},
            "The interrupt's tool call ids ['c2'] are not its action requests'",
        ),
        (
            {"hitl_tool_call_ids": "c1", "action_requests": [_REQUEST]},
            "The interrupt's tool call ids 'c1' are not its action requests'",
        ),
    ],
)
def test_interrupt_data_that_is_no_approval_is_refused_by_name(data: Any, message: str) -> None:
    with pytest.raises(DecisionError) as info:
        Approval.of(data)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"type": "maybe"},
            "Decision at index 3 has type 'maybe'; use one of ['approve', 'edit', 'reject']",
        ),
        (
            {"type": "edit", "arguments": ["path"]},
            "Edit decision at index 3 needs 'arguments': a map of the new arguments",
        ),
        ({"type": "approve", "digest": 7}, "Decision at index 3 has a digest that is not text"),
        (
            {"type": "approve", "tool_call_id": 7},
            "Decision at index 3 has a tool_call_id that is not text",
        ),
    ],
)
def test_a_decision_read_from_its_wire_form_is_checked(given: Any, message: str) -> None:
    with pytest.raises(DecisionError) as info:
        Decision.of(given, 3)
    assert str(info.value) == message


def test_an_approval_round_trips_through_its_wire_form() -> None:
    calls = [
        ToolCall("c1", "write_file", {"path": "a"}),
        ToolCall("c2", "delete", {"path": "b"}),
    ]
    configs = {
        "write_file": {"allowed_decisions": ["approve", "edit", "reject"]},
        "delete": {"allowed_decisions": ["approve", "reject", "shrug"]},
        "unused": {"allowed_decisions": ["approve"]},
    }
    approval = Approval.asking(calls, configs, {"delete": "Delete it"})
    data = approval.to_data()
    assert data == {
        "type": "hitl",
        "action_requests": [
            _REQUEST,
            {
                **_REQUEST,
                "tool_call_id": "c2",
                "tool_name": "delete",
                "arguments": {"path": "b"},
                "display_text": "Delete it",
            },
        ],
        "review_configs": {"write_file": configs["write_file"], "delete": configs["delete"]},
        "hitl_tool_call_ids": ["c1", "c2"],
    }
    assert Approval.of(data) == approval and Approval.of(approval) is approval
    assert Approval.is_approval(data) and not Approval.is_approval({"question": "why?"})
    assert approval.allowed("delete") == ["approve", "reject"]  # an unknown kind is dropped
    assert approval.allowed("other") == []
    first, second = approval.requests
    assert ActionRequest.of(_REQUEST) == first and ActionRequest.of(first) is first
    assert first.edit({"path": "z"}).to_data() == {
        "type": "edit",
        "arguments": {"path": "z"},
        "tool_call_id": "c1",
        "digest": first.digest,
    }
    assert Decision.of({"type": "approve", "arguments": {"x": 1}}).to_data() == {"type": "approve"}
    assert [d.to_data() for d in approval.approve_all()] == [
        {"type": "approve", "tool_call_id": "c1", "digest": first.digest},
        {"type": "approve", "tool_call_id": "c2", "digest": second.digest},
    ]
    assert first.digest == request_digest(_REQUEST) != second.digest
    assert (
        first.digest == "sha256:" + hashlib.sha256(b'["c1","write_file",{"path":"a"}]').hexdigest()
    )


def test_checked_decisions_apply_edits_and_rejections_in_call_order() -> None:
    calls = [
        ToolCall("c1", "write_file", {"path": "a"}),
        ToolCall("c2", "delete", {"path": "b"}),
        ToolCall("c3", "read", {"path": "c"}),  # not gated: no decision
    ]
    configs = {
        "write_file": {"allowed_decisions": ["approve", "edit", "reject"]},
        "delete": {"allowed_decisions": ["approve", "reject"]},
    }
    approval = Approval.asking(calls[:2], configs)
    one, two = approval.requests
    checked = approval.check(
        [{"type": "edit", "arguments": {"path": "z"}}, two.reject()], unbound=True
    )
    assert checked.to_data() == [
        {"type": "edit", "arguments": {"path": "z"}, "tool_call_id": "c1", "digest": one.digest},
        {"type": "reject", "tool_call_id": "c2", "digest": two.digest},
    ]
    decided, rejects = checked.apply(calls)
    assert decided == (ToolCall("c1", "write_file", {"path": "z"}), calls[1], calls[2])
    assert rejects == ("c2",)
    assert rejected(calls[1]).content == "Tool call 'delete' was rejected by a human reviewer."
    # the gate that takes the answer narrows what the saved interrupt allows
    with pytest.raises(DecisionError) as info:
        approval.check([one.edit({"path": "y"}), two.approve()], allowed={})
    assert str(info.value) == (
        "Decision type 'edit' not allowed for tool 'write_file'. Allowed: ['approve', 'reject']"
    )
    with pytest.raises(DecisionError) as info:
        approval.check([two.approve(), one.approve()])
    assert str(info.value) == (
        "Decision at index 0 names tool call 'c2', but action request 0 is 'c1'; "
        "decisions go in action-request order"
    )
    with pytest.raises(DecisionError) as info:
        approval.check("approve")
    assert str(info.value) == "Decisions must be a list, got: str"


def test_the_answer_is_taken_out_of_the_chain_and_nothing_else() -> None:
    from agentfsm import LLMChain
    from agentfsm.providers import ScriptedModel as Scripted

    chain = LLMChain(llm=Scripted([]), custom_context={"answer": [1], "decided": {"c1": "approve"}})
    assert dict(without_answer(chain).custom_context) == {"decided": {"c1": "approve"}}


@pytest.mark.parametrize(
    ("answer", "result", "updates"),
    [
        (
            ToolOutput("no idea", is_error=True, state_updates={"mood": "unsure"}),
            ("ask", "no idea", True, {"mood": "unsure"}),
            {"mood": "unsure"},
        ),
        ("blue", ("ask", "blue", False, None), {}),
    ],
)
async def test_a_tools_own_interrupt_answered_becomes_its_result(
    answer: Any, result: tuple[Any, ...], updates: dict[str, Any]
) -> None:
    """The answer replaces the waiting result of the tool that asked: its name stays, the
    answer's text, error flag and state updates become the result's."""

    @tool
    def ask(question: str) -> ToolOutput:
        """Ask the user."""
        return ToolOutput("asked", interrupt={"question": question})

    a = Agent(ScriptedModel([call_tool("ask", question="why?"), say("thanks")]), [ask])
    run = a.start(AgentState.of("go"))
    await run.run()
    assert_path(run, "expanding calling interrupt_check executing propagating interrupted")
    resumed = await a.start_resume(run.agent_state, answer)
    await resumed.run()
    assert_path(resumed, f"propagating until_check deciding {LOOP} ok")
    state = resumed.agent_state
    (message,) = [m for m in state.messages if m.role == "tool"]
    got = [(r.name, r.content, r.is_error, r.state_updates) for r in message.tool_results]
    assert (state.status, got, dict(state.state)) == ("ok", [result], updates)
