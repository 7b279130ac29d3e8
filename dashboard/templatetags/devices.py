"""``{% device_link %}``: a device's name linked to its page, wherever a page names a device; ``duration_words``."""

from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString

from domain.verdicts.estimates import duration

register = template.Library()


@register.simple_tag
def device_link(cluster: str, driver: str, pool: str, device: str, label: str | None = None) -> SafeString:
    """``<a href="…/devices/DRIVER/POOL/DEVICE/">label</a>`` (label: the device's name).

    A pool may hold slashes (``node-1/gpus``); the URL takes them whole. A driver or device name no
    URL can hold (not a legal name, but collected data is not checked) leaves the label unlinked
    rather than failing the page.
    """
    shown = device if label is None else label
    try:
        url = reverse("device", args=[cluster, driver, pool, device])
    except NoReverseMatch:
        return conditional_escape(shown)
    return format_html('<a href="{}">{}</a>', url, shown)


@register.filter
def duration_words(seconds: float | None) -> str:
    """Seconds as the estimate's sentences write them (``50 min``, ``2h10m``); ``—`` for none."""
    return "—" if seconds is None else duration(seconds)
