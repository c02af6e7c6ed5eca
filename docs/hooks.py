"""MkDocs hooks: the two reference pages, made from their one source at every build.

- ``reference/settings.md`` from the ``#:`` comments of ``console/settings.py``
  (name(s) | default | meaning, where each variable is read);
- ``reference/api.md`` from the OpenAPI schema the running code publishes at
  ``/api/v1/schema/`` (drf-spectacular's generator, the same document).

``tests/console/test_docs.py`` reads ``documented()`` to check that every
variable Airlock reads is on the page.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "console" / "settings.py"
ROW = re.compile(r"^#: (?P<text>.*)$")
MORE = re.compile(r"^#:   (?P<text>.*)$")
GENERATED = {
    "reference/settings.md": lambda: settings_page(),
    "reference/api.md": lambda: api_page(),
}


def documented(source: Path = SETTINGS) -> list[tuple[list[str], str, str]]:
    """Each documented row: its variables, its default, its meaning, in file order."""
    rows: list[str] = []
    for line in source.read_text().splitlines():
        if more := MORE.match(line):
            rows[-1] += " " + more["text"].strip()
        elif row := ROW.match(line):
            rows.append(row["text"].strip())
    parsed = []
    for row in rows:
        cells = [cell.strip() for cell in row.split(" | ")]
        if len(cells) != 3:
            raise ValueError(f"a #: row is `names | default | meaning`: {row!r}")
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0])
        parsed.append((names, cells[1], cells[2]))
    return parsed


def settings_page() -> str:
    lines = [
        "# Settings",
        "",
        "Airlock reads its settings from the environment. This page is made from",
        "`console/settings.py`, where each variable is read and documented, so it lists",
        "every one (a test fails when one is read and not documented). Set them in the",
        "environment of `serve` (or of each web process, worker and beat in the scale",
        "deployment); a bad value stops the start with a message that names it.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    for names, default, meaning in documented():
        shown = " / ".join(f"`{name}`" for name in names)
        lines.append(f"| {shown} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


# --- the API reference ----------------------------------------------------------------


def schema() -> dict:
    """The OpenAPI document, as ``/api/v1/schema/`` serves it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("AIRLOCK_DATA_DIR", tempfile.mkdtemp(prefix="airlock-docs-"))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))


def _type(node: dict, schemas: dict) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "allOf" in node and len(node["allOf"]) == 1:
        return _type(node["allOf"][0], schemas)
    if "oneOf" in node or "anyOf" in node:
        return " or ".join(_type(n, schemas) for n in node.get("oneOf", node.get("anyOf")))
    kind = node.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        return f"list of {_type(node.get('items', {}), schemas)}"
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"] if value is not None)
    return kind + (f" ({node['format']})" if "format" in node else "")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _body(operation: dict, schemas: dict) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    kinds = ", ".join(f"`{kind}`" for kind in content)
    first = next(iter(content.values()), {}).get("schema")
    return f"{_type(first, schemas)} ({kinds})" if first else ""


def api_page() -> str:
    document = schema()
    schemas = document.get("components", {}).get("schemas", {})
    lines = [
        "# API reference",
        "",
        f"{_cell(document['info'].get('description', ''))}",
        "",
        "Made at every build from the OpenAPI schema the code publishes at",
        "`/api/v1/schema/` (version "
        f"{document['info']['version']}). Every request takes a bearer token"
        " (`Authorization: Bearer alk_…`); every error is"
        ' `{"error": {"type", "message"}}` with a 4xx or 5xx status.',
        "",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            lines += [f"## {method.upper()} `{path}`", ""]
            if operation.get("summary"):
                lines += [_cell(operation["summary"]), ""]
            if operation.get("description"):
                lines += [operation["description"].strip(), ""]
            parameters = operation.get("parameters", [])
            if parameters:
                lines += ["| parameter | in | type | meaning |", "|---|---|---|---|"]
                for parameter in parameters:
                    required = " (required)" if parameter.get("required") else ""
                    lines.append(
                        f"| `{parameter['name']}`{required} | {parameter['in']} | "
                        f"{_type(parameter.get('schema', {}), schemas)} | "
                        f"{_cell(parameter.get('description', ''))} |"
                    )
                lines.append("")
            if body := _body(operation, schemas):
                lines += [f"Body: {body}", ""]
            answers = []
            for status, response in operation.get("responses", {}).items():
                shape = next(iter(response.get("content", {}).values()), {}).get("schema")
                shown = f": {_type(shape, schemas)}" if shape else ""
                answers.append(f"`{status}`{shown}")
            if answers:
                lines += ["Answers: " + "; ".join(answers), ""]
    lines += ["## Schemas", ""]
    for name, node in sorted(schemas.items()):
        lines += [f"### {name}", ""]
        if node.get("description"):
            lines += [_cell(node["description"]), ""]
        properties = node.get("properties", {})
        if properties:
            required = set(node.get("required", []))
            lines += ["| field | type | meaning |", "|---|---|---|"]
            for field, spec in properties.items():
                flags = [flag for flag in ("readOnly", "writeOnly") if spec.get(flag)]
                mark = " (required)" if field in required else ""
                extra = f" *{', '.join(flags)}*" if flags else ""
                lines.append(
                    f"| `{field}`{mark}{extra} | {_type(spec, schemas)} | "
                    f"{_cell(spec.get('description', ''))} |"
                )
            lines.append("")
        elif "enum" in node:
            lines += [_type(node, schemas), ""]
    return "\n".join(lines) + "\n"


# --- the hook ---------------------------------------------------------------------------


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, make in GENERATED.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=make()))
    return files
