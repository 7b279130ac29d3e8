from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from dashboard.management.commands._output import HistoryCommand
from derived.reading import explain_read
from domain.boundaries.judgement import BOUNDARIES
from domain.verdicts.explain import PodNotFound, outlook_sentences


class Command(HistoryCommand):
    help = "Why is this Pod (not) running: its claims' four-boundary timeline and the verdict."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pod", metavar="NAMESPACE/POD")
        parser.add_argument("--uid", help="a specific incarnation of the Pod")
        super().add_arguments(parser)

    def handle(self, *args: object, **options: Any) -> None:
        namespace, slash, name = str(options["pod"]).partition("/")
        if not slash or not namespace or not name:
            raise CommandError("expected NAMESPACE/POD, e.g. default/gpu-check")
        history = self.history(options)
        try:
            doc, _namespaces = explain_read(history, namespace, name, pod_uid=options["uid"])
        except PodNotFound as exc:
            raise CommandError(str(exc)) from None
        self.emit(options, doc, self._text)

    def _text(self, doc: dict[str, Any]) -> None:
        pod, verdict = doc["pod"], doc["verdict"]
        self.stdout.write(f"{pod['namespace']}/{pod['name']} (uid {pod['uid']}) as of {doc.get('as_of', '')}")
        where = f" at {verdict['boundary']}" if verdict["boundary"] else ""
        self.stdout.write(f"verdict: {verdict['reason']}{where}")
        self.stdout.write(f"  {verdict['message']}")
        for sentence in outlook_sentences(verdict):
            self.stdout.write(f"  {sentence}")
        if len(doc["incarnations"]) > 1:
            self.stdout.write(f"incarnations: {', '.join(i['uid'] for i in doc['incarnations'])}")
        for claim in doc["claims"]:
            self.stdout.write(f"claim {claim['name']} ({claim['uid']})")
            for boundary in BOUNDARIES:
                b = claim["boundaries"][boundary]
                self.stdout.write(f"  {boundary:<12} {b['state']:<8} {b.get('since') or ''}")
