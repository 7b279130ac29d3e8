"""Django settings, all read from the environment (see README.md, "Configuration")."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from claimline.config import env_base_url, env_bool, env_float, env_int, env_list, secret_key
from collector.sources import parse_clusters

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CLAIMLINE_VAR_DIR", BASE_DIR / "var"))

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = secret_key(os.environ, DEBUG, VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])

try:
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'claimline.sqlite3'}",
            conn_max_age=60,
            # A connection kept across requests is checked before a request uses it: after a database
            # restart each worker reconnects instead of answering one 500 on its dead connection.
            conn_health_checks=True,
        )
    }
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL, got {REDIS_URL!r}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "collector",
    "access",
    "dashboard",
    "derived",
    "notify",
    "claimline",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dashboard.middleware.TrustedProxyHeaderMiddleware",
    "dashboard.middleware.SignInRequiredMiddleware",
    # A picked time redirected to RFC 3339, and a past time's links keeping it (after sign-in: none for strangers).
    "dashboard.time_travel.AsOfLinksMiddleware",
    "dashboard.middleware.ContentSecurityPolicyMiddleware",
    # After sign-in (an anonymous asker is sent to sign in first) and inside the CSP (its 400 pages get one).
    "dashboard.middleware.BadRequestMiddleware",
    # Inside the CSP too; its process_exception answers a view's Http404 before Django's (debug) page would.
    "dashboard.middleware.NotFoundPageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "claimline.urls"
WSGI_APPLICATION = "claimline.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.time_travel.picker",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
import plotly  # noqa: E402 - its bundled plotly.min.js is served as a static file

STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Production (DJANGO_DEBUG=false) assumes HTTPS, usually terminated by a proxy that sets X-Forwarded-Proto.
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_SSL_REDIRECT = not DEBUG
# Probes and Prometheus talk plain HTTP to the Pod inside the cluster (deploy/); /metrics still needs its token.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 0 if DEBUG else env_int("CLAIMLINE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "claimline": {"handlers": ["console"], "level": os.environ.get("CLAIMLINE_LOG_LEVEL", "INFO")},
    },
}

# --- Claimline's own settings -------------------------------------------------
# Members of this group (and superusers) are platform admins: every namespace, opaque device config.
CLAIMLINE_ADMIN_GROUP = os.environ.get("CLAIMLINE_ADMIN_GROUP", "platform-admins")
# Sign-in by an SSO/OIDC proxy's header (e.g. X-Forwarded-User); off unless set.
CLAIMLINE_TRUSTED_USER_HEADER = os.environ.get("CLAIMLINE_TRUSTED_USER_HEADER", "")
CLAIMLINE_TRUSTED_GROUPS_HEADER = os.environ.get("CLAIMLINE_TRUSTED_GROUPS_HEADER", "")
CLAIMLINE_TRUSTED_PROXIES = env_list("CLAIMLINE_TRUSTED_PROXIES", ["127.0.0.1", "::1"])
# Prometheus scrapes /metrics with "Authorization: Bearer <token>"; empty: only signed-in admins.
CLAIMLINE_METRICS_TOKEN = os.environ.get("CLAIMLINE_METRICS_TOKEN", "")
# Plotly sets inline styles on its SVG; no script runs inline.
CLAIMLINE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
if CLAIMLINE_TRUSTED_USER_HEADER:
    AUTHENTICATION_BACKENDS.insert(0, "django.contrib.auth.backends.RemoteUserBackend")
CLAIMLINE_KUBECONFIG = os.environ.get("CLAIMLINE_KUBECONFIG") or None
CLAIMLINE_CLUSTERS = parse_clusters(os.environ.get("CLAIMLINE_CLUSTERS", "demo=demo"), CLAIMLINE_KUBECONFIG)
CLAIMLINE_COLLECT_INTERVAL = env_int("CLAIMLINE_COLLECT_INTERVAL", 30, minimum=1)
CLAIMLINE_PAGE_SIZE = env_int("CLAIMLINE_PAGE_SIZE", 500, minimum=1)
CLAIMLINE_REQUEST_TIMEOUT = env_float("CLAIMLINE_REQUEST_TIMEOUT", 30.0, minimum=0.1)
CLAIMLINE_MAX_RETRIES = env_int("CLAIMLINE_MAX_RETRIES", 3, minimum=0)
# How many recently read snapshots each web process keeps loaded (0: none).
# A selector someone types (playground, /api/match-devices, match-devices): seconds of CEL evaluation per
# request, and the memory a forked evaluation of a dear one may take (domain/allocator/limits.py).
CLAIMLINE_SELECTOR_SECONDS = env_float("CLAIMLINE_SELECTOR_SECONDS", 2.0, minimum=0.1)
CLAIMLINE_SELECTOR_MEMORY_MB = env_int("CLAIMLINE_SELECTOR_MEMORY_MB", 512, minimum=64)
CLAIMLINE_HISTORY_CACHE = env_int("CLAIMLINE_HISTORY_CACHE", 2, minimum=0)
# in-process: `manage.py serve` runs collections in a thread (the embedded default);
# celery: beat schedules them and the web process only reads.
# An import may be dated at most this many seconds ahead of this host's clock: history only moves forward,
# so a snapshot from the future would stop every collection until then.
CLAIMLINE_CLOCK_SKEW = env_int("CLAIMLINE_CLOCK_SKEW", 60, minimum=0)
CLAIMLINE_SCHEDULER = os.environ.get("CLAIMLINE_SCHEDULER", "in-process")
if CLAIMLINE_SCHEDULER not in ("in-process", "celery"):
    raise ImproperlyConfigured(f"CLAIMLINE_SCHEDULER must be 'in-process' or 'celery', got {CLAIMLINE_SCHEDULER!r}")
# watch: list once, then watch (`manage.py watch`, or the in-process scheduler of `serve`); poll: a
# complete collection every CLAIMLINE_COLLECT_INTERVAL. Celery beat's periodic collection stays as a
# fallback either way: it skips a cluster a watcher holds (the same Redis lock).
CLAIMLINE_COLLECT_MODE = os.environ.get("CLAIMLINE_COLLECT_MODE", "watch")
if CLAIMLINE_COLLECT_MODE not in ("watch", "poll"):
    raise ImproperlyConfigured(f"CLAIMLINE_COLLECT_MODE must be 'watch' or 'poll', got {CLAIMLINE_COLLECT_MODE!r}")
# A watch's server-side timeoutSeconds (each is jittered up to twice as long); a batch of changes is
# written this many seconds after its first change, or after this many events, never waiting for the
# derivation (the next one covers every batch stored meanwhile). While nothing changes, an empty
# snapshot every CLAIMLINE_COLLECT_INTERVAL says the cluster was seen (pages read its age).
CLAIMLINE_WATCH_TIMEOUT = env_int("CLAIMLINE_WATCH_TIMEOUT", 300, minimum=1)
CLAIMLINE_WATCH_BATCH_SECONDS = env_float("CLAIMLINE_WATCH_BATCH_SECONDS", 1.0, minimum=0.0)
CLAIMLINE_WATCH_BATCH_EVENTS = env_int("CLAIMLINE_WATCH_BATCH_EVENTS", 1000, minimum=1)
# A page about now reads the newest derived snapshot while the derivation catches up with the newest
# stored one, when it is at most this many seconds older (derived.current); else history answers.
CLAIMLINE_READ_DERIVED_WITHIN = env_int("CLAIMLINE_READ_DERIVED_WITHIN", 120, minimum=0)
# The watcher's hold on a cluster (a Redis lock, renewed every third of this): a replica that dies is
# replaced by a standby after at most this long.
CLAIMLINE_WATCH_LEASE = env_int("CLAIMLINE_WATCH_LEASE", 30, minimum=3)
# Touched on every event, bookmark and list page (one file per watched cluster in this directory);
# a liveness probe fails the watcher when none is fresh.
CLAIMLINE_WATCH_ALIVE_DIR = Path(os.environ.get("CLAIMLINE_WATCH_ALIVE_DIR", VAR_DIR / "watch"))

# Leak thresholds, in seconds (DESIGN.md defaults).
CLAIMLINE_ORPHANED_AFTER = env_int("CLAIMLINE_ORPHANED_AFTER", 15 * 60)
CLAIMLINE_STUCK_DELETION_AFTER = env_int("CLAIMLINE_STUCK_DELETION_AFTER", 15 * 60)
CLAIMLINE_UNRESERVED_AFTER = env_int("CLAIMLINE_UNRESERVED_AFTER", 60 * 60)
CLAIMLINE_FAILING_POD_AFTER = env_int("CLAIMLINE_FAILING_POD_AFTER", 6 * 60 * 60)

# Celery (see claimline/celery.py).
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker outlives a Redis restart or outage however long: it retries connecting forever (Celery's
# default gives up after 100 attempts, ~50 minutes), at start-up too.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Every Redis call waits at most this long (seconds): a Redis that accepts connections but never
# answers (a partition, a stopped VM) must not hang a collection, an import or a worker.
CLAIMLINE_REDIS_TIMEOUT = env_float("CLAIMLINE_REDIS_TIMEOUT", 5.0, minimum=0.1)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": CLAIMLINE_REDIS_TIMEOUT,
    "socket_connect_timeout": CLAIMLINE_REDIS_TIMEOUT,
    "socket_keepalive": True,
}
# Queueing a task (derivation, notice scan) tries twice, then the caller falls back (derived/pipeline.py,
# notify/tasks.py): at most ~2 × CLAIMLINE_REDIS_TIMEOUT, instead of four tries.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
CLAIMLINE_COLLECT_LOCK_TIMEOUT = env_int("CLAIMLINE_COLLECT_LOCK_TIMEOUT", 600, minimum=1)
CLAIMLINE_RETENTION_DAYS = env_int("CLAIMLINE_RETENTION_DAYS", 90, minimum=1)
# Derive every stored snapshot's Pod explanations right after it is written (the derived
# layer pages read); off, pages derive on every read as before.
CLAIMLINE_DERIVE = env_bool("CLAIMLINE_DERIVE", True)
# After a snapshot that changed nothing, /metrics is rendered again only once the stored text is
# this old (seconds): what moves with time alone there (inventory ages, leak hours) moves slowly,
# and rendering costs seconds at thousands of nodes. Its claimline_as_of_timestamp_seconds says
# which snapshot it describes; keep this well under the staleness alert's 600 s.
CLAIMLINE_METRICS_REFRESH = env_int("CLAIMLINE_METRICS_REFRESH", 120, minimum=0)
# /metrics' pending-Pod and flagged-claim families name this many namespaces (those with the most),
# adding up the rest as namespace="(other)": bounded series for Alertmanager to route on.
CLAIMLINE_METRICS_NAMESPACES = env_int("CLAIMLINE_METRICS_NAMESPACES", 20, minimum=0)
# The current week's stored review is rendered at most this often, and stands meanwhile even after
# changes: a week's figures move little in minutes, and at thousands of nodes a rendering costs seconds.
CLAIMLINE_REVIEW_REFRESH = env_int("CLAIMLINE_REVIEW_REFRESH", 600, minimum=0)
# After a snapshot that changed nothing (a quiet checkpoint), the stored overview stands for it until it
# is this old (seconds): its flagged hours and chart move with time alone, slowly, and rendering it costs
# over a second at thousands of nodes. The page says when those figures were computed.
CLAIMLINE_OVERVIEW_REFRESH = env_int("CLAIMLINE_OVERVIEW_REFRESH", 300, minimum=0)

# Notices (notify/, README.md "Notifications"): the platform's receivers get every notice;
# teams' receivers are edited in the admin.
CLAIMLINE_NOTIFY_WEBHOOK_URL = os.environ.get("CLAIMLINE_NOTIFY_WEBHOOK_URL", "")
CLAIMLINE_NOTIFY_WEBHOOK_FORMAT = os.environ.get("CLAIMLINE_NOTIFY_WEBHOOK_FORMAT", "json")
if CLAIMLINE_NOTIFY_WEBHOOK_FORMAT not in ("json", "slack"):
    raise ImproperlyConfigured(
        f"CLAIMLINE_NOTIFY_WEBHOOK_FORMAT must be 'json' or 'slack', got {CLAIMLINE_NOTIFY_WEBHOOK_FORMAT!r}"
    )
CLAIMLINE_NOTIFY_EMAILS = env_list("CLAIMLINE_NOTIFY_EMAILS", [])
CLAIMLINE_NOTIFY_PENDING_AFTER = env_int("CLAIMLINE_NOTIFY_PENDING_AFTER", 30 * 60)
CLAIMLINE_NOTIFY_FAILED_COLLECTIONS = env_int("CLAIMLINE_NOTIFY_FAILED_COLLECTIONS", 3, minimum=1)
# A collection that changed nothing is scanned anyway once the last scan is this old (seconds):
# thresholds are crossed by time passing alone.
CLAIMLINE_NOTIFY_RESCAN_AFTER = env_int("CLAIMLINE_NOTIFY_RESCAN_AFTER", 10 * 60)
CLAIMLINE_NOTIFY_TIMEOUT = env_float("CLAIMLINE_NOTIFY_TIMEOUT", 10.0, minimum=0.1)
# A delivery that fails on the network (unreachable, timeout, 5xx/429) is tried again after
# CLAIMLINE_NOTIFY_RETRY_FIRST seconds, doubling up to CLAIMLINE_NOTIFY_RETRY_MAX (less up to a quarter,
# at random, so receivers coming back are not hit all at once), until it is CLAIMLINE_NOTIFY_GIVE_UP_AFTER
# seconds old: retries span an outage of hours, and outlive a worker restart (they are kept in the database).
CLAIMLINE_NOTIFY_RETRY_FIRST = env_float("CLAIMLINE_NOTIFY_RETRY_FIRST", 30.0, minimum=0.1)
CLAIMLINE_NOTIFY_RETRY_MAX = env_float("CLAIMLINE_NOTIFY_RETRY_MAX", 3600.0, minimum=0.1)
CLAIMLINE_NOTIFY_GIVE_UP_AFTER = env_int("CLAIMLINE_NOTIFY_GIVE_UP_AFTER", 24 * 3600, minimum=1)
# Also give up after this many attempts (0: no limit but CLAIMLINE_NOTIFY_GIVE_UP_AFTER).
CLAIMLINE_NOTIFY_MAX_ATTEMPTS = env_int("CLAIMLINE_NOTIFY_MAX_ATTEMPTS", 0, minimum=0)
# The dashboard's public URL (e.g. https://claimline.example.com): links in e-mails, notices and alert
# annotations (through /metrics' claimline_dashboard_info) are absolute when it is set.
# CLAIMLINE_PUBLIC_URL, its former name, is still read when it is unset.
CLAIMLINE_BASE_URL = env_base_url("CLAIMLINE_BASE_URL", fallback="CLAIMLINE_PUBLIC_URL")
CLAIMLINE_REVIEW_EMAILS = env_list("CLAIMLINE_REVIEW_EMAILS", [])

# E-mail (notices and the weekly review): Django's settings, from the environment.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", default=False)
# A mail server that accepts connections but never answers must not hold a worker forever.
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "claimline@localhost")
