"""Request fingerprints: what an effect that waits for the world asks for, without its ids
(specs/trace-format.md section 7, "Counterfactual"), and a short description of it.

Counterfactual replay matches each request of the new run to a recorded one by kind, per-kind
ordinal and this fingerprint. Linear in the trace: the fingerprint of a model call's
conversation is chained per conversation node (:class:`Fingerprints`), so each message is
encoded once, never the whole history per call.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict

import attrs

from steploop.reducer.canonical import canonical_bytes
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    RefreshTools,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.messages import Message

__all__ = ["Fingerprints", "describe_request", "fingerprint", "message_content"]

_EMPTY_FP = b"\x00" * 16


_CONTENT: dict[type, tuple[bytes, tuple[str, ...]]] = {}


def message_content(m: Message) -> bytes:
    """A message's content: its kind and every field but ``id`` and ``response_id``, each as
    its canonical text (NUL-separated; a canonical text holds no NUL). Blocks are shared
    between the answers the recording holds and the messages the new run builds from them, and
    their canonical texts are memoised (steploop/reducer/canonical.py), so this costs little."""
    cls = m.__class__
    layout = _CONTENT.get(cls)
    if layout is None:
        names = tuple(
            sorted(f.name for f in attrs.fields(cls) if f.name not in ("id", "response_id"))
        )
        layout = _CONTENT[cls] = (str(getattr(cls, "TAG", cls.__name__)).encode(), names)
    tag, names = layout
    return b"\x00".join([tag, *[canonical_bytes(getattr(m, n)) for n in names]])


class Fingerprints:
    """:func:`fingerprint` at the cost of what is new.

    A model call's fingerprint covers its conversation's messages without their ids. The
    fingerprint of a conversation is chained: that of its previous node and the content digest
    of its last message. The fingerprints of the most recent nodes are remembered (each call's
    conversation extends an earlier call's, so the walk back stops at a remembered node after
    the messages added since), and so are the content digests of recent messages (a rebuilt
    conversation shares them). Both memos are bounded, and hold a reference to what they
    remember, so no identity is recycled while remembered.
    """

    NODES = 512
    MESSAGES = 4096

    def __init__(self) -> None:
        # oldest first; OrderedDict evicts in O(1) (a dict's first key is found by a scan
        # over the slots its deletions left at the front)
        self._nodes: OrderedDict[int, tuple[Conversation, bytes]] = OrderedDict()
        self._messages: OrderedDict[int, tuple[Message, bytes]] = OrderedDict()
        self._calls: dict[tuple[str, bool], bytes] = {}

    def _call_text(self, model: str, streaming: bool) -> bytes:
        got = self._calls.get((model, streaming))
        if got is None:
            got = self._calls[(model, streaming)] = canonical_bytes(
                ["call_model", model, streaming]
            )
        return got

    def message(self, m: Message) -> bytes:
        memo = self._messages
        got = memo.get(id(m))
        if got is not None and got[0] is m:
            return got[1]
        d = hashlib.blake2b(message_content(m), digest_size=16).digest()
        if len(memo) >= self.MESSAGES:
            memo.popitem(last=False)
        memo[id(m)] = (m, d)
        return d

    def conversation(self, conv: Conversation) -> bytes:
        nodes = self._nodes
        todo: list[Conversation] = []
        node: Conversation | None = conv
        fp = _EMPTY_FP
        while node is not None and node.last is not None:
            got = nodes.get(id(node))
            if got is not None and got[0] is node:
                fp = got[1]
                break
            todo.append(node)
            node = node.prev
        else:
            if node is not None and node.length:
                raise ValueError("a hollow conversation (read from a trace) has no messages")
        for n in reversed(todo):
            assert n.last is not None
            fp = hashlib.blake2b(fp + self.message(n.last), digest_size=16).digest()
        if todo:
            if len(nodes) >= self.NODES:
                nodes.popitem(last=False)
            nodes[id(conv)] = (conv, fp)
        return fp

    def __call__(self, effect: Effect) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        match effect:
            case CallModel():
                h.update(self._call_text(effect.model, effect.streaming))
                h.update(self.conversation(effect.conversation))
            case StartTool() | AskPermission():
                h.update(canonical_bytes([effect.TAG, effect.name, effect.input]))
            case Compact():
                h.update(canonical_bytes(["compact", effect.trigger]))
            case RunStopHooks():
                h.update(canonical_bytes(["run_stop_hooks", effect.stop_hook_active]))
            case Wait():
                h.update(canonical_bytes(["wait", effect.ms]))
            case SummarizeToolUse():
                h.update(canonical_bytes(["summarize_tool_use", list(effect.tool_use_ids)]))
            case RefreshTools():
                h.update(canonical_bytes(["refresh_tools"]))
            case _:
                raise ValueError(f"{type(effect).__name__} makes no request")
        return h.digest()


def fingerprint(effect: Effect) -> bytes:
    """The request an effect makes, without ids (specs/trace-format.md, "Counterfactual").
    For many effects of one run, call one :class:`Fingerprints` (it remembers)."""
    return Fingerprints()(effect)


def describe_request(effect: Effect) -> str:
    """A short human description of an effect that waits for the world."""
    match effect:
        case CallModel():
            mode = "streaming" if effect.streaming else "non-streaming"
            return (
                f"call_model ({effect.model}, max_tokens {effect.max_tokens}, {mode}, "
                f"{effect.conversation.length} messages)"
            )
        case StartTool() | AskPermission():
            args = json.dumps(effect.input, ensure_ascii=False)
            args = args if len(args) <= 80 else args[:79] + "…"
            return f"{effect.TAG} {effect.name} {args}"
        case Compact():
            return f"compact ({effect.trigger}, {effect.pre_tokens} tokens)"
        case RunStopHooks():
            return f"run_stop_hooks (stop_hook_active={str(effect.stop_hook_active).lower()})"
        case Wait():
            return f"wait {effect.ms} ms"
        case SummarizeToolUse():
            return f"summarize_tool_use {list(effect.tool_use_ids)}"
        case RefreshTools():
            return "refresh_tools"
    return type(effect).__name__
