"""The field types the Kubernetes API defines for the kinds Claimline stores, from the official client.

The ``kubernetes`` Python client is generated from the API's OpenAPI document: each model class says
each field's JSON name (``attribute_map``) and type (``openapi_types``: ``str``, ``int``, ``bool``,
``datetime``, ``object``, another model, ``List[T]`` or ``Dict[str, T]``). Loading the ~200 model
classes the stored kinds reach takes the better part of a second, so their type maps are kept in
``api_types.json`` beside this module, which ``collector.shapes`` reads; ``tests/test_shapes.py``
checks the file still says what the installed client says. After upgrading the client::

    .venv/bin/python -m collector.api_types    # rewrites collector/api_types.json
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from collector.kinds import KINDS

TYPES_FILE = Path(__file__).with_name("api_types.json")

# Each stored kind's model in the client, by the names different client versions give it: the
# resource.k8s.io/v1 ResourceClaim is ``ResourceV1ResourceClaim`` beside core's ``CoreV1ResourceClaim``
# (a container's claim), and the core/v1 Event ``CoreV1Event`` beside events.k8s.io's.
KIND_MODELS: dict[str, tuple[str, ...]] = {
    "DeviceClass": ("V1DeviceClass",),
    "ResourceSlice": ("V1ResourceSlice",),
    "DeviceTaintRule": ("V1DeviceTaintRule",),
    "Workload": ("V1beta1Workload",),
    "PodGroup": ("V1beta1PodGroup",),
    "ResourceClaimTemplate": ("V1ResourceClaimTemplate",),
    "ResourceClaim": ("ResourceV1ResourceClaim", "V1ResourceClaim"),
    "Namespace": ("V1Namespace",),
    "Node": ("V1Node",),
    "Pod": ("V1Pod",),
    "Event": ("CoreV1Event", "V1Event"),
}
_MODEL_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
_CONTAINERS = frozenset({"List", "Dict"})


def from_client() -> dict[str, Any]:
    """Every model the stored kinds reach, as the installed client types it: ``{"client", "kinds", "models"}``."""
    import kubernetes
    from kubernetes import client

    models: dict[str, dict[str, str]] = {}

    def walk(name: str) -> None:
        if name in models:
            return
        model = getattr(client, name)
        fields = {model.attribute_map[attr]: kind for attr, kind in model.openapi_types.items()}
        models[name] = dict(sorted(fields.items()))
        for kind in fields.values():
            for inner in _MODEL_NAME.findall(kind):
                if inner not in _CONTAINERS and hasattr(client, inner):
                    walk(inner)

    kinds: dict[str, str] = {}
    for kind in KINDS:
        name = next((n for n in KIND_MODELS[kind] if hasattr(client, n)), None)
        if name is None:
            raise LookupError(f"the kubernetes client {kubernetes.__version__} has no model for {kind}")
        kinds[kind] = name
        walk(name)
    return {"client": kubernetes.__version__, "kinds": kinds, "models": dict(sorted(models.items()))}


def encoded(types: dict[str, Any]) -> str:
    return json.dumps(types, indent=1, sort_keys=False) + "\n"


def main() -> None:
    types = from_client()
    TYPES_FILE.write_text(encoded(types))
    print(f"{TYPES_FILE}: {len(types['models'])} models of kubernetes client {types['client']}")


if __name__ == "__main__":
    main()
