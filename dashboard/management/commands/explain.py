from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.domain.verdicts import PodNotFound, explain
from dashboard.management.commands._output import as_json
from dashboard.reading import ReadError, open_history


class Command(BaseCommand):
    help = "Why is this Pod (not) running: its claims' four-boundary timeline and the verdict."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pod", metavar="NAMESPACE/POD")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--as-of", help="RFC 3339 time (default: the latest snapshot)")
        parser.add_argument("--cluster")
        parser.add_argument("--uid", help="a specific incarnation of the Pod")

    def handle(self, *args: object, **options: object) -> None:
        namespace, slash, name = str(options["pod"]).partition("/")
        if not slash or not namespace or not name:
            raise CommandError("expected NAMESPACE/POD, e.g. default/gpu-check")
        try:
            history = open_history(options["cluster"], options["as_of"])  # type: ignore[arg-type]
            doc = explain(history, namespace, name, pod_uid=options["uid"])  # type: ignore[arg-type]
        except (ReadError, PodNotFound) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(as_json(doc))
            return
        verdict = doc["verdict"]
        self.stdout.write(f"{namespace}/{name} (uid {doc['pod']['uid']}) as of {doc.get('as_of', '')}")
        where = f" at {verdict['boundary']}" if verdict["boundary"] else ""
        self.stdout.write(f"verdict: {verdict['reason']}{where}")
        self.stdout.write(f"  {verdict['message']}")
        if len(doc["incarnations"]) > 1:
            self.stdout.write(f"incarnations: {', '.join(i['uid'] for i in doc['incarnations'])}")
        for claim in doc["claims"]:
            self.stdout.write(f"claim {claim['name']} ({claim['uid']})")
            for boundary in ("inventory", "allocation", "preparation", "runtime"):
                b = claim["boundaries"][boundary]
                self.stdout.write(f"  {boundary:<12} {b['state']:<8} {b.get('since') or ''}")
