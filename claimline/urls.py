"""The project's URLs: the dashboard's pages and APIs (notices' page among them), sign-in, the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("", include("dashboard.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]

# Production (DEBUG off): the product's 404 page; with DEBUG on, dashboard.middleware.NotFoundPageMiddleware.
handler404 = "dashboard.middleware.not_found"
