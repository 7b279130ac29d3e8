"""Reading Claimline's settings from the environment.

Every reader fails with ``ImproperlyConfigured`` naming the variable, so a typo
stops start-up instead of surfacing later as odd behaviour.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ImproperlyConfigured(f"{name} must be 'true' or 'false', got {raw!r}")


def env_int(
    name: str, default: int, minimum: int = 0, environ: Mapping[str, str] = os.environ
) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(
    name: str, default: float, minimum: float = 0.0, environ: Mapping[str, str] = os.environ
) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_base_url(name: str, environ: Mapping[str, str] = os.environ, *, fallback: str | None = None) -> str:
    """The dashboard's public URL (``https://claimline.example.com``, or under a path prefix), without a
    trailing slash; empty when unset. Every link leaving the dashboard (e-mails, notices, alert
    annotations through /metrics) is this plus the page's path, so it must be absolute: a scheme
    (http or https) and a host, no query or fragment. ``fallback`` names an older variable read when
    ``name`` is unset."""
    raw = (environ.get(name) or "").strip()
    if not raw and fallback:
        name, raw = fallback, (environ.get(fallback) or "").strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ImproperlyConfigured(
            f"{name} must be an absolute http(s) URL such as https://claimline.example.com, got {raw!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must not carry a query or a fragment, got {raw!r}")
    return raw.rstrip("/")


def secret_key(environ: Mapping[str, str], debug: bool, key_file: Path) -> str:
    """``DJANGO_SECRET_KEY``, or for a first local run a key kept in ``key_file``."""
    key = environ.get("DJANGO_SECRET_KEY", "")
    if key:
        if not debug and len(key) < 50:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 50 characters when DJANGO_DEBUG=false")
        return key
    if environ.get("CLAIMLINE_REQUIRE_SECRET_KEY", "") == "true":
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is not set")
    # An embedded first run has no secret to share with other processes, so a
    # generated key persisted beside the database keeps sessions valid across restarts.
    if key_file.exists():
        return key_file.read_text().strip()
    from django.core.management.utils import get_random_secret_key

    key_file.parent.mkdir(parents=True, exist_ok=True)
    key = get_random_secret_key() + get_random_secret_key()
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key
