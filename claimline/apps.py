from django.apps import AppConfig


class ClaimlineConfig(AppConfig):
    """The project as an app: its management commands run the pipeline (collect, import-snapshot, serve)."""

    name = "claimline"
    verbose_name = "Claimline"
