"""Walking a paged API list (``limit`` and ``continue``, as the Kubernetes API pages lists) to its end."""

from __future__ import annotations

from typing import Any

from django.test import Client


def every_page(client: Client, url: str, query: dict[str, str], kept: dict[str, str]) -> list[dict[str, Any]]:
    """Every page of ``url`` asked with ``query``, first to last; each next page is asked with ``kept``
    and the previous page's ``continue`` token."""
    pages = []
    while True:
        response = client.get(url, query)
        assert response.status_code == 200, response.content
        pages.append(response.json())
        if not pages[-1]["continue"]:
            return pages
        query = {**kept, "continue": pages[-1]["continue"]}
