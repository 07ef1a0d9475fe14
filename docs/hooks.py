"""MkDocs hook: the docstrings cite names Sphinx-style (:func:`start`); show them as code."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    """Drop the role prefix before a ``<code>`` span (the name stays, as code)."""
    return _ROLE.sub("", html)
