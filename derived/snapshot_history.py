"""The history a derivation judges its Pods over: a snapshot's ``StoredHistory``, and the views just
before it where Pods deleted at it are judged, sharing what they read.

What a churned snapshot's derivation reads must follow the change, not the history kept. Told
which Pods and claims it will judge (``judging``), the history reads their versions in batched
queries (``StoredHistory.prefetch``) and only the Events about them, found by the derived
layer's lookup (``derived.event_lookups``). A full derivation judges every live Pod: it reads
every Event once instead, and each kind's whole history.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

from collector.history_reader import StoredHistory
from derived.event_lookups import SubjectEvents
from domain.cluster.events import EventSubjects, PodName
from domain.cluster.state import HistoryView, Version
from domain.inventory.devices import Inventory
from domain.reports.leaks import CachedHistory


class SnapshotHistory(CachedHistory):
    """The snapshot's history, sharing ``before`` views: every Pod deleted at one time is
    judged against the same earlier history (and its one inventory)."""

    def __init__(self, history: StoredHistory, inventory_changed: bool = True) -> None:
        super().__init__(history)
        self._stored = history
        self._before: dict[datetime, HistoryView] = {}
        self._events: dict[str, list[Version]] | None = None
        self._event_subjects: EventSubjects[Version] | None = None
        self._subjects: SubjectEvents | None = None
        self._inventories: dict[int, tuple[HistoryView, Inventory]] = {}
        # Whether the snapshot changed anything but claims, templates, Pods and Events: if not, the
        # cluster just before it has the same devices and nodes, and only the holders are read again.
        self._inventory_changed = inventory_changed

    def judging(self, pods: Collection[str], claims: Collection[str], pod_names: Iterable[PodName]) -> None:
        """Read ahead what judging ``pods`` reads: their versions, their claims', and the Events about
        them (by UID or name) and their claims, from the lookup. Only once the lookup holds every Event
        version up to the snapshot (``write_event_subjects`` of it, after a derived snapshot)."""
        self._stored.prefetch("Pod", pods)
        self._stored.prefetch("ResourceClaim", claims)
        self._subjects = SubjectEvents(self._stored)
        self._subjects.prefetch([*pods, *claims], pod_names)

    def prefetch(self, kind: str, uids: Iterable[str]) -> None:
        self._stored.prefetch(kind, uids)

    def versions(self, kind: str, uid: str) -> list[Version]:
        # Not remembered: each Pod's judgement gets objects of its own, as from the database.
        return self._history.versions(kind, uid)

    def before(self, t: datetime) -> HistoryView:
        if t not in self._before:
            earlier = self._history.before(t)
            self._before[t] = earlier if earlier is self._history else EarlierHistory(earlier, self)
        return self._before[t]

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        if kind != "Event" or since is not None:
            return self._history.all_versions(kind, since)
        if self._events is None:  # read once for the event indexes of this history and the one before it
            self._events = self._history.all_versions(kind)
        return self._events

    def events_about(self, uids: Collection[str], pod_names: Collection[PodName]) -> list[list[Version]]:
        if self._subjects is not None:
            return self._subjects.about(uids, pod_names)
        if self._event_subjects is None:
            self._event_subjects = EventSubjects(self.all_versions("Event").values())
        return self._event_subjects.about(uids, pod_names)

    @property
    def reads_subjects(self) -> bool:
        """Whether ``events_about`` reads the lookup (``judging`` was called)."""
        return self._subjects is not None

    def release(self) -> None:
        """Free what the derivation decoded (``StoredHistory.release``): this snapshot's history and
        the earlier ones it judged deleted Pods against, which share its decoded objects."""
        for earlier in self._before.values():
            stored = earlier._history if isinstance(earlier, CachedHistory) else earlier
            if isinstance(stored, StoredHistory):
                stored.release()
        self._stored.release()
        self._before.clear()
        self._inventories.clear()
        self._versions.clear()
        self._events = None
        self._event_subjects = None
        self._subjects = None

    def inventory_of(self, history: HistoryView) -> Inventory:
        """One inventory per history judged from (keeps the history alive, so ids stay unique)."""
        held = self._inventories.get(id(history))
        if held is None:
            if not self._inventory_changed and history is not self and history is self._before.get(self.as_of):
                inventory = self.inventory_of(self).with_claims_of(history.state)
            else:
                inventory = Inventory.of(history.state)
            held = self._inventories[id(history)] = (history, inventory)
        return held[1]


class EarlierHistory(CachedHistory):
    """The history just before the snapshot, its Events' and objects' versions cut from the
    snapshot's own: what the derivation read is read once, not once per view."""

    def __init__(self, history: HistoryView, later: SnapshotHistory) -> None:
        super().__init__(history)
        self._later = later
        self._event_subjects: EventSubjects[Version] | None = None

    def versions(self, kind: str, uid: str) -> list[Version]:
        return _upto(self._later.versions(kind, uid), self.as_of)

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        if kind != "Event" or since is not None:
            return self._history.all_versions(kind, since)
        as_of = self.as_of
        out: dict[str, list[Version]] = {}
        for uid, versions in self._later.all_versions(kind).items():
            kept = _upto(versions, as_of)
            if kept:
                out[uid] = kept
        return out

    def events_about(self, uids: Collection[str], pod_names: Collection[PodName]) -> list[list[Version]]:
        if self._later.reads_subjects:
            # The lookup keeps every object an Event was ever about: cut, they are still a superset.
            as_of = self.as_of
            cut = (_upto(versions, as_of) for versions in self._later.events_about(uids, pod_names))
            return [versions for versions in cut if versions]
        if self._event_subjects is None:
            # Indexed by their newest content as of this history: the cut decides what each is about.
            self._event_subjects = EventSubjects(self.all_versions("Event").values())
        return self._event_subjects.about(uids, pod_names)


def _upto(versions: list[Version], as_of: datetime) -> list[Version]:
    return [v for v in versions if v.at <= as_of]
