"""What an Event is about, and the Events of a history about a few objects.

A Pod's boundaries read only the Events about the Pod (by UID, or by name when the Event
names no UID) and about its claims. ``HistoryView.events_about`` answers that: a history
holding every Event in memory answers from ``EventSubjects`` here, the derived layer from
its lookup rows (``derived.event_lookups``), so judging a few Pods need not decode every
Event the history kept.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

# Not imported from ``state``: its ``MemoryHistory`` answers ``events_about`` with ``EventSubjects``.
Object = dict[str, Any]
PodName = tuple[str, str]


class _Version(Protocol):
    @property
    def obj(self) -> Object | None: ...


V = TypeVar("V", bound=_Version)


def involved_of(event: Object) -> dict[str, Any] | None:
    """The object an Event is about (core ``involvedObject`` or events.k8s.io ``regarding``)."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return involved if isinstance(involved, dict) else None


def newest_content(versions: Sequence[_Version]) -> Object | None:
    """An Event's last stored content: what it is about, and its count at its newest."""
    return next((v.obj for v in reversed(versions) if v.obj is not None), None)


def subject_key(involved: Mapping[str, Any]) -> str | PodName | None:
    """How an Event is found: by the involved UID, else (a Pod named without UID) by its name."""
    if involved.get("uid"):
        return str(involved["uid"])
    if involved.get("kind") == "Pod":
        return (str(involved.get("namespace") or ""), str(involved.get("name") or ""))
    return None


class EventSubjects(Generic[V]):
    """Every Event of a history by what its newest content is about (``HistoryView.events_about``
    for a history that read all of them anyway)."""

    def __init__(self, events: Iterable[list[V]]) -> None:
        self._about: dict[str | PodName, list[list[V]]] = {}
        for versions in events:
            latest = newest_content(versions)
            involved = involved_of(latest) if latest is not None else None
            key = subject_key(involved) if involved is not None else None
            if key is not None:
                self._about.setdefault(key, []).append(versions)

    def about(self, uids: Collection[str], pod_names: Collection[PodName]) -> list[list[V]]:
        keys: list[str | PodName] = [*uids, *pod_names]
        return [versions for key in dict.fromkeys(keys) for versions in self._about.get(key, ())]
