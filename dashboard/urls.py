"""The dashboard's pages and APIs (the project's URLs, ``claimline.urls``, include them)."""

from django.urls import path
from django.views.generic import RedirectView

from dashboard import api, diagnosis_views, notice_views, overview_views, report_views, views

urlpatterns = [
    path("", overview_views.home, name="home"),
    path("c/<slug:cluster>/", overview_views.cluster_overview, name="overview"),
    # No trailing slash: ``claims/<uid>/`` are the claims themselves.
    path("c/<slug:cluster>/claims", views.claims, name="claims"),
    path("c/<slug:cluster>/claims/", RedirectView.as_view(pattern_name="claims", query_string=True)),
    path("c/<slug:cluster>/claims/<str:uid>/", views.claim_detail, name="claim"),
    path("c/<slug:cluster>/snapshots/", views.snapshots, name="snapshots"),
    path("c/<slug:cluster>/search", diagnosis_views.search, name="search"),
    path("c/<slug:cluster>/pods/", diagnosis_views.pods, name="pods"),
    path("c/<slug:cluster>/pods/<str:namespace>/<str:name>/", diagnosis_views.pod, name="pod"),
    path("c/<slug:cluster>/playground/", diagnosis_views.playground, name="playground"),
    path("c/<slug:cluster>/retained/", report_views.leaks, name="leaks"),
    path("c/<slug:cluster>/review/", report_views.review, name="review"),
    path("c/<slug:cluster>/review.csv", report_views.review_csv, name="review-csv"),
    path("c/<slug:cluster>/inventory/", report_views.inventory, name="inventory"),
    path("c/<slug:cluster>/classes/", report_views.device_classes, name="classes"),
    # A pool name is DNS subdomains separated by slashes (node-1/gpus): it takes every segment but the
    # last, the device's name (a DNS label, no slash), so the split is never ambiguous.
    path("c/<slug:cluster>/devices/<str:driver>/<path:pool>/<str:name>/", report_views.device, name="device"),
    path("c/<slug:cluster>/audit/", report_views.audit_page, name="audit"),
    path("c/<slug:cluster>/notices/", notice_views.notices, name="notices"),
    path("api/snapshots", api.api_snapshots, name="api-snapshots"),
    path("api/explain", api.api_explain, name="api-explain"),
    path("api/match-devices", api.api_match_devices, name="api-match-devices"),
    path("api/leaks", api.api_leaks, name="api-leaks"),
    path("api/audit", api.api_audit, name="api-audit"),
    path("metrics", api.metrics, name="metrics"),
    path("api/claims", api.api_claims, name="api-claims"),
    path("healthz", views.healthz, name="healthz"),
]
