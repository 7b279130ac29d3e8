"""Issue 20 item 7: evidence, codes and times read as words on the pages; the product's 404 page.

Signed in as the platform admin and as alice (team ml-training, sees only that namespace), over the
demo story's stored history. Presentation only: the JSON documents keep their fields and codes.
"""

from __future__ import annotations

import html
import re
from collections import deque

import pytest
from django.test import Client, override_settings

from collector.models import ObjectVersion
from dashboard import charts
from dashboard.wording import CODE_LABELS, describe_evidence, to_the_second

PYTHON_REPR = re.compile(r"[\[{]'|': |\[\]|\{\}")
FRACTION = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\.\d+")  # a PCI bus ID 0000:18:00.0 is no time
OWN_POD = "ml-training/jupyter-alice-0"
WAITING_POD = "ml-training/h100-bench-7r2mx"


@pytest.fixture
def clients(demo_clients: dict[str, Client]) -> dict[str, Client]:
    return demo_clients


def _evidence(page: str) -> list[str]:
    """Every evidence entry's text, as a reader sees it."""
    items = re.findall(r'<ul class="evidence">(.*?)</ul>', page, re.DOTALL)
    return [
        html.unescape(re.sub(r"<[^>]+>", "", li)).strip()
        for ul in items
        for li in re.findall(r"<li>(.*?)</li>", ul, re.DOTALL)
    ]


def _visible(page: str) -> str:
    """The page without its scripts (chart data) and tags: what a reader sees."""
    page = re.sub(r"<script.*?</script>", "", page, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _pod_page(client: Client, pod: str, **query: str) -> str:
    response = client.get(f"/c/demo/pods/{pod}/", query)
    assert response.status_code == 200
    return response.content.decode()


# --- evidence in words -----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_evidence_reads_as_sentences_not_python_reprs(clients: dict[str, Client], who: str) -> None:
    page = _pod_page(clients[who], OWN_POD)
    entries = _evidence(page)
    assert entries and not [e for e in entries if PYTHON_REPR.search(e)]
    uid = clients["admin"].get("/api/explain", {"pod": OWN_POD}).json()["pod"]["uid"]
    assert f"Reserved for Pod {OWN_POD} (uid {uid})" in entries
    assert any(re.fullmatch(r"Container main: running since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", e) for e in entries)
    assert any(e.startswith("Pod condition PodScheduled = True · since ") for e in entries)


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_the_device_search_summary_is_explained_in_words(clients: dict[str, Client], who: str) -> None:
    entries = _evidence(_pod_page(clients[who], WAITING_POD))
    [summary] = [e for e in entries if e.startswith("Device search Request gpu")]
    assert "short 1" not in summary and "picked []" not in summary
    assert "1 free but short of shared counters or capacity other claims hold" in summary
    assert "0 held by other claims" in summary and "0 with taints it does not tolerate" in summary
    assert summary.endswith(
        "none picked — enough devices match, but other claims hold them or the shared counters or capacity they need."
    )


@pytest.mark.django_db
def test_a_finished_container_says_its_exit_code(clients: dict[str, Client]) -> None:
    # The Job's Pod that finished while its claim (batch/report-gpu, flagged) still holds gpu-5.
    [name] = set(
        ObjectVersion.objects.filter(kind="Pod", namespace="batch", name__startswith="nightly-report-").values_list(
            "name", flat=True
        )
    )
    entries = _evidence(_pod_page(clients["admin"], f"batch/{name}"))
    assert any(re.fullmatch(r"Container main: terminated: exit code 0, Completed at \S+Z", e) for e in entries)
    assert not [e for e in entries if PYTHON_REPR.search(e)]


def test_unknown_and_odd_evidence_still_reads_as_fields() -> None:
    assert describe_evidence({"kind": "Novel", "a": [{"x": 1}], "b": None, "c": True}) == (
        "Novel",
        "a x 1 · b — · c yes",
    )
    # A known kind with fields of the wrong shape falls back to its fields instead of failing the page.
    what, said = describe_evidence({"kind": "ContainerState", "container": "main", "state": "odd"})
    assert what == "Container" and "no state reported" in said
    what, said = describe_evidence(
        {
            "kind": "ContainerState",
            "container": "c",
            "state": {"waiting": {"reason": "ImagePullBackOff"}},
            "restartCount": 2,
        }
    )
    assert said == "c: waiting: ImagePullBackOff · 2 restarts"


# --- codes with labels -----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_codes_keep_their_code_and_gain_a_label(clients: dict[str, Client], who: str) -> None:
    pod = _pod_page(clients[who], WAITING_POD)
    assert (
        '<code class="reason">devices-in-use</code> <span class="code-label" data-testid="verdict-label">'
        f"{CODE_LABELS['devices-in-use']}</span>" in pod
    )
    assert f'<code>devices-in-use</code> <span class="code-label">{CODE_LABELS["devices-in-use"]}</span>' in pod
    checks = pod.split('data-testid="device-checks"', 1)[1].split("</table>", 1)[0]
    assert f'<code>short</code> <span class="code-label">{CODE_LABELS["short"]}</span>' in checks
    audit = clients[who].get("/c/demo/audit/").content.decode()
    overview = clients[who].get("/c/demo/").content.decode()
    kind = "admin-access-namespace" if who == "admin" else "device-taint-rule"
    assert f'<code>{kind}</code> <span class="code-label">{CODE_LABELS[kind]}</span>' in audit
    assert f'<span class="code-label">— {CODE_LABELS[kind]}</span>' in overview
    if who == "admin":
        retained = clients[who].get("/c/demo/retained/").content.decode()
        label = CODE_LABELS["orphaned-allocation"]
        assert f'<code>orphaned-allocation</code> <span class="code-label">{label}</span>' in retained


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_json_keeps_the_codes_and_fields(clients: dict[str, Client], who: str) -> None:
    doc = clients[who].get("/api/explain", {"pod": WAITING_POD}).json()
    assert doc["verdict"]["reason"] == "devices-in-use"
    [summary] = [e for e in doc["claims"][0]["boundaries"]["allocation"]["evidence"] if "stage" in e]
    assert (summary["short"], summary["tainted"], summary["picked"]) == (1, 0, [])


# --- times to the second ---------------------------------------------------------------------------


def _crawl(client: Client, start: str = "/c/demo/", limit: int = 400) -> dict[str, str]:
    seen: dict[str, str] = {}
    todo = deque([start])
    while todo and len(seen) < limit:
        url = todo.popleft()
        if url in seen:
            continue
        response = client.get(url)
        seen[url] = response.content.decode() if response.status_code == 200 else ""
        for link in re.findall(r'href="(/c/demo/[^"#]*)"', seen[url]):
            link = html.unescape(link)
            if not any(x in link for x in ("print=1", ".csv", "as_of=", "week=", "page=")) and link not in seen:
                todo.append(link)
    return seen


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_no_page_shows_fractions_of_a_second(clients: dict[str, Client], who: str) -> None:
    pages = _crawl(clients[who])
    assert len(pages) > 20
    assert any("/pods/" in url for url in pages) and any("/claims/" in url for url in pages)
    shown = {url: FRACTION.findall(_visible(body)) for url, body in pages.items()}
    assert {url: found for url, found in shown.items() if found} == {}


def test_times_lose_only_their_fraction() -> None:
    assert to_the_second("at 2026-12-01T18:19:48.712428Z and 2026-12-01 18:19:48.5+00:00") == (
        "at 2026-12-01T18:19:48Z and 2026-12-01 18:19:48+00:00"
    )
    assert to_the_second("version 1.2.3, 12:30:00") == "version 1.2.3, 12:30:00"
    series = [{"at": "2026-12-01T18:19:48.712428Z", "advertised": 1, "allocated": 0}]
    assert "18:19:48.7" not in charts.devices_over_time(series) and "2026-12-01T18:19:48Z" in charts.devices_over_time(
        series
    )


# --- charts ----------------------------------------------------------------------------------------


def test_timeline_lanes_have_their_own_colours_and_none_is_red() -> None:
    import json

    entries = [
        {"at": "2026-12-01T18:00:00Z", "boundary": b, "what": b, "source": "x"} for b in (None, "allocation", "runtime")
    ]
    fig = json.loads(charts.claim_timeline(entries))
    colours = {t["name"]: t["marker"]["color"] for t in fig["data"]}
    assert colours == {
        "pod": charts.LANE_COLOURS["pod"],
        "allocation": charts.LANE_COLOURS["allocation"],
        "runtime": charts.LANE_COLOURS["runtime"],
    }
    reds = {"#ef553b", "#b42318", "#d62728", "red"}
    assert not reds & {c.lower() for c in charts.LANE_COLOURS.values()}


def test_chart_legends_sit_above_the_plot() -> None:
    import json

    fig = json.loads(charts.devices_over_time([{"at": "2026-12-01T18:00:00Z", "advertised": 2, "allocated": 1}]))
    legend = fig["layout"]["legend"]
    assert (legend["y"], legend["yanchor"], legend["x"], legend["xanchor"]) == (1, "bottom", 1, "right")


# --- the 404 page ----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_missing_pages_are_the_products_404_in_both_modes(clients: dict[str, Client], who: str, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        for url in (
            "/c/demo/claims/no-such-uid/",
            "/c/demo/pods/research/llm-finetune/",
            "/c/demo/nowhere",
            "/nowhere/",
            "/c/no-cluster/",
        ):
            response = clients[who].get(url)
            if url == "/c/demo/pods/research/llm-finetune/" and who == "admin":
                assert response.status_code == 200  # the admin sees every team's Pods
                continue
            body = response.content.decode()
            assert response.status_code == 404, url
            assert "<title>Not found · Claimline</title>" in body and '<header class="top">' in body, url
            assert 'data-testid="not-found"' in body and "technical_404" not in body and "Traceback" not in body
            assert "Content-Security-Policy" in response.headers
            if url.startswith("/c/demo/"):
                assert 'href="/c/demo/">Overview of demo</a>' in body
            text = body.split('data-testid="not-found">', 1)[1].split("</p>", 1)[0]
            if who == "alice":
                # the same words for another team's Pod as for a name that never existed
                assert text.startswith("Nothing you may see is at this address")
            elif url == "/c/demo/claims/no-such-uid/":
                assert text == "no such claim"
        api = clients[who].get("/api/explain", {"pod": "ml-training/no-such-pod"})
        assert api.status_code == 404 and api.json()["error"].startswith("no Pod ml-training/no-such-pod")
