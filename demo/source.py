"""The bundled demo cluster: a fake API server in this process, serving the demo story.

The first collection of a demo cluster replays the story's earlier stages at
their own times, so a first run shows history at once; later collections read
the last stage like any cluster.

The fake API server serves HTTPS with a CA made at start (``demo.pki``), and its kubeconfig (with that CA) is
also written to ``$CLAIMLINE_VAR_DIR/demo-kubeconfig`` (``var/demo-kubeconfig``) for kubectl and other
clients: ``kubectl --kubeconfig var/demo-kubeconfig get resourceclaims -A``. The process's collector reads
through a private copy, so another process serving the demo (each serves its own) cannot swap it underneath.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from collector.collect import reader_for
from collector.kube import ClusterReader
from collector.models import Snapshot
from collector.sources import ClusterSource
from demo.fake_apiserver import FakeApiServer, FakeCluster
from demo.pki import serving_pki
from demo.story import demo_stages, stage_times

log = logging.getLogger("claimline.demo")

# The pipeline's collection step: (source, at, clock, reader) -> the stored snapshot.
CollectStep = Callable[[ClusterSource, datetime, Callable[[], datetime], ClusterReader], Snapshot]

_lock = threading.Lock()
_server: FakeApiServer | None = None
_kubeconfig: Path | None = None


def _demo_base(cluster_name: str, now: datetime) -> datetime:
    """The time of the story's last stage: fixed by the first replay, so every process serves the same objects."""
    stages = len(stage_times(now))
    ats = list(
        Snapshot.objects.filter(cluster__name=cluster_name, source__startswith="demo replay")
        .order_by("at")
        .values_list("at", flat=True)[:stages]
    )
    return ats[-1] if len(ats) == stages else now


def published_kubeconfig() -> Path:
    """Where the demo cluster's kubeconfig is written for users: ``$CLAIMLINE_VAR_DIR/demo-kubeconfig``."""
    from django.conf import settings

    return Path(settings.VAR_DIR) / "demo-kubeconfig"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when under it (as a user would type it)."""
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def demo_server(base: datetime) -> FakeApiServer:
    global _server, _kubeconfig
    with _lock:
        if _server is None:
            server = FakeApiServer(FakeCluster(demo_stages(base)), tls=serving_pki("claimline-demo-apiserver"))
            server.start()
            server.cluster.set_stage(server.cluster.stage_count - 1)
            path = Path(tempfile.mkdtemp(prefix="claimline-demo-")) / "kubeconfig"
            server.write_kubeconfig(path, context="claimline-demo")
            published = published_kubeconfig()
            server.write_kubeconfig(published, context="claimline-demo")
            shown = _shown(published)
            log.info(
                "demo cluster: fake API server at %s; kubeconfig %s "
                "(try: kubectl --kubeconfig %s get resourceclaims -A)",
                server.url, shown, shown,
            )
            _server, _kubeconfig = server, path
        return _server


def demo_kubeconfig(cluster_name: str = "demo", now: datetime | None = None) -> str:
    from django.utils import timezone

    demo_server(_demo_base(cluster_name, now or timezone.now()))
    assert _kubeconfig is not None
    return str(_kubeconfig)


def replay_demo_history(
    source: ClusterSource, now: datetime, clock: Callable[[], datetime], collect: CollectStep
) -> Snapshot | None:
    """Replay the story's stages if the cluster has no history yet; the last snapshot, or None.

    ``collect`` is the pipeline's step (collection, then derivation), so each stage is derived as
    a live collection would be.
    """
    if Snapshot.objects.filter(cluster__name=source.name).exclude(status=Snapshot.Status.FAILED).exists():
        return None
    server = demo_server(now)
    kubeconfig = str(_kubeconfig)
    times = stage_times(now)
    last = None
    for stage, at in enumerate(times):
        server.cluster.set_stage(stage)
        reader, description = reader_for(source, kubeconfig)
        snapshot = collect(source, at, clock, reader)
        snapshot.source = f"demo replay stage {stage} via {description}"
        snapshot.save(update_fields=["source"])
        last = snapshot
    return last
