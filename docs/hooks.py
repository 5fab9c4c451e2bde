"""MkDocs hooks: the tables that are made from the code, so the docs cannot drift from it.

``<!-- the operations ... -->`` becomes the table of every operation of the API (from
oryxmem/operations.py, as GET /api/v1/openapi.json serves it); ``<!-- the settings
... -->`` the table of every setting (from oryxmem/config.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from oryxmem.config import all_settings
from oryxmem.operations import OPERATIONS

OPERATIONS_MARK = re.compile(r"<!-- the operations:[^>]*-->")
SETTINGS_MARK = re.compile(r"<!-- the settings:[^>]*-->")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def operations_table() -> str:
    rows = ["| operation | method, path | arguments | does |", "|---|---|---|---|"]
    for operation in OPERATIONS:
        paths = "<br>".join(f"`{operation.method} {path}`" for path in operation.paths())
        arguments = ", ".join(
            f"`{param.wire}`" + ("" if param.required else "?") + f" ({param.where})"
            for param in operation.params
        )
        rows.append(
            f"| `{operation.name}` | {paths} | {arguments or '-'} | {_cell(operation.summary)} |"
        )
    return "\n".join(rows)


def settings_table() -> str:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for setting in all_settings():
        default = json.dumps(setting.default, ensure_ascii=False)
        restart = " (a running daemon takes it when it restarts)" if setting.restart else ""
        rows.append(f"| `{setting.key}` | `{default}` | {_cell(setting.help)}{restart} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    markdown = OPERATIONS_MARK.sub(lambda _: operations_table(), markdown)
    return SETTINGS_MARK.sub(lambda _: settings_table(), markdown)
