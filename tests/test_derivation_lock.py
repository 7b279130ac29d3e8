"""Derivations of one cluster take turns; the cluster's history writes do not wait for them.

Two threads, each with its own PostgreSQL connection: one holds the derivation lock in an open
transaction (as a long derivation does), the other stores a snapshot through the history writer,
and a third asks for the derivation lock.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from collector.history_writer import get_cluster, start_snapshot, write_snapshot
from collector.models import Snapshot
from derived.derivation_lock import lock_derivations_of

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db(transaction=True)


def _in_thread(target: object) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    done, failed = threading.Event(), []

    def run() -> None:
        try:
            target()  # type: ignore[operator]
        except BaseException as exc:  # reported to the test's thread
            failed.append(exc)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, failed


def test_a_history_write_goes_on_while_a_derivation_holds_its_lock_and_a_second_derivation_waits() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes every writer on the whole database")
    cluster = get_cluster("locks")
    holding, release = threading.Event(), threading.Event()

    def long_derivation() -> None:
        with transaction.atomic():
            lock_derivations_of(cluster.pk)
            holding.set()
            release.wait(30)

    def collection() -> None:
        snapshot = start_snapshot(cluster, T0 + timedelta(seconds=30), "test", T0)
        write_snapshot(snapshot, [], complete_kinds=(), finished=T0 + timedelta(seconds=31))

    def second_derivation() -> None:
        with transaction.atomic():
            lock_derivations_of(cluster.pk)

    deriving, derived, derive_failed = _in_thread(long_derivation)
    assert holding.wait(10)
    _, written, write_failed = _in_thread(collection)
    _, second, second_failed = _in_thread(second_derivation)
    try:
        # The history write does not wait for the derivation (it used to, on the cluster's row).
        assert written.wait(15), "the history write waited for the derivation's lock"
        assert not write_failed, write_failed
        assert Snapshot.objects.filter(cluster=cluster, status=Snapshot.Status.OK).count() == 1
        # Another derivation of the same cluster does wait, until the first one's transaction ends.
        assert not second.wait(1.0), "two derivations of one cluster ran at once"
    finally:
        release.set()
    assert derived.wait(10) and second.wait(10)
    assert not derive_failed and not second_failed, (derive_failed, second_failed)
    deriving.join(5)
