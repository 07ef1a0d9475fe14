"""pydantic-ai: an ``Agent`` on a ``FunctionModel`` that answers from a counter.

``FunctionModel`` is pydantic-ai's own extension point for a model written as a function; the
function never looks at the messages it is given. Instrumentation stays off (the default) and
the request limit is lifted so the run can reach its final turn.
"""

from __future__ import annotations

from importlib.metadata import version as _dist_version
from typing import Any

from benchmarks.workload import FINAL_TEXT, PROMPT, TOOL_NAME, TOOL_RESULT, Stamps

NAME = "pydantic-ai"


def version() -> str:
    return f"pydantic-ai-slim {_dist_version('pydantic-ai-slim')}"


async def run(n: int, stamps: Stamps) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        k = stamps.mark()
        if k < n:
            return ModelResponse(
                parts=[ToolCallPart(tool_name=TOOL_NAME, args={}, tool_call_id=f"toolu_{k:06d}")]
            )
        return ModelResponse(parts=[TextPart(content=FINAL_TEXT)])

    agent: Any = Agent(FunctionModel(answer, model_name="counter"))

    @agent.tool_plain(name=TOOL_NAME)  # type: ignore[untyped-decorator]
    async def noop() -> str:
        """Does nothing and says ok."""
        return TOOL_RESULT

    result = await agent.run(PROMPT, usage_limits=UsageLimits(request_limit=None))
    assert result.output == FINAL_TEXT
    assert len(stamps.calls) == n
