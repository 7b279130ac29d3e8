"""Migrations that rewrite what the derived layer already stored: nothing stored is lost or changed in meaning."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from derived.documents import unpack
from derived.event_lookups import subject_digest
from derived.models import EventSubject, PodExplanation
from tests.clusters import T0

pytestmark = pytest.mark.django_db(transaction=True)


def _at(target: tuple[str, str]) -> Any:
    """The schema as of ``target``: the historical models to write old rows with."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


def _to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_stored_documents_are_compressed_as_they_were() -> None:
    apps = _at(("derived", "0011_event_subjects"))
    cluster = apps.get_model("collector", "Cluster").objects.create(name="upgraded")
    text = orjson.dumps({"verdict": {"reason": "ok", "message": 'quoted \\"path\\" C:\\\\dir'}}).decode()
    apps.get_model("derived", "PodExplanation").objects.create(
        cluster=cluster, pod_uid="p", namespace="ns", name="pod", content=text, content_hash="h", valid_from=T0
    )
    _to_latest()
    row = PodExplanation.objects.get(cluster__name="upgraded")
    assert row.dictionary_id is None
    assert unpack(row.content, None) == orjson.loads(text)


def test_the_event_lookup_keeps_one_row_per_subject_the_first_seen() -> None:
    apps = _at(("derived", "0012_pod_documents_compressed"))
    cluster = apps.get_model("collector", "Cluster").objects.create(name="upgraded")
    old = apps.get_model("derived", "EventSubject").objects
    about_uid = {"cluster": cluster, "event_uid": "e1", "uid": "pod-uid", "preparation_failure": True}
    old.create(**about_uid, kind="Pod", namespace="ns", name="pod", seen=T0 + timedelta(minutes=1))
    old.create(**about_uid, kind="", namespace="", name="", seen=T0)  # the same subject, seen first
    old.create(cluster=cluster, event_uid="e2", uid="", kind="Pod", namespace="ns", name="pod", seen=T0)
    _to_latest()
    rows = sorted(EventSubject.objects.values_list("event_uid", "uid", "namespace", "name", "seen", "subject"))
    assert rows == [
        ("e1", "pod-uid", "", "", T0, subject_digest(cluster.pk, "e1", "pod-uid", True)),
        ("e2", "", "ns", "pod", T0, subject_digest(cluster.pk, "e2", ("ns", "pod"), False)),
    ]
