from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.kube import ClusterReader, api_client_for
from collector.sources import ClusterSource
from demo.control_plane import ControlPlane, binaries_dir
from demo.fake_apiserver import FakeApiServer, FakeCluster
from tests.clusters import small_cluster


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane (demo/control_plane.py), started once per session for every test that asks for it
    (marked ``control_plane``: the end-to-end cases, the demo on it): starting one costs ~10 s of two cores."""
    if binaries_dir() is None:
        pytest.skip("control plane not built (scripts/build-control-plane)")
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
    started = time.monotonic()
    plane.start()
    print(f"\ncontrol plane ready in {time.monotonic() - started:.1f} s: {plane.startup}")
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[FakeApiServer]:
    """A fake API server serving ``small_cluster`` as its only stage."""
    server = FakeApiServer(FakeCluster([small_cluster()]))
    server.start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def source(tmp_path: Path, fake_api: FakeApiServer) -> ClusterSource:
    return ClusterSource("test", "kubeconfig", str(tmp_path / "kubeconfig"))


@pytest.fixture
def make_reader(source: ClusterSource) -> Any:
    def make(page_size: int = 2, timeout: float = 2.0, max_retries: int = 2) -> ClusterReader:
        return ClusterReader(
            api_client_for(source), page_size=page_size, timeout=timeout, max_retries=max_retries,
            sleep=lambda _s: None,
        )

    return make


@pytest.fixture
def demo_history(tmp_path: Path) -> Any:
    """The demo story imported stage by stage with import-snapshot, as stored history."""
    from django.core.management import call_command

    from demo import builders
    from demo.story import DEMO_BASE, demo_snapshots

    for i, (at, objects) in enumerate(demo_snapshots(DEMO_BASE)):
        dump = tmp_path / f"stage-{i}.json"
        dump.write_bytes(builders.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat())
    return DEMO_BASE


@pytest.fixture
def demo_clients(demo_history: Any) -> dict[str, Any]:
    """Test clients signed in as the demo's two users: ``admin`` (platform admin) and ``alice`` (ml-training)."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("ensure-demo-users")
    out = {}
    for who in ("admin", "alice"):
        client = Client()
        client.force_login(User.objects.get(username=who))
        out[who] = client
    return out
