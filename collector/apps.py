from django.apps import AppConfig


class CollectorConfig(AppConfig):
    name = "collector"
    verbose_name = "Cluster history"

    def ready(self) -> None:
        from collector.gcpause import collect_less_often

        collect_less_often()
