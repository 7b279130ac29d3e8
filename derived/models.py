"""The read model: what the domain derived from each snapshot, stored so a page reads rows.

Written by the collection path right after a snapshot (``derived.writer``), versioned like
``ObjectVersion``: a Pod incarnation's row is valid from the snapshot that derived it until
the first later snapshot whose derivation differs, so "as of T" is an index lookup.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from collector.models import Cluster, Snapshot

# The version of what the derivation writes: rows of another version are stale, so pages derive on
# read until rebuild-derived (or the next snapshots) writes them again. Bump it (any new string of up
# to 16 characters) with a change that alters a stored document or row, and only then: a comment or a
# refactor of the domain leaves stored rows valid. tests/test_derivation_version.py keeps the two
# together: it derives the demo story and the shared scenarios and compares a digest of every stored
# row with the one recorded for this version.
DOMAIN_VERSION = "2026-12-02.4"  # .4: PodExplanation.message


class DerivedSnapshot(models.Model):
    """A snapshot whose derivation is written: reads as of it may use the derived rows.

    A derivation covers the changes stored since the derived snapshot before it (``derived.pending``):
    a snapshot without this row (history imported before the layer existed, a watcher's batch whose
    changes the next derivation covered) is read the old way.
    """

    snapshot = models.OneToOneField(Snapshot, on_delete=models.CASCADE, primary_key=True, related_name="derived")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="derived_snapshots")
    at = models.DateTimeField(help_text="The snapshot's time (copied: the coverage checks order by it).")
    full = models.BooleanField(default=False, help_text="Every live Pod was derived, not only what changed.")
    version = models.CharField(max_length=16, help_text="DOMAIN_VERSION of the code that derived it.")
    pods_derived = models.PositiveIntegerField(default=0)
    rows_written = models.PositiveIntegerField(default=0)
    # Whether its inventory advertises a device a claim may hold part of (equivalents.held_in_part):
    # without one every allocation counts whole, and the review needs no inventory to weigh spans.
    held_in_part = models.BooleanField(default=True)
    # The stored snapshots since the derived one before that this derivation covered too (left underived).
    coalesced = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # "Is the snapshot before this one derived?" and rebuild's "where does coverage end?".
            models.Index(fields=["cluster", "-at"], name="derivedsnapshot_cluster_at"),
        ]

    def __str__(self) -> str:
        return f"derived {self.cluster_id} @ {self.at.isoformat()}"


class DocumentDictionary(models.Model):
    """A zlib preset dictionary trained on a cluster's Pod explanations (``derived.documents``).

    Never changed once written: the rows compressed with it name it, and it outlives them (a few
    KB per cluster), so retention and rebuild-derived leave it alone.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="document_dictionaries")
    content = models.BinaryField()
    trained = models.DateTimeField(help_text="The snapshot whose documents trained it.")

    def __str__(self) -> str:
        return f"document dictionary {self.pk} of cluster {self.cluster_id} ({len(self.content)} bytes)"


class PodExplanation(models.Model):
    """One Pod incarnation's explain document (``verdicts.explain_incarnation``) as of a span of snapshots.

    The sibling incarnations and the asked time are added on read. Rows for deleted
    incarnations stay open: a deleted Pod is judged as it last was, which never changes.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pod_explanations")
    pod_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    content = models.BinaryField(help_text="JSON (pod, claims, verdict, timeline), zlib against ``dictionary``.")
    # RESTRICT: a dictionary goes only with its cluster, which takes these rows with it.
    dictionary = models.ForeignKey(DocumentDictionary, null=True, on_delete=models.RESTRICT, db_index=False)
    content_hash = models.CharField(max_length=32, help_text="Of the JSON: a re-derived document is compared by it.")
    claim_uids = models.TextField(blank=True, help_text="The claims the document judged, space-separated.")
    states = models.TextField(blank=True, help_text="JSON: the claim states /metrics counts (metrics.claim_states).")
    # What later snapshots must re-derive (derived.writer): a live, unfinished Pod that is not
    # ``ok`` waits on other claims and on the inventory; one with claims is counted by /metrics.
    waiting = models.BooleanField(default=False)
    counted = models.BooleanField(default=False)
    # A verdict that moves with time alone (verdicts.depends_on_time): derived at every snapshot.
    timed = models.BooleanField(default=False)
    live = models.BooleanField(default=True)
    # The Pods page's columns (its filters and order, paged in SQL): the verdict's reason and boundary
    # (empty for a finished Pod, which is not judged), and the document's node, phase and creation time.
    reason = models.CharField(max_length=64, blank=True, default="")
    boundary = models.CharField(max_length=16, blank=True, default="")
    node = models.CharField(max_length=253, blank=True, default="")
    phase = models.CharField(max_length=32, blank=True, default="")
    created = models.CharField(max_length=40, blank=True, default="")
    # The verdict's sentence: with the reason and boundary, all the overview shows of a waiting Pod,
    # read without unpacking its document (527 waiting Pods' documents at 5,000 nodes: 60 ms a read).
    message = models.TextField(blank=True, default="")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Also the as-of lookup: (cluster, pod, valid_from <= T) newest first.
            models.UniqueConstraint(fields=["cluster", "pod_uid", "valid_from"], name="podexplanation_identity_time"),
        ]
        indexes = [
            # The writer compares each re-derived document with its head: the open rows.
            models.Index(fields=["cluster", "pod_uid"], name="podexplanation_head", condition=Q(valid_to__isnull=True)),
            # A change to claims or the inventory re-derives the Pods still waiting.
            models.Index(
                fields=["cluster"],
                name="podexplanation_waiting",
                condition=Q(valid_to__isnull=True, waiting=True),
            ),
            # Every snapshot, changed or not, re-derives the Pods whose verdicts move with time.
            models.Index(
                fields=["cluster"], name="podexplanation_timed", condition=Q(valid_to__isnull=True, timed=True)
            ),
            # A change to a claim re-derives the live Pods whose documents name it, found per namespace.
            # Live only: a deleted incarnation's row stays open for good, and over a week at 5,000 nodes
            # they outnumbered the live ones, each scanned at every churned snapshot.
            models.Index(
                fields=["cluster", "namespace"],
                name="podexplanation_open_by_ns",
                condition=Q(valid_to__isnull=True, live=True),
            ),
            # /metrics as of T: the counted Pods' claim states valid at T.
            models.Index(
                fields=["cluster", "valid_to", "valid_from"],
                name="podexplanation_counted_asof",
                condition=Q(counted=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.pod_uid}) from {self.valid_from.isoformat()}"


class ClusterWideRow(models.Model):
    """A row that stands for the whole cluster over a span of snapshots (one open at a time): the
    audit, the device counts, the class matches, the leak candidates."""

    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        constraints = [
            # Also the as-of lookup: (cluster, valid_from <= T) newest first.
            models.UniqueConstraint(fields=["cluster", "valid_from"], name="%(class)s_identity_time"),
        ]


class AuditReport(ClusterWideRow):
    """The audit's warnings (``audit.audit``) as of a span of snapshots, versioned like the Pod rows.

    Derived again only after a snapshot that changed something the audit reads (any kind but
    Events), and a new row only when the warnings differ: the audit page and /api/audit read one.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="audit_reports")
    warnings = models.TextField(help_text="JSON: the audit document's warnings.")
    content_hash = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"audit of {self.cluster_id} from {self.valid_from.isoformat()}"


class DeviceCounts(ClusterWideRow):
    """Physical devices by driver and model, advertised, allocated and free (``overview.devices_by_model``),
    as of a span of snapshots: what the overview and the fleet page show of the inventory.

    Derived again only after a snapshot that changed what an inventory reads (slices, nodes, taint
    rules, claims), and a new row only when the counts differ.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="device_counts")
    document = models.TextField(help_text="JSON: overview.devices_by_model.")
    content_hash = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"device counts of {self.cluster_id} from {self.valid_from.isoformat()}"


class ClassMatches(ClusterWideRow):
    """Per DeviceClass, the devices its selectors match (``matching.class_matches``) as of a span of
    snapshots: the device classes page, which otherwise evaluates every class over every device.

    Derived again only after a snapshot that changed the inventory (slices, classes, nodes, taint
    rules), and a new row only when the counts differ. Snapshots derived before this table existed
    have no row and are counted on read.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="class_matches")
    document = models.TextField(help_text="JSON: matching.class_matches.")
    content_hash = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"class matches of {self.cluster_id} from {self.valid_from.isoformat()}"


class InventoryUsage(ClusterWideRow):
    """What the inventory page shows beside its device rows that no row can say: the counter sets in use
    (``shared_usage.counter_set_usage``) and the devices their consumed counters block
    (``shared_usage.counter_blocked``), as of a span of snapshots; and what match-devices says of the
    devices it cannot allocate that no claim holds whole (``device_stock.match_unavailable``), so that
    it reads the device rows and the spans instead of the state's inventory.

    Derived again after a snapshot that changed the inventory or what holds it (the DeviceCounts
    condition), and a new row only when the document differs. Without a device drawing on a counter
    set the document is empty and nothing is computed.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="inventory_usage")
    document = models.TextField(
        help_text='JSON: {"totals", "counter_sets": [...], "blocked": [{"device", "node", "entry"}, ...], '
        '"unavailable": [[driver, pool, device, why], ...]}.'
    )
    content_hash = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"inventory usage of {self.cluster_id} from {self.valid_from.isoformat()}"


class InventoryDevice(models.Model):
    """One advertised device (``devices.advertised_devices``) as of a span of snapshots: what the
    inventory page lists of it, and the device itself as its slice lists it.

    Written only after a snapshot that changed the inventory (slices, taint rules, nodes, classes),
    and a new row only for a device whose row differs; a device no longer advertised has its row
    closed. Who holds it is not stored: read as of the asked time from ``AllocationSpan``.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="inventory_devices")
    driver = models.CharField(max_length=253)
    pool = models.CharField(max_length=253)
    device = models.CharField(max_length=253)
    node = models.CharField(max_length=253, help_text="The node it is on, or where else it is reachable from.")
    product = models.TextField(blank=True, help_text="JSON: the productName attribute's value (null when none).")
    # NULL when the slice says none, as the page tells "" from nothing.
    memory = models.TextField(null=True, blank=True)  # noqa: DJ001
    uuid = models.TextField(null=True, blank=True)  # noqa: DJ001
    taints = models.TextField(blank=True, help_text="JSON: devices.taint_rows, empty when untainted.")
    # The first counter set it draws on (""): the physical GPU it is part of (equivalents.physical_devices).
    counter_set = models.CharField(max_length=253, blank=True)
    document = models.TextField(help_text="JSON: the AdvertisedDevice (its slice entry, reach, slice, pool).")
    content_hash = models.CharField(max_length=32)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "driver", "pool", "device", "valid_from"], name="inventorydevice_identity_time"
            ),
        ]
        indexes = [
            # The newest snapshot's inventory in the page's order is read from an index in the "C"
            # collation (PostgreSQL only: migration 0017 creates it).
            # The inventory as of an earlier snapshot: rows valid_from <= T < valid_to. On PostgreSQL it
            # also holds the keys (migration 0028), so that match-devices learns which rows a snapshot
            # has from the index alone.
            models.Index(fields=["cluster", "valid_to", "valid_from"], name="inventorydevice_asof"),
            # One node's devices as of a snapshot.
            models.Index(fields=["cluster", "node", "valid_from"], name="inventorydevice_node"),
        ]

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device} of {self.cluster_id} from {self.valid_from.isoformat()}"


class LeakCandidates(ClusterWideRow):
    """The claims under a leak condition (``leaks.leak_candidates``) as of a span of snapshots.

    Until objects change, time alone can flag these but no other claim, so the leak report reads
    only these claims' histories. Derived again after a snapshot that changed something, for the
    claims it changed, the claims whose consumer Pods it changed, and the candidates themselves; a
    new row only when the set differs. Time alone can also end a condition (a restarted container's
    run grows stable): such a claim stays a candidate until the next change, which the leak report,
    judging each candidate, does not flag.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="leak_candidates")
    claim_uids = models.TextField(blank=True, help_text="Space-separated, sorted.")

    def __str__(self) -> str:
        return f"leak candidates of {self.cluster_id} from {self.valid_from.isoformat()}"


class LeakFlag(models.Model):
    """One flagged claim of the leak report (``leaks.find_leaks``) over a span of derived snapshots, keyed
    by claim UID: what a page that shows claims reads to flag them, one query for the claims it shows,
    instead of the report (every candidate's history). The entry is stored without what moves with the
    as-of time alone (the device-hours and the message, which says for how long): the hours are counted
    on read from ``held_since`` and ``flagged_since`` (``leaks.leak_hours``). Judged again at every
    derived snapshot for the leak candidates (time alone flags a candidate); a new row only when the
    entry differs, so a flag that stands keeps its row. Written with the thresholds of the derivation's
    settings (``threshold_seconds`` in the entry).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="leak_flags")
    claim_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253)
    entry = models.TextField(
        help_text="JSON: the leak report's entry without its hours and message, plus "
        "gpu_equivalents (the devices' fractions added up)."
    )
    content_hash = models.CharField(max_length=32)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "claim_uid", "valid_from"], name="leakflag_identity_time"),
        ]
        indexes = [
            # A page's claims as of a snapshot, and the writer's heads (valid_to NULL).
            models.Index(fields=["cluster", "claim_uid", "valid_to"], name="leakflag_claim_asof"),
        ]

    def __str__(self) -> str:
        return f"leak flag of {self.claim_uid} from {self.valid_from.isoformat()}"


class ClaimListing(models.Model):
    """What the claims list shows of one claim version (``claims.summarize_claim``), valid from/to as
    its version is: the list pages and counts rows by namespace and name instead of decoding every
    claim of the cluster. Written for the claims a snapshot changed (every live claim at a full
    derivation)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="claim_listings")
    claim_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    state = models.CharField(max_length=16)
    devices = models.TextField(blank=True, help_text='JSON: ["pool/device", …].')
    node = models.CharField(max_length=253, blank=True)
    created = models.DateTimeField(null=True, blank=True)
    consumers = models.TextField(blank=True, help_text="JSON: the names in status.reservedFor.")
    entry = models.TextField(
        blank=True,
        default="",
        help_text="JSON as /api/claims writes it (json.dumps): ClaimSummary.entry, without the page's URL.",
    )
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "claim_uid", "valid_from"], name="claimlisting_identity_time"),
        ]
        indexes = [
            # The writer's heads. The list is read in its order (by code point) through claimlisting_order,
            # an index in the "C" collation that only PostgreSQL has (migration 0022).
            models.Index(
                fields=["cluster", "namespace", "name"],
                name="claimlisting_open_by_name",
                condition=Q(valid_to__isnull=True),
            ),
            # The list as of an earlier snapshot: rows valid_from <= T < valid_to.
            models.Index(fields=["cluster", "valid_to", "valid_from"], name="claimlisting_asof"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.claim_uid}) from {self.valid_from.isoformat()}"


class ClaimJudgement(models.Model):
    """A claim's four boundary states as one Pod incarnation's explain document judged it (a claim
    shared by several Pods has a row per Pod: preparation and injection happen per Pod), valid
    from/to as that judgement is. A query over them answers "which claims fail at preparation,
    and since when" without decoding a document; the claim page reads them, and the evidence and
    timeline from the Pod's stored document (``PodExplanation``), which holds them already.

    Written with the Pod's explanation when the claim's states changed (derived.claim_rows).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="claim_judgements")
    claim_uid = models.CharField(max_length=64)
    pod_uid = models.CharField(max_length=64)
    pod_name = models.CharField(max_length=253, help_text="A Pod uses claims of its own namespace only.")
    namespace = models.CharField(max_length=253)
    # Per boundary: its state, since when (RFC 3339 as the document has it) and the reason.
    inventory_state = models.CharField(max_length=16)
    inventory_since = models.CharField(max_length=40, blank=True)
    inventory_reason = models.CharField(max_length=64, blank=True)
    allocation_state = models.CharField(max_length=16)
    allocation_since = models.CharField(max_length=40, blank=True)
    allocation_reason = models.CharField(max_length=64, blank=True)
    preparation_state = models.CharField(max_length=16)
    preparation_since = models.CharField(max_length=40, blank=True)
    preparation_reason = models.CharField(max_length=64, blank=True)
    runtime_state = models.CharField(max_length=16)
    runtime_since = models.CharField(max_length=40, blank=True)
    runtime_reason = models.CharField(max_length=64, blank=True)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The claim page: a claim's rows valid at T.
            models.Index(fields=["cluster", "claim_uid", "valid_from"], name="claimjudgement_by_claim"),
            # The writer compares each judged Pod's claims with their open rows.
            models.Index(fields=["cluster", "pod_uid"], name="claimjudgement_head", condition=Q(valid_to__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.namespace} claim {self.claim_uid} as Pod {self.pod_name} judged it"


class MetricsText(models.Model):
    """/metrics as of a cluster's latest derived snapshot, rendered by the derivation.

    Only the latest is kept: /metrics has no as-of, and the text (a line per device) is
    megabytes at thousands of nodes. It is rendered for every snapshot that changed something,
    and for unchanged ones once it is CLAIMLINE_METRICS_REFRESH old: its timestamps, inventory
    ages and leak hours move with time alone, but slowly (``writer.metrics_text_stands``).
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, primary_key=True, related_name="metrics_text")
    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="+")
    thresholds = models.TextField(help_text="JSON: the leak thresholds it was rendered with.")
    text = models.TextField()

    def __str__(self) -> str:
        return f"metrics of {self.cluster_id} as of snapshot {self.snapshot_id}"


class ReviewDocument(models.Model):
    """The weekly review of one week of a cluster, rendered after a derivation: the current week's
    (the week of the latest derived snapshot) and, once a week has ended, that week's final one.

    The review of the current week is what the review page opens on and what a new snapshot makes
    every reader compute again (leak intervals and advertised device-hours over the cluster's
    weeks); rendered once by the derivation, a reader loads it. It is rendered at most every
    CLAIMLINE_REVIEW_REFRESH and stands for the snapshots meanwhile, changed or not. When the first
    snapshot of a later week is derived, the week's row is rendered once more as of that snapshot
    (``snapshot.at`` on or after the week's end: a *final* document), and stands for every later
    snapshot while its thresholds and ``version`` are current (``derived.review.stored_review``
    says why). One row per cluster and week; a week that ended without a final row has its
    non-final one dropped. Its ``as_of`` says which snapshot it describes.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="review_documents")
    week_start = models.DateTimeField()
    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="+")
    thresholds = models.TextField(help_text="JSON: the leak thresholds it was rendered with.")
    document = models.TextField(help_text="JSON: what capacity.weekly_review returned.")
    # A finished week's row outlives the snapshot's derivation rows it was read from, so it says
    # itself which domain code rendered it ("" for rows rendered before this was recorded).
    version = models.CharField(max_length=16, default="", help_text="DOMAIN_VERSION of the code that rendered it.")

    class Meta:
        constraints = [
            # Also the reader's lookup: the cluster's review of one week.
            models.UniqueConstraint(fields=["cluster", "week_start"], name="reviewdocument_identity"),
        ]

    def __str__(self) -> str:
        return f"review of {self.cluster_id} for {self.week_start.date()} as of snapshot {self.snapshot_id}"


class AllocationSpan(models.Model):
    """One device held by one claim over ``[start, end)``: a run of ``capacity.allocation_runs``.

    Written from the claim's versions when the claim changes; a span exists in every history
    from ``seen`` (the version that showed the allocation) on, and ends at the version that
    dropped the device or deleted the claim (NULL while held: read as ``as_of``). The
    GPU-equivalent fraction is not stored: it is read against the inventory as of the asked
    time, which changes after the span is written.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="allocation_spans")
    claim_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253, help_text="The claim's name.")
    driver = models.CharField(max_length=253)
    pool = models.CharField(max_length=253)
    device = models.CharField(max_length=253)
    # The device's place in the allocation: the review sums pieces in this order, as on read.
    position = models.PositiveIntegerField()
    start = models.DateTimeField(help_text="From allocationTimestamp when it dates the allocation earlier.")
    end = models.DateTimeField(null=True, blank=True)
    seen = models.DateTimeField(help_text="The version that first showed these devices.")
    # The claim's kin (``estimates.claim_kin``), so a waiting Pod's estimate compares finished holds
    # of the same workload or template without reading their claims' and Pods' versions.
    workload = models.CharField(max_length=512, blank=True, default="", help_text="Kind/name of the Pod's controller.")
    template = models.CharField(max_length=253, blank=True, default="", help_text="The claim's ResourceClaimTemplate.")

    class Meta:
        constraints = [
            # Also the writer's lookup of a changed claim's spans.
            models.UniqueConstraint(
                fields=["cluster", "claim_uid", "seen", "position"], name="allocationspan_identity"
            ),
        ]
        indexes = [
            # The review: spans of cluster C overlapping [a, b) (start < b, end NULL or > a).
            models.Index(fields=["cluster", "start"], name="allocationspan_overlap"),
            # A device's page: the claims that ever held one device, without reading every claim.
            models.Index(fields=["cluster", "driver", "pool", "device"], name="allocationspan_device"),
            # A waiting Pod's estimate: the finished holds in the holders' namespaces ending in a window.
            models.Index(fields=["cluster", "namespace", "end"], name="allocationspan_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.claim_uid}) {self.driver}/{self.pool}/{self.device}"


class AdminAccessResult(models.Model):
    """A claim's allocation result with ``adminAccess`` on a device, from the first version showing it.

    Admin access holds nothing, so it is no ``AllocationSpan``; the device's page still lists the
    claim among those that named the device, and finds it here. Written with the spans, from the
    same versions of the claims a snapshot changed.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="admin_access_results")
    claim_uid = models.CharField(max_length=64)
    driver = models.CharField(max_length=253)
    pool = models.CharField(max_length=253)
    device = models.CharField(max_length=253)
    seen = models.DateTimeField(help_text="The first version that showed the result.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "claim_uid", "driver", "pool", "device"], name="adminaccessresult_identity"
            ),
        ]
        indexes = [
            # A device's page, as for the spans.
            models.Index(fields=["cluster", "driver", "pool", "device"], name="adminaccessresult_device"),
        ]

    def __str__(self) -> str:
        return f"{self.claim_uid} admin access to {self.driver}/{self.pool}/{self.device}"


class EventSubject(models.Model):
    """An object an Event was about in some version (``event_subjects.subject_key``): by the involved
    UID, or by namespace and name for a Pod named without one.

    A derivation judges a few hundred Pods and reads only the Events about them and their claims;
    a device's page reads the FailedPrepare* Events about its claims' consumer Pods
    (``preparation_failure``, ``device_history.failing_pod``). Both find them here instead of
    decoding every Event the history kept. Which version counts is decided on read (the Event's
    last as of the asked time), so a row only says where to look.

    A table rather than an expression index on ``ObjectVersion.content``: the content is text,
    an index would parse every version of every kind's JSON, and Events name their subject in
    ``involvedObject`` or ``regarding``, by UID or by name: four expressions on the collector's
    table for one question of the derived layer, which the writer answers from the Events it
    decodes anyway.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="event_subjects")
    event_uid = models.CharField(max_length=64)
    uid = models.CharField(max_length=64, blank=True, help_text="The involved object's UID; empty when it names none.")
    # Only for a Pod named without a UID (``subject_key``): a UID says all a lookup needs.
    namespace = models.CharField(max_length=253, blank=True)
    name = models.CharField(max_length=253, blank=True)
    preparation_failure = models.BooleanField(default=False, help_text="A FailedPrepare* about the Pod ``uid``.")
    seen = models.DateTimeField(help_text="The first version that was about it (as such a failure, if one).")
    # The identity as one 16-byte digest (``event_subjects.subject_digest``): unique over the columns
    # themselves, the index held every UID and name again and weighed more than the rows.
    subject = models.BinaryField(max_length=16, help_text="Digest of cluster, Event, subject and failure mark.")

    class Meta:
        constraints = [
            # A later version of an Event about the same subject adds no row (bulk_create ignores it).
            models.UniqueConstraint(fields=["subject"], name="eventsubject_identity"),
        ]
        indexes = [
            # The Events about given Pods and claims (a derivation), or given Pods' failures (a device's page).
            models.Index(fields=["cluster", "uid"], name="eventsubject_uid"),
            # The Events about a Pod named without a UID.
            models.Index(fields=["cluster", "namespace", "name"], name="eventsubject_pod_name", condition=Q(uid="")),
        ]

    def __str__(self) -> str:
        about = self.uid or f"Pod {self.namespace}/{self.name}"
        return f"event {self.event_uid} about {about}"


# The rows versioned like the history (valid from/to): rebuild-derived forgets them from a time on,
# retention drops those that ended before its cutoff.
VERSIONED: tuple[
    type[PodExplanation]
    | type[AuditReport]
    | type[DeviceCounts]
    | type[ClassMatches]
    | type[InventoryUsage]
    | type[InventoryDevice]
    | type[LeakCandidates]
    | type[LeakFlag]
    | type[ClaimListing]
    | type[ClaimJudgement],
    ...,
] = (
    PodExplanation,
    AuditReport,
    DeviceCounts,
    ClassMatches,
    InventoryUsage,
    InventoryDevice,
    LeakCandidates,
    LeakFlag,
    ClaimListing,
    ClaimJudgement,
)


class OverviewDocument(models.Model):
    """The overview (``overview.overview``) of a cluster's latest derived snapshot as a platform admin
    sees it, rendered after the derivation as /metrics is, with what a team member's view needs
    besides (``derived.overviews``): the namespaces in use, which its redaction hides, and the audit's
    warnings counted by subject namespace; the flagged claims are kept per namespace
    (``OverviewNamespace``), so a team member's overview reads its own namespaces' rows. The waiting
    Pods are not kept: they are read from their own rows (``PodExplanation``), a query of the
    namespaces asked.

    Only the latest is kept, like /metrics: it stands for the snapshot it was rendered for, and for
    later ones that changed nothing until it is CLAIMLINE_OVERVIEW_REFRESH old (its flagged hours and
    chart move with time alone, slowly); an older snapshot's overview is computed on read.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, primary_key=True, related_name="overview")
    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="+")
    thresholds = models.TextField(help_text="JSON: the leak thresholds it was rendered with.")
    version = models.CharField(max_length=16, help_text="DOMAIN_VERSION of the code that rendered it.")
    document = models.TextField(help_text="JSON: the overview as a platform admin sees it.")
    namespaces = models.TextField(help_text="JSON: the namespaces in use as of the snapshot (namespaces_in_use).")
    warnings = models.TextField(help_text="JSON: [[subject namespace, kind, count], …] of the audit's warnings.")

    def __str__(self) -> str:
        return f"overview of {self.cluster_id} as of snapshot {self.snapshot_id}"


class OverviewNamespace(models.Model):
    """One namespace's part of the cluster's ``OverviewDocument``: its flagged claims (the leak report's
    entries, with their place in the report)."""

    overview = models.ForeignKey(OverviewDocument, on_delete=models.CASCADE, related_name="parts")
    namespace = models.CharField(max_length=253)
    flagged = models.TextField(help_text="JSON: [[place in the report, entry], …].")

    class Meta:
        constraints = [
            # Also a team member's lookup: the cluster's parts of its namespaces.
            models.UniqueConstraint(fields=["overview", "namespace"], name="overviewnamespace_identity"),
        ]

    def __str__(self) -> str:
        return f"overview part of {self.namespace} in cluster {self.overview_id}"


class AdvertisedSlice(models.Model):
    """What counting its pool's devices reads of one stored ResourceSlice version
    (``slice_timeline.SliceFacts``): its pool, its creationTimestamp and the physical devices its pool
    advertises when it is the pool's only slice. Written when the derivation first sees the version, so
    that the inventory over time (the overview's chart, as of any snapshot) counts devices without
    decoding a slice (``derived.advertised``). A version that cannot be read has a row saying so: it is
    left out, as the history leaves it out; ``version`` is the domain code that counted it.
    """

    object_version = models.OneToOneField(
        "collector.ObjectVersion", on_delete=models.CASCADE, primary_key=True, related_name="advertised"
    )
    # Its version's cluster, as every derived row names its cluster (what a cluster's layer holds).
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="advertised_slices")
    driver = models.CharField(max_length=253, blank=True)
    pool = models.CharField(max_length=253, blank=True)
    created = models.DateTimeField(null=True, blank=True)
    alone = models.IntegerField(default=0, help_text="Physical devices of its pool when it is the only slice.")
    readable = models.BooleanField(default=True)
    version = models.CharField(max_length=16, help_text="DOMAIN_VERSION of the code that counted it.")

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool} of slice version {self.object_version_id}"
