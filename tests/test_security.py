"""Hardening: deploy checks, CSP, CSRF, and hostile cluster data rendered inert."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from demo import builders as b
from demo.story import DEMO_BASE

ROOT = Path(__file__).resolve().parents[1]


def test_check_deploy_is_clean_with_production_settings(tmp_path: Path) -> None:
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for Playwright; production never does.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": "k" * 10 + "9f3Jq!x0Lz@VbN7rT2mW#cY5uH8eD1sA4gK6pQ_Zo-Ri+Xe",
        "DJANGO_ALLOWED_HOSTS": "claimline.example.com",
        "CLAIMLINE_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.django_db
def test_pages_send_a_strict_csp_and_login_needs_csrf(admin_client: Client, demo_history: Any) -> None:
    csp = admin_client.get("/c/demo/")["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp and "object-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    csrf_client = Client(enforce_csrf_checks=True)
    assert csrf_client.post("/accounts/login/", {"username": "x", "password": "y"}).status_code == 403
    page = Client().get("/accounts/login/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page


@pytest.mark.django_db
def test_hostile_cluster_data_renders_inert(admin_client: Client, tmp_path: Path) -> None:
    script = "<script>alert(1)</script>"
    pod = b.pod("team-a", "evil", DEMO_BASE, claims=[("gpu", {"claim": "evil-claim"})], phase="Pending")
    pod["metadata"]["labels"] = {"x": script}
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": script + "A" * 100_000,
         "lastTransitionTime": "2026-11-20T11:00:00Z"}
    ]
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(200):
        node["x"] = {}
        node = node["x"]
    claim = b.claim("team-a", "evil-claim", [b.request(selectors=[f"'{script}' == device.driver"])], DEMO_BASE)
    claim["metadata"]["annotations"] = {"deep": str(deep), "huge": "B" * 200_000}
    claim["spec"]["devices"]["config"] = [{"opaque": {"driver": "x", "parameters": deep}}]
    event = b.event(pod, "FailedScheduling", script, DEMO_BASE)
    (tmp_path / "evil.json").write_bytes(b.dump_json([pod, claim, event, b.device_class(), b.namespace("team-a")]))
    call_command("import-snapshot", str(tmp_path / "evil.json"), "--at", DEMO_BASE.isoformat())
    from collector.models import ObjectVersion

    uid = ObjectVersion.objects.get(kind="ResourceClaim").uid
    for url in ["/c/demo/", f"/c/demo/claims/{uid}/", "/c/demo/pods/team-a/evil/", "/c/demo/audit/",
                "/c/demo/retained/", "/c/demo/inventory/"]:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert script not in response.content.decode(), url
    explained = admin_client.get("/api/explain", {"pod": "team-a/evil"})
    assert explained.status_code == 200
    assert explained["Content-Type"] == "application/json"
