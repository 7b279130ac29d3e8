# The Event lookup's identity as a digest (derived.event_subjects.subject_digest) instead of a
# unique index over seven columns.

import hashlib

from django.db import migrations, models

BATCH = 2000


def digest(cluster_id, event_uid, uid, namespace, name, preparation_failure):
    # derived.event_subjects.subject_digest as of this migration, written out: a migration must
    # not change when the module does.
    about = uid or "\0".join(("Pod", namespace, name))
    parts = (str(cluster_id), event_uid, about, "1" if preparation_failure else "0")
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).digest()


def identify(apps, schema_editor):
    """Each row's digest; a UID's row keeps no name, so rows that differed only by it are one now
    (the first seen stays, as the writer would have kept it)."""
    EventSubject = apps.get_model("derived", "EventSubject")
    rows = EventSubject.objects.order_by("cluster_id", "event_uid", "seen", "pk").values_list(
        "pk", "cluster_id", "event_uid", "uid", "namespace", "name", "preparation_failure"
    )
    event, kept, changed, duplicates = None, set(), [], []
    for pk, cluster_id, event_uid, uid, namespace, name, failure in rows.iterator(BATCH):
        if (cluster_id, event_uid) != event:
            event, kept = (cluster_id, event_uid), set()
        namespace, name = ("", "") if uid else (namespace, name)
        subject = digest(cluster_id, event_uid, uid, namespace, name, failure)
        if subject in kept:
            duplicates.append(pk)
            continue
        kept.add(subject)
        changed.append(EventSubject(pk=pk, namespace=namespace, name=name, subject=subject))
        if len(changed) >= BATCH:
            EventSubject.objects.bulk_update(changed, ["namespace", "name", "subject"])
            changed = []
    EventSubject.objects.bulk_update(changed, ["namespace", "name", "subject"], batch_size=BATCH)
    for start in range(0, len(duplicates), BATCH):
        EventSubject.objects.filter(pk__in=duplicates[start : start + BATCH]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('derived', '0012_pod_documents_compressed'),
    ]

    operations = [
        migrations.RemoveConstraint(model_name='eventsubject', name='eventsubject_identity'),
        migrations.AddField(
            model_name='eventsubject',
            name='subject',
            field=models.BinaryField(default=b'', help_text='Digest of cluster, Event, subject and failure mark.', max_length=16),
            preserve_default=False,
        ),
        migrations.RunPython(identify, migrations.RunPython.noop),
        migrations.RemoveField(model_name='eventsubject', name='kind'),
        migrations.AddConstraint(
            model_name='eventsubject',
            constraint=models.UniqueConstraint(fields=('subject',), name='eventsubject_identity'),
        ),
    ]
