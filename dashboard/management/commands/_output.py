from __future__ import annotations

from typing import Any

import orjson


def as_json(document: Any) -> str:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
