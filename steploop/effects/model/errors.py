"""Classifying a failed model call (pure): status, error type and message to a failure kind
(the table in :mod:`steploop.effects.model`), and the retry-after header."""

from __future__ import annotations

import re
from typing import Final

import anthropic
import httpx2

# ---------------------------------------------------------------------------------------------
# Failure classification (pure)

_MEDIA_RE = re.compile(r"\b(image|images|pdf|document|documents|media)\b")
_OVERFLOW_RE = re.compile(
    r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)"
)


def parse_context_overflow(message: str) -> tuple[int, int, int] | None:
    """The numbers of a 400 "input length and `max_tokens` exceed context limit: A + B > C"
    message: (input tokens A, max_tokens B, context limit C); None for any other message."""
    m = _OVERFLOW_RE.search(message)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def classify_error(status: int | None, error_type: str | None, message: str) -> str:
    """The failure kind of an API error.

    Args:
        status: the HTTP status, or None for an ``event: error`` inside a 200 stream.
        error_type: ``error.type`` from the body (``overloaded_error``, ...), if any.
        message: ``error.message`` (or the SDK's text when there is no body).

    Returns:
        One of :data:`steploop.reducer.events.FAILURE_KINDS`.
    """
    low = message.lower()
    client_side = status is None or 400 <= status < 500
    if client_side and "prompt is too long" in low:
        return "prompt_too_long"
    if status == 400 and _OVERFLOW_RE.search(message):
        return "context_overflow"
    if status == 413 or error_type == "request_too_large" or "request too large" in low:
        return "media"
    if (status == 400 or error_type == "invalid_request_error") and _MEDIA_RE.search(low):
        return "media"
    if status == 429 or error_type == "rate_limit_error":
        return "rate_limited"
    if status == 529 or error_type == "overloaded_error":
        return "overloaded"
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return "auth"
    if status is not None and 500 <= status < 600:
        return "server_error"
    if error_type in ("api_error", "timeout_error"):
        return "server_error"
    if status is not None and 400 <= status < 500:
        return "invalid_request"
    if error_type in ("invalid_request_error", "not_found_error"):
        return "invalid_request"
    return "unknown"


#: The largest retry-after taken (ms): 2**53, the largest integer JSON readers keep exactly.
MAX_RETRY_AFTER_MS: Final = 2**53


def retry_after_ms(headers: httpx2.Headers) -> int | None:
    """The server's retry-after in ms (``retry-after-ms``, else ``retry-after`` in seconds);
    None when neither is a number from 0 to :data:`MAX_RETRY_AFTER_MS` (an HTTP date,
    ``inf``, ``1e400``): the machine's own backoff applies (R-RETRY-1)."""
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            ms = float(value) * scale
        except ValueError:
            continue  # an HTTP date: the machine's own backoff applies
        if 0 <= ms <= MAX_RETRY_AFTER_MS:  # NaN and infinities fail it
            return round(ms)
    return None


def describe_exception(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify_exception(exc: Exception, *, started: bool) -> tuple[str, str, int | None, int | None]:
    """Classify an exception raised by the SDK or the transport.

    Args:
        exc: what was raised.
        started: whether any stream event had arrived before it.

    Returns:
        ``(kind, message, status, retry_after_ms)``. ``status`` is the HTTP status of an error
        response; None for transport failures and for an error event inside a 200 stream.
    """
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or exc.message
        error_type = exc.type if isinstance(exc.type, str) else None
        if exc.status_code == 200:  # an `event: error` inside the stream
            return classify_error(None, error_type, message), message, None, None
        status = exc.status_code
        kind = classify_error(status, error_type, message)
        return kind, message, status, retry_after_ms(exc.response.headers)
    if isinstance(exc, anthropic.APITimeoutError):
        connecting = isinstance(exc.__cause__, (httpx2.ConnectTimeout, httpx2.PoolTimeout))
        return (
            ("connection" if connecting else "stream_broken"),
            describe_exception(exc),
            None,
            None,
        )
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        return "connection", describe_exception(cause if cause is not None else exc), None, None
    if isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)):
        return "connection", describe_exception(exc), None, None
    if isinstance(exc, httpx2.TimeoutException):
        return "stream_broken", describe_exception(exc), None, None
    if isinstance(exc, (httpx2.TransportError, httpx2.HTTPError, httpx2.StreamError)):
        return ("stream_broken" if started else "connection"), describe_exception(exc), None, None
    if started and isinstance(exc, ValueError):
        # Malformed event data (bad JSON, an event the SDK cannot validate).
        return "stream_broken", describe_exception(exc), None, None
    return "unknown", describe_exception(exc), None, None
