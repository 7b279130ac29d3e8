"""The project package: settings, URLs, WSGI/ASGI, the Celery app, and the pipeline that runs
collection, derivation and notices in that order (``claimline.pipeline``).

The Celery app is loaded with Django, as Celery's Django guide does it, so that ``shared_task``
declarations everywhere bind to it.
"""

from claimline.celery import app as celery_app

__all__ = ("celery_app",)
