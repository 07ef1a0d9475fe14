"""The client: :class:`AnthropicModelClient` on ``anthropic.AsyncAnthropic``, and
:func:`make_client`."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

import anthropic
import anyio
import httpx2

from steploop.effects.model.errors import classify_error, classify_exception, parse_context_overflow
from steploop.effects.model.request import (
    MessageFold,
    Thinking,
    ThinkingMismatch,
    appended,
    assemble,
    prefix,
    request_thinking,
    to_api_messages,
    with_breakpoint,
)
from steploop.effects.model.stream import (
    USAGE_KEYS,
    Assembler,
    TraitsFor,
    api_id,
    block_from_api,
    compact_json,
    decode_event,
    str_field,
)
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import (
    Event,
    ModelCallFailed,
    ModelResponseEnded,
)
from steploop.reducer.messages import (
    Usage,
)


def make_client(
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` set up for steploop: SDK retries off, explicit timeouts.

    Args:
        base_url: the API root (None: the SDK default or ``ANTHROPIC_BASE_URL``).
        api_key: the key (None: ``ANTHROPIC_API_KEY``).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds without a byte before a read fails (also write and pool).

    Returns:
        The client; close it with ``await client.close()``.
    """
    return anthropic.AsyncAnthropic(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
    )


_KEPT_IDS = 16
"""How many calls' API ids :class:`AnthropicModelClient` keeps for :meth:`~AnthropicModelClient.api_ids`."""


def _zero_clock() -> int:
    return 0


# ---------------------------------------------------------------------------------------------
# The client


class AnthropicModelClient:
    """The default model client (``steploop.effects.run.ModelClient``), on ``anthropic.AsyncAnthropic``.

    Args:
        client: the SDK client, made with ``max_retries=0`` (see :func:`make_client`). Not
            closed by this class.
        system: the system prompt ("" for none).
        tools: tool definitions ``{"name", "description", "input_schema"}``, in a fixed order.
        traits_for: the traits of a tool call, from its name and parsed input.
        thinking: ``"adaptive"``, or None: a call's thinking is then its budget, the loop
            config's ``thinking_budget`` (R-THINK-1; a budget given here is refused, so that
            the machine's output caps and the request never disagree). Adaptive thinking is
            for a loop without a budget: a call with one is refused (``invalid_request``).
        idle_timeout: seconds without a byte before a streaming call counts as stalled
            (None: the client's read timeout).
        nonstreaming_timeout: read timeout for ``streaming=False`` calls, which send nothing
            until the whole answer is ready (None: the client's).
        on_text_delta: called with ``(block index, text)`` for every raw text delta, for live
            display; it runs inline, so keep it quick. Its exceptions propagate.
        clock: milliseconds for the events' ``at_ms`` (None: 0, stamped by the interpreter).
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        system: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        traits_for: TraitsFor,
        thinking: Literal["adaptive"] | None = None,
        idle_timeout: float | None = None,
        nonstreaming_timeout: float | None = None,
        on_text_delta: Callable[[int, str], None] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if thinking is not None and thinking != "adaptive":
            raise ValueError(
                f"AnthropicModelClient(thinking={thinking!r}): a thinking budget is the loop's "
                "setting, LoopConfig.thinking_budget (--set thinking_budget=N), which every "
                "CallModel carries to the client, so that the machine's output caps leave room "
                "for it (R-THINK-1, R-OVERFLOW-1); the client takes only thinking='adaptive'"
            )
        self._client = client
        self._traits_for = traits_for
        self._thinking: Thinking = thinking
        self.on_text_delta = on_text_delta  # public: the interpreter sets it for text_deltas=True
        self._clock = clock if clock is not None else _zero_clock
        # The prefix changes only with the tool list (set_tools): built once, the same bytes.
        self._system = system
        self._system_param, self._tools_param = prefix(system, tools)
        self._stream_timeout = self._timeout(idle_timeout)
        self._complete_timeout = self._timeout(nonstreaming_timeout)
        # The messages of the latest request, as a fold that the next request carries on
        # when its conversation extends this one (the usual case: a round appends records).
        self._fold = MessageFold(False)
        self._fold_at = Conversation.empty()
        self._api_ids: dict[int, tuple[str | None, str | None]] = {}  # the latest, by call

    def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """Offer these tool definitions from the next call on (the run calls it when its tool
        list changed: MCP servers connected or refreshed, specs/ R-REFRESH-1)."""
        self._system_param, self._tools_param = prefix(self._system, tools)

    def api_ids(self, call_id: int) -> tuple[str | None, str | None]:
        """The API's message id (``msg_...``) and request id (the ``request-id`` header,
        ``req_...``) of call ``call_id``'s response, taken once; None for what the API did not
        give (or a response that has not started). Known from the response's ``message_start``
        on, as Claude Code knows them when it writes a block's record before the response
        ends. The transcript writes them as ``message.id`` and ``requestId``; the ids of the
        last few calls are kept."""
        return self._api_ids.pop(call_id, (None, None))

    def _keep_ids(self, call_id: int, message_id: str | None, headers: object) -> None:
        get = getattr(headers, "get", None)
        request_id = api_id(get("request-id")) if callable(get) else None
        ids = self._api_ids
        ids[call_id] = (message_id, request_id)
        if len(ids) > _KEPT_IDS:  # nobody takes them (no transcript): keep the newest
            del ids[next(iter(ids))]

    def _timeout(self, read: float | None) -> httpx2.Timeout | None:
        if read is None:
            return None
        base = self._client.timeout
        connect = base.connect if isinstance(base, httpx2.Timeout) else base
        return httpx2.Timeout(read, connect=connect)

    def build_request(self, effect: CallModel) -> dict[str, Any]:
        """The ``messages.create`` keyword arguments for ``effect`` (see :func:`build_request`).

        Fresh dicts; :meth:`stream` sends the same request, built incrementally.

        Raises:
            ThinkingMismatch: the client is adaptive and the call has a budget (R-THINK-1).
        """
        thinking = request_thinking(effect, self._thinking)
        messages = to_api_messages(
            effect.conversation.messages(), keep_thinking=thinking is not None
        )
        return assemble(
            effect,
            self._system_param,
            self._tools_param,
            thinking,
            with_breakpoint(messages),
        )

    def _request(self, effect: CallModel) -> dict[str, Any]:
        """:meth:`build_request`, converting only the records appended since the last request.

        The messages of earlier requests are shared with the fold (the SDK copies what it
        sends), so the result is for sending, not for changing.
        """
        thinking = request_thinking(effect, self._thinking)
        keep = thinking is not None
        conversation = effect.conversation
        new = appended(conversation, self._fold_at) if self._fold.keep_thinking == keep else None
        if new is None:
            self._fold = MessageFold(keep)
            new = list(conversation.messages())
        fold = self._fold
        for m in new:
            fold.add(m)
        self._fold_at = conversation
        messages = with_breakpoint(fold.messages())
        return assemble(effect, self._system_param, self._tools_param, thinking, messages)

    def _failed(self, call_id: int, exc: Exception, *, started: bool) -> ModelCallFailed:
        kind, message, status, retry_after_ms = classify_exception(exc, started=started)
        numbers = parse_context_overflow(message) if kind == "context_overflow" else None
        return ModelCallFailed(
            call_id=call_id,
            kind=kind,
            message=message,
            status=status,
            retry_after_ms=retry_after_ms,
            input_tokens=None if numbers is None else numbers[0],
            context_limit=None if numbers is None else numbers[2],
            at_ms=self._clock(),
        )

    async def stream(self, effect: CallModel) -> AsyncGenerator[Event, None]:
        """Run the model call and yield its events.

        An async generator: it opens no task group or cancel scope around a ``yield``, so
        it is safe to iterate from any task (PEP 789). Iterate it to the end, or close it with
        ``contextlib.aclosing``; closing early releases the HTTP connection.

        Args:
            effect: the call; ``effect.streaming`` False sends a non-streaming request.

        Yields:
            ``ModelBlockReceived`` per completed block, then ``ModelResponseEnded``; or
            ``ModelCallFailed`` as the last event. SDK and transport errors never escape.

        Raises:
            Cancellation of the calling task (never turned into an event), and whatever
            ``traits_for`` or ``on_text_delta`` raise.
        """
        try:
            request = self._request(effect)
        except ThinkingMismatch as exc:  # two thinking settings: nothing is sent [R-THINK-1]
            yield ModelCallFailed(
                call_id=effect.call_id,
                kind="invalid_request",
                message=str(exc),
                at_ms=self._clock(),
            )
            return
        if not effect.streaming:
            # Everything arrives at once: no nested generator to leave suspended.
            for complete_event in await self._complete(effect, request):
                yield complete_event
            return

        timeout = self._stream_timeout if self._stream_timeout is not None else anthropic.NOT_GIVEN
        call_id = effect.call_id
        assembler = Assembler(
            call_id, effect.model, self._traits_for, self.on_text_delta, self._clock
        )
        try:
            raw = await self._client.messages.create(**request, stream=True, timeout=timeout)
        except Exception as exc:  # cancellation is a BaseException: it propagates
            yield self._failed(call_id, exc, started=False)
            return

        # The SDK's own iterator is not used: it raises on an error event from inside nested
        # generators it then leaves suspended (trio warns when they are collected). Reading the
        # decoded server-sent events keeps every generator in a chain we finish ourselves.
        response = raw.response
        sse_events = anthropic.AsyncStream.raw_events(response)
        failure: ModelCallFailed | None = None
        try:
            while not assembler.stopped:
                try:
                    sse = await anext(sse_events)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = self._failed(call_id, exc, started=assembler.started)
                    break
                name, payload, problem = decode_event(sse.event, sse.data)
                if problem is not None:
                    failure = self._broken(call_id, problem)
                    break
                if name == "error":
                    failure = self._error_event(call_id, payload)
                    break
                block_event = assembler.feed(name, payload)
                if name == "message_start":  # the ids are known from here (TR-2)
                    self._keep_ids(call_id, assembler.message_id, response.headers)
                if block_event is not None:
                    yield block_event
                elif assembler.ready:  # message_start held complete blocks [defect: none lost]
                    ready, assembler.ready = assembler.ready, []
                    for ready_event in ready:
                        yield ready_event
        finally:
            await _dispose(response, sse_events, complete=assembler.stopped and failure is None)

        if failure is not None:
            yield failure
        elif not assembler.stopped:
            yield self._broken(call_id, "the stream ended without message_stop")
        else:
            self._keep_ids(call_id, assembler.message_id, response.headers)
            yield assembler.ended()

    def _broken(self, call_id: int, message: str) -> ModelCallFailed:
        return ModelCallFailed(
            call_id=call_id, kind="stream_broken", message=message, at_ms=self._clock()
        )

    def _error_event(self, call_id: int, payload: dict[str, Any]) -> ModelCallFailed:
        error = payload.get("error")
        error = error if isinstance(error, dict) else {}
        error_type = error.get("type")
        message = str_field(error, "message") or json.dumps(payload)
        kind = classify_error(None, error_type if isinstance(error_type, str) else None, message)
        return ModelCallFailed(call_id=call_id, kind=kind, message=message, at_ms=self._clock())

    async def _complete(self, effect: CallModel, request: dict[str, Any]) -> list[Event]:
        """The events of a non-streaming call.

        The body is read as JSON, not through the SDK's types: those know only some block
        types and turn the others into blocks with missing fields. Every block is reported
        (:func:`block_from_api`); a body that is not a message is ``stream_broken``.
        """
        timeout = (
            self._complete_timeout if self._complete_timeout is not None else anthropic.NOT_GIVEN
        )
        call_id = effect.call_id
        try:
            raw = await self._client.messages.with_raw_response.create(**request, timeout=timeout)
            data = await raw.read()
        except Exception as exc:  # cancellation is a BaseException: it propagates
            return [self._failed(call_id, exc, started=False)]
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:  # not JSON (a proxy's page, a cut body)
            return [self._broken(call_id, f"malformed message body: {exc}")]
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, list):
            return [self._broken(call_id, "malformed message body: no content list")]
        stop_reason = body.get("stop_reason")
        stop_reason = stop_reason if isinstance(stop_reason, str) else None
        model = body.get("model")
        served = model if isinstance(model, str) and model else None
        events: list[Event] = []
        last = len(content) - 1
        traits_for = self._traits_for
        for index, block in enumerate(content):
            # Without the raw JSON text a cut-off tool input cannot be told from a complete
            # one: a tool_use that ends a max_tokens response is treated as cut off.
            cut = stop_reason == "max_tokens" and index == last
            at = self._clock()
            events.append(block_from_api(block, call_id, traits_for, at, cut=cut, model=served))
        usage = body.get("usage")
        counts = {k: 0 for k in USAGE_KEYS}
        if isinstance(usage, dict):
            for key in USAGE_KEYS:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    counts[key] = value
        details = body.get("stop_details")
        self._keep_ids(call_id, api_id(body.get("id")), raw.headers)
        events.append(
            ModelResponseEnded(
                call_id=call_id,
                model=served or effect.model,
                stop_reason=stop_reason,
                usage=Usage(**counts),
                stop_details=None if details is None else compact_json(details),
                at_ms=self._clock(),
            )
        )
        return events


_BODY_END_S = 0.25
"""How long a complete message's response waits for the rest of its body (seconds)."""


async def _dispose(
    response: httpx2.Response, events: AsyncIterator[object], *, complete: bool = False
) -> None:
    """Finish the response: read the rest of a complete message's body, close, drain.

    After ``message_stop`` only the end of the chunked body is left. Reading it lets the SDK
    put the connection back in its pool (keep-alive: the next call needs no new connection
    or TLS handshake); a response closed before it takes its connection with it. That read
    waits at most :data:`_BODY_END_S`. Then the response is closed and the event iterator
    run to its end: after a close it yields what was already buffered and then fails on the
    closed connection; that failure finishes every generator in the chain, so none is left
    suspended for the garbage collector (which trio would report).
    """
    with anyio.CancelScope(shield=True):
        if complete:
            with anyio.move_on_after(_BODY_END_S):
                while True:
                    try:
                        await anext(events)
                    except Exception:  # StopAsyncIteration: the body ended
                        break
        await response.aclose()
        while True:
            try:
                await anext(events)
            except Exception:  # StopAsyncIteration included
                return
