from django.apps import AppConfig


class DerivedConfig(AppConfig):
    name = "derived"
    verbose_name = "Derived verdicts"
