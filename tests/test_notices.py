"""Notices: derived once when a snapshot is written, delivered to webhooks and e-mail, retried, scoped per team."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, User
from django.core import mail
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from access.models import NamespaceGrant
from claimline.celery import beat_schedule
from claimline.scheduler import collect_all
from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from collector.sources import ClusterSource
from demo import builders as b
from demo.story import DEMO_BASE, LLM_FINETUNE, PRETRAIN, REPORT_CLAIM, demo_snapshots, demo_stages
from derived.thresholds import leak_thresholds
from domain.cluster.state import MemoryHistory
from domain.reports.capacity import weekly_review
from domain.reports.notices import (
    COLLECTION_FAILING,
    NODE_PREPARATION,
    Run,
    collection_subjects,
    node_preparation_subjects,
    pending_pod_subjects,
)
from notify import delivery, detection
from notify.models import Delivery, Notice, Receiver, Scan
from notify.tasks import deliver
from tests.workers import celery_worker, worker_env

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


class WebhookReceiver:
    """A webhook endpoint on 127.0.0.1 that records every POST and answers from a script of statuses."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []  # answered in order; 200 once they run out
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(json.loads(body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def about(self, name: str) -> list[dict[str, Any]]:
        return [body for body in self.bodies if body.get("name") == name]


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


@pytest.fixture
def platform_receivers(settings: Any, webhook: WebhookReceiver) -> WebhookReceiver:
    settings.CLAIMLINE_NOTIFY_WEBHOOK_URL = webhook.url
    settings.CLAIMLINE_NOTIFY_WEBHOOK_FORMAT = "json"
    settings.CLAIMLINE_NOTIFY_EMAILS = ["gpu-platform@example.com"]
    settings.CLAIMLINE_SCHEDULER = "in-process"
    return webhook


def key(ns_name: tuple[str, str]) -> str:
    return f"{ns_name[0]}/{ns_name[1]}"


def import_stage(tmp_path: Path, objects: list[dict[str, Any]], at: datetime) -> None:
    dump = tmp_path / f"extra-{at.timestamp():.0f}.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())


# --- the domain ---------------------------------------------------------------------------------------


def _failing_pod(name: str, node: str, at: datetime) -> list[dict[str, Any]]:
    tpl = b.claim_template("team-a", "one-gpu", [b.request()], created=at - timedelta(days=1))
    pod = b.pod("team-a", name, at - timedelta(minutes=20), claims=[("gpu", {"template": "one-gpu"})],
                node_name=node, conditions=b.stuck_conditions(at - timedelta(minutes=19), sandbox_ready=False))
    claim = b.template_claim(tpl, pod, allocated=[("gpu", node, "gpu-0")], allocated_at=at - timedelta(minutes=19),
                             reserved_for=[pod])
    failure = b.event(pod, "FailedPrepareDynamicResources",
                      f"NodePrepareResources failed for ResourceClaim {claim['metadata']['name']}: device not found",
                      at - timedelta(minutes=18), at - timedelta(minutes=1), count=7)
    return [tpl, pod, claim, failure]


def test_preparation_failures_of_two_claims_on_one_node_make_a_node_notice() -> None:
    one = MemoryHistory([(T0, _failing_pod("a", "node-1", T0))])
    assert node_preparation_subjects(one, min_claims=2, window=3600) == []

    objects = _failing_pod("a", "node-1", T0) + _failing_pod("b", "node-1", T0) + _failing_pod("c", "node-2", T0)
    subjects = node_preparation_subjects(MemoryHistory([(T0, objects)]), min_claims=2, window=3600)
    assert [(s.kind, s.key, s.namespace) for s in subjects] == [(NODE_PREPARATION, "node-1", "")]
    assert "2 claims of 2 Pods" in subjects[0].message and "team-a/a, team-a/b" in subjects[0].message

    # Failures older than the window are history, not a current node problem.
    later = MemoryHistory([(T0, objects), (T0 + timedelta(hours=2), objects)])
    assert node_preparation_subjects(later, min_claims=2, window=3600) == []


def test_a_collection_notice_needs_consecutive_failures() -> None:
    runs = [Run(T0 - timedelta(minutes=i), failed=True, error=f"timeout {i}") for i in range(3)]
    [subject] = collection_subjects("prod", runs, 3)
    assert (subject.kind, subject.key) == (COLLECTION_FAILING, "prod")
    assert "last 3 collections" in subject.message and "timeout 0" in subject.message
    assert collection_subjects("prod", [*runs[:2], Run(T0 - timedelta(minutes=5), failed=False)], 3) == []
    assert collection_subjects("prod", [Run(T0, failed=False), *runs], 3) == []


def test_pending_pods_are_judged_once_while_they_stay_pending() -> None:
    history = MemoryHistory(demo_snapshots(DEMO_BASE))
    judged = {s.name: s for s in pending_pod_subjects(history, 1800)}
    llm = judged[key(LLM_FINETUNE)]
    assert llm.reason == "selector-unsatisfiable" and "pending for 43 min" in llm.message
    assert key(PRETRAIN) not in judged  # 27 minutes
    assert key(PRETRAIN) in {s.name for s in pending_pod_subjects(history, 1200)}
    # Already told: the open notice's reason stands, without a second judgement.
    again = pending_pod_subjects(history, 1800, known={llm.key: "waiting-for-scheduler"})
    assert [(s.key, s.reason) for s in again if s.key == llm.key] == [(llm.key, "waiting-for-scheduler")]


def test_stored_verdicts_tell_every_reason_a_pending_pod_goes_through() -> None:
    """With the waiting Pods' verdicts derived at write time nothing is judged here, so a new reason is news."""
    history = MemoryHistory(demo_snapshots(DEMO_BASE))
    llm = next(s for s in pending_pod_subjects(history, 1800) if s.name == key(LLM_FINETUNE))
    stored = {llm.key: {"boundary": "allocation", "reason": "devices-in-use", "message": "held by others"}}
    told = pending_pod_subjects(history, 1200, known={llm.key: "selector-unsatisfiable"}, stored=stored)
    assert [(s.key, s.reason) for s in told] == [(llm.key, "devices-in-use")]  # pretrain is ok by ``stored``
    assert told[0].message.endswith(": held by others")


# --- the demo story -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_demo_notices_are_sent_once_across_collections(
    platform_receivers: WebhookReceiver, demo_history: Any, tmp_path: Path
) -> None:
    webhook = platform_receivers
    notices = {(n.kind, n.name): n for n in Notice.objects.all()}
    leak = notices[("leak", key(REPORT_CLAIM))]
    assert leak.reason == "orphaned-allocation" and leak.namespace == "batch"
    assert leak.link.startswith("/c/demo/claims/")
    pending = notices[("pending-pod", key(LLM_FINETUNE))]
    # First seen at the stage it passed 30 minutes pending; the message is the one stored then.
    assert pending.reason == "selector-unsatisfiable" and "pending for 33 min" in pending.message
    assert pending.first_seen == DEMO_BASE - timedelta(minutes=10)
    # Pending 27 minutes at the last stage: under the 30-minute default.
    assert ("pending-pod", key(PRETRAIN)) not in notices

    # Nothing changes in the cluster, but ten minutes pass: the rescan finds the Pod past its threshold.
    import_stage(tmp_path, demo_stages(DEMO_BASE)[-1], DEMO_BASE + timedelta(minutes=10))
    # And another collection of the same cluster, with a change (time moved on in the objects).
    import_stage(tmp_path, demo_stages(DEMO_BASE + timedelta(minutes=20))[-1], DEMO_BASE + timedelta(minutes=20))

    pretrain = Notice.objects.get(kind="pending-pod", name=key(PRETRAIN))
    assert pretrain.reason == "devices-in-use"
    assert pretrain.first_seen == DEMO_BASE + timedelta(minutes=10)
    for name in (key(REPORT_CLAIM), key(LLM_FINETUNE), key(PRETRAIN)):
        assert len(webhook.about(name)) == 1, name
        assert len([m for m in mail.outbox if name in m.subject]) == 1, name
    assert webhook.about(key(REPORT_CLAIM))[0]["reason"] == "orphaned-allocation"
    assert not Delivery.objects.exclude(status=Delivery.Status.SENT).exists()
    assert delivery.failing_receivers() == []


@pytest.mark.django_db(transaction=True)  # the loop closes connections between clusters
def test_the_in_process_scheduler_notifies_in_its_loop(platform_receivers: WebhookReceiver) -> None:
    now = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)  # test_demo's time: the demo server is one per process
    collect_all(["demo"], lambda: now)
    assert len(platform_receivers.about(key(REPORT_CLAIM))) == 1
    assert Scan.objects.get(cluster__name="demo").at == now
    # Unchanged and within CLAIMLINE_NOTIFY_RESCAN_AFTER: not even scanned.
    collect_all(["demo"], lambda: now + timedelta(seconds=30))
    assert Scan.objects.get(cluster__name="demo").at == now
    assert len(platform_receivers.about(key(REPORT_CLAIM))) == 1
    assert Notice.objects.filter(dispatched__isnull=True).count() == 0


@pytest.mark.django_db
def test_a_receiver_answering_500_is_retried(platform_receivers: WebhookReceiver, demo_history: Any) -> None:
    webhook = platform_receivers
    webhook.bodies.clear()
    Notice.objects.all().delete()
    webhook.statuses = [500]
    result = detection.scan(Cluster.objects.get(name="demo"), timezone.now())
    ids = delivery.dispatch(timezone.now())
    assert result.new and ids
    first = Delivery.objects.filter(target="env/webhook").order_by("pk").first()
    assert first is not None
    # Celery's task records the failure and when to try again (the backoff, less some jitter)...
    before = timezone.now()
    deliver.apply(args=(first.pk,))
    first.refresh_from_db()
    assert (first.status, first.attempts) == ("retrying", 1) and "500" in first.error
    assert first.next_attempt is not None
    assert timedelta(seconds=22) < first.next_attempt - before < timedelta(seconds=31)
    # ...and a second task before then (the sweep's, a duplicate) sends nothing.
    deliver.apply(args=(first.pk,))
    first.refresh_from_db()
    assert (first.status, first.attempts, len(webhook.bodies)) == ("retrying", 1, 1)
    # Once it is due (here: made due now), the task sends it.
    Delivery.objects.filter(pk=first.pk).update(next_attempt=timezone.now())
    deliver.apply(args=(first.pk,))
    first.refresh_from_db()
    assert (first.status, first.attempts) == ("sent", 2)
    assert len(webhook.bodies) == 2 and webhook.bodies[0] == webhook.bodies[1]

    # The in-process loop keeps a failed delivery for a later loop, after its backoff.
    second = Delivery.objects.filter(target="env/webhook", attempts=0).order_by("pk").first()
    assert second is not None
    webhook.statuses = [503]
    now = timezone.now()
    delivery.deliver_due(now)
    second.refresh_from_db()
    assert (second.status, second.attempts) == ("retrying", 1) and "503" in second.error
    [failing] = delivery.failing_receivers()
    assert failing["target"] == "env/webhook" and "127.0.0.1" in failing["label"] and "503" in failing["error"]
    delivery.deliver_due(now + timedelta(minutes=5))
    second.refresh_from_db()
    assert (second.status, second.attempts) == ("sent", 2)
    assert delivery.failing_receivers() == []


@pytest.mark.django_db
def test_a_refusing_receiver_is_not_retried(platform_receivers: WebhookReceiver, demo_history: Any) -> None:
    Notice.objects.all().delete()
    platform_receivers.statuses = [404]
    detection.scan(Cluster.objects.get(name="demo"), timezone.now())
    [pk, *_] = delivery.dispatch(timezone.now())
    deliver.apply(args=(pk,))
    refused = Delivery.objects.get(pk=pk)
    assert (refused.status, refused.attempts, refused.error) == ("failed", 1, "HTTP 404 Not Found")
    assert delivery.failing_receivers()[0]["status"] == "failed"


@pytest.mark.django_db
def test_a_failing_receiver_is_reported_on_the_overview_to_admins_only(
    platform_receivers: WebhookReceiver, ml_team_receiver: Receiver, demo_history: Any
) -> None:
    Notice.objects.all().delete()
    platform_receivers.statuses = [404] * 50
    detection.scan(Cluster.objects.get(name="demo"), timezone.now())
    for pk in delivery.dispatch(timezone.now()):
        deliver.apply(args=(pk,))
    admin = User.objects.create_user("owner", password="pw")
    admin.groups.add(Group.objects.create(name="platform-admins"))
    member = User.objects.create_user("member", password="pw")
    member.groups.add(ml_team_receiver.group)
    owner_client, member_client = Client(), Client()
    owner_client.force_login(admin)
    member_client.force_login(member)

    page = owner_client.get("/c/demo/").content.decode()
    assert 'data-testid="failing-receivers"' in page
    assert "HTTP 404 Not Found" in page and "none ever succeeded" in page
    assert 'data-testid="failing-receivers"' not in member_client.get("/c/demo/").content.decode()


@pytest.fixture
def team_receiver(webhook: WebhookReceiver) -> Receiver:
    team = Group.objects.create(name="research-team")
    NamespaceGrant.objects.create(group=team, namespace="research")
    return Receiver.objects.create(name="research", group=team, webhook_url=webhook.url, webhook_format="slack",
                                   emails="research-oncall@example.com")


@pytest.mark.django_db
def test_team_receivers_get_only_their_namespaces(
    settings: Any, team_receiver: Receiver, demo_history: Any, webhook: WebhookReceiver
) -> None:
    settings.CLAIMLINE_NOTIFY_EMAILS = ["gpu-platform@example.com"]
    texts = sorted(body["text"] for body in webhook.bodies)
    # research's two: llm-finetune's pending verdict and the GPU kubelet reports Unhealthy under vit-pretrain-0.
    assert len(texts) == 2
    assert "device-unhealthy" in texts[0] and "research/vit-pretrain-0" in texts[0] and "XID 79" in texts[0]
    assert key(LLM_FINETUNE) in texts[1] and "selector-unsatisfiable" in texts[1]
    assert {m.to[0] for m in mail.outbox} == {"research-oncall@example.com"}
    targets = set(Delivery.objects.values_list("target", flat=True))
    assert targets == {f"receiver-{team_receiver.pk}/webhook", f"receiver-{team_receiver.pk}/email"}

    # The platform (env) receiver, configured from now on, gets every new notice.
    Notice.objects.all().delete()
    detection.scan(Cluster.objects.get(name="demo"), timezone.now())
    delivery.dispatch(timezone.now())
    platform = Delivery.objects.filter(target="env/email")
    team = Delivery.objects.filter(receiver=team_receiver)
    assert {d.notice.namespace for d in platform} == {"batch", "research", "inference", "ml-training"}
    assert {d.notice.namespace for d in team} == {"research"}


@pytest.fixture
def ml_team_receiver(settings: Any, webhook: WebhookReceiver) -> Receiver:
    settings.CLAIMLINE_NOTIFY_PENDING_AFTER = 1200  # pretrain-8xh100 is pending 27 minutes at the last stage
    team = Group.objects.create(name="ml")
    NamespaceGrant.objects.create(group=team, namespace="ml-training")
    return Receiver.objects.create(name="ml", group=team, webhook_url=webhook.url)


@pytest.mark.django_db
def test_team_receivers_do_not_read_other_teams_claims(
    ml_team_receiver: Receiver, demo_history: Any, webhook: WebhookReceiver
) -> None:
    [pretrain] = webhook.about(key(PRETRAIN))
    assert pretrain["reason"] == "devices-in-use"
    assert "(a claim in another namespace) (2)" in pretrain["message"]
    assert "inference/" not in pretrain["message"] and "ml-training/eval-harness" in pretrain["message"]
    stored = Notice.objects.get(name=key(PRETRAIN))
    assert "inference/llama-serve-0" in stored.message  # the platform's page and receivers see it whole
    assert {body["namespace"] for body in webhook.bodies} == {"ml-training"}


@pytest.mark.django_db
def test_notices_page_is_scoped_by_access(
    platform_receivers: WebhookReceiver, ml_team_receiver: Receiver, demo_history: Any
) -> None:
    admin = User.objects.create_user("owner", password="pw")
    admin.groups.add(Group.objects.create(name="platform-admins"))
    member = User.objects.create_user("member", password="pw")
    member.groups.add(ml_team_receiver.group)  # granted ml-training
    owner_client, member_client = Client(), Client()
    owner_client.force_login(admin)
    member_client.force_login(member)

    page = owner_client.get("/c/demo/notices/").content.decode()
    assert key(REPORT_CLAIM) in page and key(PRETRAIN) in page and "inference/llama-serve-0" in page
    assert "platform webhook (127.0.0.1)" in page and platform_receivers.url not in page
    page = member_client.get("/c/demo/notices/").content.decode()
    assert key(PRETRAIN) in page and key(REPORT_CLAIM) not in page and key(LLM_FINETUNE) not in page
    assert "inference/llama-serve-0" not in page and "(a claim in another namespace)" in page


@pytest.mark.django_db
def test_failing_collections_make_one_notice_until_one_succeeds(platform_receivers: WebhookReceiver) -> None:
    cluster = Cluster.objects.create(name="prod")
    for i in range(4):
        at = T0 + timedelta(minutes=i)
        snap = Snapshot.objects.create(cluster=cluster, at=at, started=at, source="api", status="failed",
                                       error="connection refused")
        detection.scan_after(snap, at)
    [notice] = Notice.objects.filter(cluster=cluster)
    assert (notice.kind, notice.subject, notice.first_seen) == (COLLECTION_FAILING, "prod", T0 + timedelta(minutes=2))
    assert notice.link == "/c/prod/snapshots/"

    at = T0 + timedelta(minutes=5)
    ok = Snapshot.objects.create(cluster=cluster, at=at, started=at, source="api", status="ok", versions_written=1)
    detection.scan_after(ok, at)
    notice.refresh_from_db()
    assert notice.resolved == at


def test_beat_schedules_the_weekly_review_with_an_expiry() -> None:
    schedule = beat_schedule([ClusterSource("a", "demo")], 30, notify=True)
    review = schedule["weekly-review"]
    assert review["task"] == "notify.tasks.send_weekly_review"
    assert review["options"]["expires"] > 0 and review["schedule"].day_of_week == {1}
    assert schedule["dispatch-notices"]["options"]["expires"] < schedule["dispatch-notices"]["schedule"]


# --- the weekly review e-mail -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_weekly_review_email(settings: Any, demo_history: Any) -> None:
    settings.CLAIMLINE_REVIEW_EMAILS = ["capacity@example.com", "finance@example.com"]
    call_command("send-review", "--week", "2026-11-18")  # any day picks its Monday
    [message] = mail.outbox
    assert message.to == ["capacity@example.com", "finance@example.com"]
    assert message.subject.startswith("[Claimline] demo weekly review, week of 2026-11-16: ")
    totals = weekly_review(
        StoredHistory(Cluster.objects.get(name="demo")), datetime(2026, 11, 16, tzinfo=UTC), leak_thresholds()
    )["totals"]
    assert totals["leaked_device_hours"] > 0
    assert (
        f"{totals['allocated_device_hours']:.1f} device-hours allocated, "
        f"{totals['leaked_device_hours']:.1f} leaked by flagged claims"
    ) in message.subject
    assert f"Device-hours leaked by flagged claims: {totals['leaked_device_hours']} " in message.body
    assert f"Device-hours allocated: {totals['allocated_device_hours']} " in message.body
    html, mime = message.alternatives[0]
    assert mime == "text/html" and html.count("<svg") == 2 and "batch/report-gpu" in html
    assert "http" not in html.split("<a href=")[0].replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    [(filename, content, mimetype)] = message.attachments
    assert (filename, mimetype) == ("claimline-demo-week-2026-11-16.csv", "text/csv")
    lines = content.splitlines()
    assert lines[0].startswith("week,scope,name,allocated_device_hours")
    assert lines[1].startswith("2026-11-16,total,,")
    assert any(line.startswith("2026-11-16,claim,batch/report-gpu,") for line in lines)


@pytest.mark.django_db
def test_send_review_dry_run_sends_nothing(settings: Any, demo_history: Any, capsys: Any) -> None:
    settings.CLAIMLINE_REVIEW_EMAILS = ["capacity@example.com"]
    call_command("send-review", "--dry-run", "--week", "2026-11-16")
    assert mail.outbox == []
    out = capsys.readouterr().out
    assert "not sent (dry run)" in out and "subject: [Claimline] demo weekly review" in out


# --- through a real worker ----------------------------------------------------------------------------------


@pytest.fixture
def celery_scheduler(settings: Any) -> None:
    """Imports queue their notice scans on Redis, as collections do under Celery."""
    settings.CLAIMLINE_SCHEDULER = "celery"
    redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_worker_scans_sends_and_retries(
    celery_scheduler: None, demo_history: Any, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    env = worker_env(
        CLAIMLINE_SCHEDULER="celery",
        CLAIMLINE_NOTIFY_WEBHOOK_URL=webhook.url,
        CLAIMLINE_NOTIFY_WEBHOOK_FORMAT="slack",
        CLAIMLINE_NOTIFY_RETRY_FIRST="1",  # the retry is queued with its countdown: one second here
    )
    assert not Notice.objects.exists()  # queued, not scanned in this process
    webhook.statuses = [500]  # the first POST fails: the worker retries it after a backoff
    with celery_worker(env) as worker:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            deliveries = list(Delivery.objects.all())
            if deliveries and all(d.status == Delivery.Status.SENT for d in deliveries):
                break
            assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
            time.sleep(0.3)
        deliveries = list(Delivery.objects.select_related("notice"))
        assert deliveries and {d.status for d in deliveries} == {"sent"}, [(d.status, d.error) for d in deliveries]
        assert sorted(d.attempts for d in deliveries)[-1] == 2  # the one that met the 500
        assert len(webhook.bodies) == len(deliveries) + 1
        names = {d.notice.name for d in deliveries}
        assert {key(REPORT_CLAIM), key(LLM_FINETUNE)} <= names
        assert all(body["text"].startswith("*[Claimline] demo:") for body in webhook.bodies)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_demo_notices_in_chromium(live_server: Any, platform_receivers: WebhookReceiver, demo_history: Any) -> None:
    """What the admin sees after the demo's collections: each notice once, delivered to the webhook and e-mail."""
    import os

    from tests.browser import chromium_page, sign_in

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    call_command("ensure-demo-users")
    with chromium_page() as page:
        sign_in(page, live_server.url, "admin", "claimline-demo")
        page.goto(live_server.url + "/c/demo/notices/")
        rows = page.get_by_test_id("notice")
        rows.first.wait_for()
        by_subject = {}
        for i in range(rows.count()):
            cells = rows.nth(i).locator("td").all_inner_texts()
            by_subject[cells[2].strip()] = cells
        report, finetune = by_subject[key(REPORT_CLAIM)], by_subject[key(LLM_FINETUNE)]
        # the reason's code, with its label beside it
        assert (report[1], report[3]) == ("leak", "orphaned-allocation every consumer is finished or gone")
        assert (finetune[1], finetune[3]) == ("pending-pod", "selector-unsatisfiable no device matches the selectors")
        for cells in (report, finetune):
            assert cells[5].count("sent") == 2, cells  # the webhook and the e-mail receiver
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        assert page.errors == []  # type: ignore[attr-defined]
    assert len(platform_receivers.about(key(REPORT_CLAIM))) == 1
    assert len([m for m in mail.outbox if key(LLM_FINETUNE) in m.subject]) == 1
