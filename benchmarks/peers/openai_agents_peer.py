"""The OpenAI Agents SDK: ``Runner.run`` on an ``Agent`` whose model is a counter.

The fake model subclasses ``agents.models.interface.Model`` (the SDK's model extension point)
and builds Responses-API output items from a counter, never reading ``input``. Tracing is off
globally and in the run config, so no trace processor runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib.metadata import version as _dist_version
from typing import Any

from benchmarks.workload import FINAL_TEXT, PROMPT, TOOL_NAME, TOOL_RESULT, Stamps

NAME = "openai-agents"


def version() -> str:
    return f"openai-agents {_dist_version('openai-agents')}"


def _model(n: int, stamps: Stamps) -> Any:
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class CounterModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            k = stamps.mark()
            item: Any
            if k < n:
                item = ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{k:06d}",
                    call_id=f"toolu_{k:06d}",
                    name=TOOL_NAME,
                    arguments="{}",
                    status="completed",
                )
            else:
                text = ResponseOutputText(type="output_text", text=FINAL_TEXT, annotations=[])
                item = ResponseOutputMessage(
                    type="message",
                    id=f"msg_{k:06d}",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the benchmark uses Runner.run, not streaming")

    return CounterModel()


async def run(n: int, stamps: Stamps) -> None:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool(name_override=TOOL_NAME)
    async def noop() -> str:
        """Does nothing and says ok."""
        return TOOL_RESULT

    agent: Any = Agent(name="bench", instructions="", model=_model(n, stamps), tools=[noop])
    result = await Runner.run(
        agent, PROMPT, max_turns=n + 5, run_config=RunConfig(tracing_disabled=True)
    )
    assert result.final_output == FINAL_TEXT
    assert len(stamps.calls) == n
