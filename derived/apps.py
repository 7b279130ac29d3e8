from django.apps import AppConfig


class DerivedConfig(AppConfig):
    name = "derived"
    verbose_name = "Derived verdicts"

    def ready(self) -> None:
        from collector.recent_history import read_now_with
        from derived.current import newest_readable

        read_now_with(newest_readable)
