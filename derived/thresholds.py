"""The leak thresholds the settings configure, as the domain's ``Thresholds``."""

from __future__ import annotations

from django.conf import settings

from domain.reports.leaks import Thresholds


def leak_thresholds() -> Thresholds:
    return Thresholds(
        orphaned=settings.CLAIMLINE_ORPHANED_AFTER,
        stuck_deletion=settings.CLAIMLINE_STUCK_DELETION_AFTER,
        unreserved=settings.CLAIMLINE_UNRESERVED_AFTER,
        held_by_failing_pod=settings.CLAIMLINE_FAILING_POD_AFTER,
    )
