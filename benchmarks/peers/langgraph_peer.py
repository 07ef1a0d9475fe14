"""LangGraph: the prebuilt ReAct agent with a counter chat model.

The fake model is a ``BaseChatModel`` subclass (LangChain's model extension point) whose
``_agenerate`` answers from a counter; ``bind_tools`` returns the model itself, since the answer
never depends on the tool schemas. The tool is a ``@tool`` coroutine returning ``ok``.
"""

from __future__ import annotations

import warnings
from importlib.metadata import version as _dist_version
from typing import Any

from benchmarks.workload import FINAL_TEXT, PROMPT, TOOL_NAME, TOOL_RESULT, Stamps

NAME = "langgraph"


def version() -> str:
    return (
        f"langgraph {_dist_version('langgraph')}, langchain-core {_dist_version('langchain-core')}"
    )


def _build(n: int, stamps: Stamps) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    class CounterChatModel(BaseChatModel):
        turns: int

        @property
        def _llm_type(self) -> str:
            return "counter"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], *a: Any, **kw: Any) -> ChatResult:
            raise NotImplementedError("the benchmark only runs the async path")

        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **kw: Any) -> ChatResult:
            k = stamps.mark()
            if k < self.turns:
                call = {"name": TOOL_NAME, "args": {}, "id": f"toolu_{k:06d}", "type": "tool_call"}
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content=FINAL_TEXT)
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool(TOOL_NAME)
    async def noop() -> str:
        """Does nothing and says ok."""
        return TOOL_RESULT

    with warnings.catch_warnings():
        # Deprecated in favour of langchain.agents.create_agent, which builds the same graph
        # on top of LangGraph plus middleware; the prebuilt agent is LangGraph's own loop.
        warnings.simplefilter("ignore")
        return create_react_agent(CounterChatModel(turns=n), [noop])


async def run(n: int, stamps: Stamps) -> None:
    agent = _build(n, stamps)
    result = await agent.ainvoke(
        {"messages": [("user", PROMPT)]}, config={"recursion_limit": 2 * n + 10}
    )
    assert result["messages"][-1].content == FINAL_TEXT
    assert len(stamps.calls) == n
