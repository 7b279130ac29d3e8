"""The in-cluster manifests grant exactly what the collector reads, read-only; the kustomizations render
hardened, probed Pods; the alert rules and the Grafana dashboard only query metrics Claimline exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from django.test import Client

from collector.kinds import RESOURCE_TYPES

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MONITORING = DEPLOY / "monitoring"
METRIC = re.compile(r"\bclaimline_\w+")
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")
SEVERITIES = {"info", "warning", "critical"}
SECRET_KEYS = ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "CLAIMLINE_METRICS_TOKEN")


def test_cluster_role_is_read_only_and_exact() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource)
                granted.add((group, resource))
    assert ("", "secrets") not in granted
    assert granted == {(rt.group, rt.plural) for rt in RESOURCE_TYPES}


# --- the metric names the rules and the dashboard query ---------------------------------------------


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "claimline-rules.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def _dashboard_queries() -> list[str]:
    dashboard = _dashboard()
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def _exported(types: dict[str, str], name: str) -> bool:
    if name in types:
        return True
    family = HISTOGRAM_SUFFIX.sub("", name)
    return family != name and types.get(family) == "histogram"


@pytest.fixture
def exported_types(demo_history: Any, admin_client: Client) -> dict[str, str]:
    """Every family /metrics declares on the demo story, with its TYPE."""
    text = admin_client.get("/metrics").content.decode()
    return dict(line[len("# TYPE ") :].split(" ") for line in text.splitlines() if line.startswith("# TYPE "))


@pytest.mark.django_db
def test_rules_and_dashboard_query_only_exported_metrics(exported_types: dict[str, str]) -> None:
    used: dict[str, set[str]] = {
        "rules": {m for rule in _rules() for m in METRIC.findall(rule["expr"])},
        "dashboard": {m for query in _dashboard_queries() for m in METRIC.findall(query)},
    }
    for where, names in used.items():
        unknown = sorted(n for n in names if not _exported(exported_types, n))
        assert not unknown, f"{where} query metrics Claimline does not export: {unknown}"
    # What a platform team asked to be alerted on: stale or failing collection, leaks, long waits,
    # failing preparation on a node, inventory warnings.
    assert {
        "claimline_as_of_timestamp_seconds",
        "claimline_collection_failures_since_success",
        "claimline_flagged_device_seconds",
        "claimline_flagged_devices",
        "claimline_pending_pod_max_age_seconds",
        "claimline_preparation_failed_claims",
        "claimline_inventory_warnings",
    } <= used["rules"]
    assert {
        "claimline_model_devices_advertised",
        "claimline_model_devices_allocated",
        "claimline_pending_pods",
        "claimline_flagged_device_seconds",
        "claimline_preparation_failed_claims",
        "claimline_preparation_failures_total",
        "claimline_as_of_timestamp_seconds",
        "claimline_collection_last_run_status",
    } <= used["dashboard"]


def test_metric_name_check_catches_a_typo() -> None:
    types = {"claimline_claims": "gauge", "claimline_preparation_seconds": "histogram"}
    assert _exported(types, "claimline_preparation_seconds_bucket")
    assert not _exported(types, "claimline_claims_count")  # not a histogram
    assert not _exported(types, "claimline_claim")


def test_rules_file_is_valid() -> None:
    rules = _rules()
    assert len({r["alert"] for r in rules}) == len(rules), "alert names repeat"
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        promql_parser.parse(rule["expr"])  # raises ValueError on a syntax error or an unknown function


def test_promql_parser_rejects_what_promtool_would() -> None:
    for bad in ("max(claimline_claims", 'claimline_claims{state="ok"', "rate(claimline_claims[5m]", "nope(x)"):
        with pytest.raises(ValueError):
            promql_parser.parse(bad)


def test_dashboard_queries_parse() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for query in _dashboard_queries():
        if query.startswith("label_values("):
            continue  # Grafana's own function, not PromQL
        promql_parser.parse(query.replace("$cluster", "this"))


def _promtool() -> str:
    """Debian's prometheus package has it (scripts/test installs it when absent)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return promtool


def test_promtool_checks_the_rules() -> None:
    out = subprocess.run(
        [_promtool(), "check", "rules", str(MONITORING / "claimline-rules.yaml")],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in out.stdout


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    """deploy/monitoring/tests/: the alerts fire per namespace, with the values, summaries and links
    (absolute, read from claimline_dashboard_info) they are meant to have."""
    out = subprocess.run(
        [_promtool(), "test", "rules", str(MONITORING / "tests" / "claimline-rules.test.yaml")],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_unit_tests_fail_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The unit tests are not vacuous: a wrong link fails them."""
    text = (MONITORING / "tests" / "claimline-rules.test.yaml").read_text()
    broken = tmp_path / "broken.test.yaml"
    broken.write_text(
        text.replace("../claimline-rules.yaml", str(MONITORING / "claimline-rules.yaml")).replace(
            "retained/?namespace=batch", "retained/?namespace=elsewhere"
        )
    )
    out = subprocess.run([_promtool(), "test", "rules", str(broken)], capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "ClaimlineLeakedDevices" in out.stdout + out.stderr


def test_alerts_link_to_claimline_pages_and_route_by_namespace() -> None:
    """No placeholder such as /c/<cluster>/ in any annotation: links come from claimline_dashboard_info.
    Alerts about workloads keep the namespace label for Alertmanager to route on."""
    for rule in _rules():
        text = yaml.safe_dump(rule["annotations"])
        assert "<cluster>" not in text and "/c/" not in text, rule["alert"]
        if rule["alert"] != "ClaimlineMetricsAbsent":  # no series, nothing to read a link from
            assert "claimline_dashboard_info" in rule["annotations"]["link"], rule["alert"]
    by_name = {rule["alert"]: rule for rule in _rules()}
    for name in ("ClaimlineLeakedDevices", "ClaimlinePodsWaitingForDevices", "ClaimlinePodsStuckAfterAllocation"):
        assert "namespace" not in by_name[name]["expr"], name  # kept: nothing aggregates it away
        assert "{{ $labels.namespace }}" in by_name[name]["annotations"]["summary"], name


def _stack_group(panel: dict[str, Any], ref: str) -> str | None:
    """The stack a query's series join in a timeseries panel (None: not stacked)."""
    stacking = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {})
    for override in panel["fieldConfig"].get("overrides", ()):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "custom.stacking":
                    stacking = prop["value"]
    if stacking.get("mode", "none") == "none":
        return None
    return str(stacking.get("group", "A"))  # Grafana's default stack group


def test_no_panel_stacks_two_queries_on_each_other() -> None:
    """Devices and GPU-equivalents count the same hardware twice over (so do device-hours and
    GPU-equivalent hours): a panel showing both stacks each on its own, never one on the other."""
    for panel in _dashboard()["panels"]:
        targets = panel.get("targets", ())
        if panel["type"] != "timeseries" or len(targets) < 2:
            continue
        groups = [_stack_group(panel, t["refId"]) for t in targets]
        stacked = [g for g in groups if g is not None]
        assert len(stacked) == len(set(stacked)), (panel["id"], panel["title"], groups)


def test_namespaced_families_are_added_up_across_namespaces() -> None:
    """Pending-Pod and flagged-claim series carry a namespace: a panel by reason sums them (after
    counting the replicas once), it does not take the largest namespace's."""
    namespaced = re.compile(r"claimline_(pending_pods|flagged_(claims|devices|device_seconds|gpu_equivalent_seconds))\b")
    for query in _dashboard_queries():
        if namespaced.search(query):
            assert query.startswith("sum by ("), query
            assert "max without (instance, pod)" in query, query


def test_snapshot_age_panel_turns_orange_at_three_collection_intervals() -> None:
    """Normal age is under CLAIMLINE_COLLECT_INTERVAL (deploy/'s 30 s); Grafana's default 80 s
    threshold is gone: orange at 3 intervals (the overview's stale), red at the alert's 600 s."""
    [panel] = [p for p in _dashboard()["panels"] if p["title"] == "Snapshot age"]
    assert "claimline_snapshot_age_seconds" in panel["targets"][0]["expr"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    literals = [x for g in kustomization["configMapGenerator"] for x in g.get("literals", ())]
    interval = int(next(x.split("=", 1)[1] for x in literals if x.startswith("CLAIMLINE_COLLECT_INTERVAL=")))
    assert [(s["color"], s["value"]) for s in steps] == [("green", None), ("orange", 3 * interval), ("red", 600)]


def test_dashboard_links_back_to_claimline() -> None:
    """A hidden variable reads the cluster's page from claimline_dashboard_info (CLAIMLINE_BASE_URL),
    the dashboard links to it, and panels link to the page behind their numbers."""
    dashboard = _dashboard()
    [variable] = [v for v in dashboard["templating"]["list"] if v["name"] == "claimline_url"]
    assert variable["query"]["query"] == 'label_values(claimline_dashboard_info{cluster="$cluster"}, url)'
    assert [link["url"] for link in dashboard["links"]] == ["${claimline_url}"]
    urls = {
        panel["title"]: [link["url"] for link in panel["fieldConfig"]["defaults"].get("links", ())]
        for panel in dashboard["panels"]
        if "fieldConfig" in panel
    }
    for title, links in urls.items():
        assert links and all(u.startswith("${claimline_url}") for u in links), title
    assert "${claimline_url}retained/?namespace=${__field.labels.namespace}" in urls[
        "Devices held by flagged claims, by namespace"
    ]
    assert "${claimline_url}inventory/?node=${__field.labels.node}" in urls["Claims failing preparation by node"]


def test_prometheus_rule_carries_the_rules_file() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    plain = yaml.safe_load((MONITORING / "claimline-rules.yaml").read_text())
    assert rule["spec"]["groups"] == plain["groups"], "run scripts/render-prometheusrule"


# --- the rendered manifests -------------------------------------------------------------------------


def _kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: cannot render the kustomizations")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return _kustomize(DEPLOY)


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _templates(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "Job")}


def _pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: template["spec"] for name, template in _templates(docs).items()}


def test_base_renders_everything_in_one_namespace(base: list[dict[str, Any]]) -> None:
    kinds = sorted({d["kind"] for d in base})
    assert kinds == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Service", "Deployment",
         "Job", "NetworkPolicy"]
    )
    for doc in base:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "claimline", doc["metadata"]["name"]
    assert set(_pod_specs(base)) == {
        "claimline-web", "claimline-worker", "claimline-beat", "claimline-migrate", "claimline-watcher"
    }


def test_rendered_rbac_is_what_the_collector_reads(base: list[dict[str, Any]]) -> None:
    rbac = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    assert _one(base, "ClusterRole", "claimline-collector")["rules"] == _one(rbac, "ClusterRole", "claimline-collector")[
        "rules"
    ]
    binding = _one(base, "ClusterRoleBinding", "claimline-collector")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "claimline-collector", "namespace": "claimline"}]


def test_only_the_collectors_get_a_token(base: list[dict[str, Any]]) -> None:
    for name, spec in _pod_specs(base).items():
        if name in ("claimline-worker", "claimline-watcher"):
            assert spec["serviceAccountName"] == "claimline-collector"
            assert spec["automountServiceAccountToken"] is True
        else:
            assert spec["automountServiceAccountToken"] is False, name
            assert "serviceAccountName" not in spec, name


def test_pods_are_hardened_and_sized(base: list[dict[str, Any]]) -> None:
    config_maps = {d["metadata"]["name"] for d in base if d["kind"] == "ConfigMap"}
    for name, spec in _pod_specs(base).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in [*spec.get("initContainers", ()), *spec["containers"]]:
            where = f"{name}/{container['name']}"
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["readOnlyRootFilesystem"] is True, where
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}, where
            refs = container["envFrom"]
            assert {"secretRef": {"name": "claimline-env"}} in refs, where
            assert all(r["configMapRef"]["name"] in config_maps for r in refs if "configMapRef" in r), where


def test_commands_probes_and_migrations(base: list[dict[str, Any]]) -> None:
    specs = _pod_specs(base)
    web, worker, beat, watcher = (
        specs[f"claimline-{c}"]["containers"][0] for c in ("web", "worker", "beat", "watcher")
    )
    assert web["command"][:2] == ["gunicorn", "claimline.wsgi"]
    assert worker["command"][:4] == ["celery", "-A", "claimline", "worker"]
    assert beat["command"][:4] == ["celery", "-A", "claimline", "beat"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert web[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert "inspect ping" in " ".join(worker[probe]["exec"]["command"])
        assert "celerybeat-schedule" in " ".join(beat[probe]["exec"]["command"])
    # The watcher: watch mode by default; its liveness probe reads the files it touches on every event.
    assert watcher["command"][:3] == ["python", "manage.py", "watch"]
    alive_dir = watcher["command"][watcher["command"].index("--alive-dir") + 1]
    assert alive_dir.startswith("/tmp/") and alive_dir in " ".join(watcher["livenessProbe"]["exec"]["command"])
    config = next(d for d in base if d["kind"] == "ConfigMap")
    assert config["data"]["CLAIMLINE_COLLECT_MODE"] == "watch"
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in web["ports"]
    # One Job migrates; every Deployment waits for it.
    assert specs["claimline-migrate"]["containers"][0]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for name in ("claimline-web", "claimline-worker", "claimline-beat", "claimline-watcher"):
        assert specs[name]["initContainers"][0]["command"] == ["python", "manage.py", "migrate", "--check"]
    # Probes and scrapes reach the Pod by IP, so its IP is an allowed host, after the Secret's.
    env = [e["name"] for e in web["env"]]
    assert env.index("POD_IP") < env.index("DJANGO_ALLOWED_HOSTS")
    assert web["env"][env.index("DJANGO_ALLOWED_HOSTS")]["value"] == "$(DJANGO_ALLOWED_HOSTS),$(POD_IP)"
    beat_deployment = _one(base, "Deployment", "claimline-beat")
    assert beat_deployment["spec"]["replicas"] == 1 and beat_deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_service_reaches_the_web_pods(base: list[dict[str, Any]]) -> None:
    service = _one(base, "Service", "claimline")
    labels = _one(base, "Deployment", "claimline-web")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]


def _allowed(policies: list[dict[str, Any]], labels: dict[str, str], direction: str) -> set[tuple[str, int]]:
    """Ports a Pod with ``labels`` may use in ``direction`` (policies add up; any peer, as written here)."""
    allowed = set()
    for policy in policies:
        spec = policy["spec"]
        if not spec["podSelector"].get("matchLabels", {}).items() <= labels.items():
            continue
        for rule in spec.get(direction, ()):
            allowed |= {(p["protocol"], p["port"]) for p in rule["ports"]}
    return allowed


def test_network_policies(base: list[dict[str, Any]]) -> None:
    policies = [d for d in base if d["kind"] == "NetworkPolicy"]
    deny = _one(base, "NetworkPolicy", "claimline-default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    datastores = {("UDP", 53), ("TCP", 53), ("TCP", 5432), ("TCP", 6379)}
    apiserver = {("TCP", 443), ("TCP", 6443)}
    for name, template in _templates(base).items():
        labels = template["metadata"]["labels"]
        egress = _allowed(policies, labels, "egress")
        ingress = _allowed(policies, labels, "ingress")
        reads_api = name in ("claimline-worker", "claimline-watcher")
        assert egress == (datastores | apiserver if reads_api else datastores), name
        assert ingress == ({("TCP", 8000)} if name == "claimline-web" else set()), name


def test_monitoring_renders(base: list[dict[str, Any]]) -> None:
    docs = _kustomize(MONITORING)
    monitor = _one(docs, "ServiceMonitor", "claimline")
    service = _one(base, "Service", "claimline")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {"name": "claimline-env", "key": "CLAIMLINE_METRICS_TOKEN"}
    rule = _one(docs, "PrometheusRule", "claimline")
    assert rule["spec"]["groups"] == yaml.safe_load((MONITORING / "claimline-rules.yaml").read_text())["groups"]
    dashboard = _one(docs, "ConfigMap", "claimline-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["claimline.json"]) == _dashboard()
    assert {d["metadata"]["namespace"] for d in docs} == {"claimline"}


def test_readme_documents_the_secret() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert "claimline-env" in readme
    for key in SECRET_KEYS:
        assert key in readme, key
    assert "kubectl apply -k deploy/" in readme and "kubectl apply -k deploy/monitoring/" in readme


@pytest.mark.django_db
def test_metrics_and_healthz_answer_plain_http_in_production(settings: Any) -> None:
    # In the cluster, kubelet probes and Prometheus talk plain HTTP to the Pod; the rest redirects to HTTPS.
    settings.SECURE_SSL_REDIRECT = True
    settings.CLAIMLINE_METRICS_TOKEN = "t0ken"
    client = Client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").status_code != 301
    assert client.get("/api/leaks").status_code == 301
