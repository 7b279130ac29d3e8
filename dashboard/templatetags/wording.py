"""Filters that say codes, evidence and times in words (``dashboard.wording``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dashboard import wording

register = template.Library()


@register.filter
def seconds(value: Any) -> Any:
    """A timestamp, or a text holding timestamps, without fractions of a second."""
    return wording.to_the_second(value)


@register.filter
def label(code: Any) -> str:
    """The human label of a vocabulary code ("" when it has none)."""
    return wording.code_label(code)


@register.filter
def coded(code: Any) -> SafeString:
    """``<code>devices-in-use</code> <span class="code-label">the matching devices are held by other claims</span>``:
    the code kept (it is what the API, the CLI and alerts say), its meaning beside it."""
    meaning = wording.code_label(code)
    if not meaning:
        return format_html("<code>{}</code>", code)
    return format_html('<code>{}</code> <span class="code-label">{}</span>', code, meaning)


@register.filter
def evidence(entry: Mapping[str, Any], namespace: str = "") -> SafeString:
    """One evidence entry as a sentence, with what it is in front."""
    what, said = wording.describe_evidence(entry, namespace or "")
    return format_html('<span class="ev-key">{}</span> <span class="ev-val">{}</span>', what, said)
