"""The default model client: one ``CallModel`` effect in, reducer events out.

:class:`AnthropicModelClient` turns a ``CallModel`` into one Messages API request through
``anthropic.AsyncAnthropic`` (SDK retries off: retrying is the machine's decision) and reports what
happened as events for that ``call_id``:

- one :class:`~steploop.reducer.events.ModelBlockReceived` per *completed* content block, in stream order
  (blocks that arrive whole in ``message_start`` included), every type: text with its citations,
  thinking and tool_use modelled, anything else kept whole as an
  :class:`~steploop.reducer.messages.OpaqueBlock` and sent back byte-equal (specs/ R-BLOCK-1, R-BLOCK-2);
- then :class:`~steploop.reducer.events.ModelResponseEnded` (served model, stop reason, usage,
  stop_details);
- or, on any failure, exactly one :class:`~steploop.reducer.events.ModelCallFailed` as the last event.

It reads the SDK's raw stream events (``messages.create(stream=True)``), not ``messages.stream``:
that is cheaper per event and keeps the SDK's lenient partial-JSON parse of tool input out of the
way. Tool input is parsed strictly, once, from the concatenated ``input_json_delta`` text; text
that does not parse (typically cut off by max_tokens) is reported as ``input={}`` with
``input_complete=False`` so the machine never runs it.

A non-streaming call reads the response body as JSON, not through the SDK's types (they know only
some block types). Per call the client converts only the conversation records appended since its
previous request
(the same bytes :func:`build_request` gives), and after ``message_stop`` it reads the end of the
response body (briefly) so the SDK can reuse the connection for the next call.

Failure classification (``kind`` is one of :data:`steploop.reducer.events.FAILURE_KINDS`):

=====================================================  ===================
what happened                                          kind
=====================================================  ===================
4xx whose message says "prompt is too long"            prompt_too_long
400 "input length and `max_tokens` exceed context      context_overflow
limit: A + B > C" (A and C are reported too)
413, "request too large", 400 naming image/PDF/media   media
429                                                    rate_limited
529, or error type overloaded_error                    overloaded
401 / 403                                              auth
other 5xx, or error type api_error                     server_error
other 4xx                                              invalid_request
refused / reset before any stream event                connection
dropped mid-stream, stalled past the read timeout,     stream_broken
ended without message_stop, malformed stream data
``event: error`` inside a 200 stream                   by its error.type
anything else                                          unknown
=====================================================  ===================

``retry_after_ms`` comes from a ``retry-after-ms`` header, else ``retry-after`` (seconds).
The API's ids of a response that ended (its message id and the ``request-id`` header), which no
event carries, are kept for the transcript's ``message.id`` and ``requestId``:
:meth:`AnthropicModelClient.api_ids`.
Cancellation is never caught: it propagates out of :meth:`AnthropicModelClient.stream`.

The package, one job per module: :mod:`~steploop.effects.model.request` (the request, pure),
:mod:`~steploop.effects.model.errors` (failure classification, pure),
:mod:`~steploop.effects.model.stream` (stream events folded into reducer events, pure) and
:mod:`~steploop.effects.model.client` (the client, the only one that does I/O).
"""

from steploop.effects.model.client import AnthropicModelClient, make_client
from steploop.effects.model.errors import classify_error, classify_exception, parse_context_overflow
from steploop.effects.model.request import (
    EPHEMERAL,
    TASK_BUDGET_BETA,
    Thinking,
    ThinkingMismatch,
    build_request,
    request_thinking,
    to_api_messages,
)
from steploop.effects.model.stream import TraitsFor, block_from_api, parse_tool_input

__all__ = [
    "EPHEMERAL",
    "TASK_BUDGET_BETA",
    "AnthropicModelClient",
    "Thinking",
    "ThinkingMismatch",
    "TraitsFor",
    "block_from_api",
    "build_request",
    "classify_error",
    "classify_exception",
    "make_client",
    "parse_context_overflow",
    "parse_tool_input",
    "request_thinking",
    "to_api_messages",
]
