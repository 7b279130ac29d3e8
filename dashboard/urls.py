from django.contrib import admin
from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.home, name="home"),
    path("c/<slug:cluster>/", views.claims, name="claims"),
    path("c/<slug:cluster>/claims/<str:uid>/", views.claim_detail, name="claim"),
    path("c/<slug:cluster>/snapshots/", views.snapshots, name="snapshots"),
    path("api/snapshots", views.api_snapshots, name="api-snapshots"),
    path("api/claims", views.api_claims, name="api-claims"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
