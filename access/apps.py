from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Who may see what: namespaces granted to groups, and the scope a signed-in user reads with."""

    name = "access"
    verbose_name = "Access"
