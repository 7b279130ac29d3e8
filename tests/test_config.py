from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from claimline.config import env_bool, env_int, secret_key
from collector.sources import ClusterSource, parse_clusters


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("false", False), ("TRUE", True), ("", False)])
def test_debug_is_strict_true_or_false(raw: str, value: bool) -> None:
    assert env_bool("DJANGO_DEBUG", False, {"DJANGO_DEBUG": raw}) is value


@pytest.mark.parametrize("raw", ["yes", "1", "on", "tru"])
def test_bad_debug_names_the_variable(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="DJANGO_DEBUG must be 'true' or 'false'"):
        env_bool("DJANGO_DEBUG", False, {"DJANGO_DEBUG": raw})


def test_bad_interval_names_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="CLAIMLINE_COLLECT_INTERVAL must be an integer"):
        env_int("CLAIMLINE_COLLECT_INTERVAL", 30, 1, {"CLAIMLINE_COLLECT_INTERVAL": "30s"})
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("CLAIMLINE_COLLECT_INTERVAL", 30, 1, {"CLAIMLINE_COLLECT_INTERVAL": "0"})


def test_clusters() -> None:
    assert parse_clusters("prod=kubeconfig:/k#ctx, lab=in-cluster,demo=demo") == [
        ClusterSource("prod", "kubeconfig", "/k", "ctx"),
        ClusterSource("lab", "in-cluster"),
        ClusterSource("demo", "demo"),
    ]
    assert parse_clusters("a=context:east", "/etc/kube") == [ClusterSource("a", "kubeconfig", "/etc/kube", "east")]


@pytest.mark.parametrize(
    ("raw", "message"),
    [("Prod=demo", "not a valid cluster name"), ("a=demo,a=demo", "listed twice"), ("a=ftp://x", "unknown source"), (",", "names no cluster")],
)
def test_bad_clusters(raw: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        parse_clusters(raw)


def test_production_secret_key_must_be_strong(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY must be at least 50"):
        secret_key({"DJANGO_SECRET_KEY": "short"}, debug=False, key_file=tmp_path / "k")
    key = secret_key({}, debug=False, key_file=tmp_path / "k")
    assert len(key) >= 50 and secret_key({}, debug=False, key_file=tmp_path / "k") == key


def test_settings_fail_at_start_up_naming_the_variable() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "DJANGO_DEBUG": "maybe"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[1], check=False,
    )
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be 'true' or 'false', got 'maybe'" in result.stderr


def test_base_url_is_absolute_without_a_trailing_slash() -> None:
    from claimline.config import env_base_url

    assert env_base_url("CLAIMLINE_BASE_URL", {}) == ""
    assert env_base_url("CLAIMLINE_BASE_URL", {"CLAIMLINE_BASE_URL": "https://c.example.com/"}) == "https://c.example.com"
    assert env_base_url("CLAIMLINE_BASE_URL", {"CLAIMLINE_BASE_URL": "http://proxy/claimline/"}) == "http://proxy/claimline"
    # The former name is read when the new one is unset; the new one wins.
    old = {"CLAIMLINE_PUBLIC_URL": "https://old.example.com"}
    assert env_base_url("CLAIMLINE_BASE_URL", old, fallback="CLAIMLINE_PUBLIC_URL") == "https://old.example.com"
    both = {**old, "CLAIMLINE_BASE_URL": "https://new.example.com"}
    assert env_base_url("CLAIMLINE_BASE_URL", both, fallback="CLAIMLINE_PUBLIC_URL") == "https://new.example.com"


@pytest.mark.parametrize("raw", ["claimline.example.com", "/c/demo", "ftp://x.example.com", "https://x.example.com/?a=1"])
def test_a_base_url_that_cannot_make_links_absolute_names_the_variable(raw: str) -> None:
    from claimline.config import env_base_url

    with pytest.raises(ImproperlyConfigured, match="CLAIMLINE_BASE_URL must"):
        env_base_url("CLAIMLINE_BASE_URL", {"CLAIMLINE_BASE_URL": raw})
