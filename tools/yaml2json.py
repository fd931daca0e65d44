#!/usr/bin/env python3
"""Converts a YAML document to compact JSON, refusing what YAML would read silently wrong.

Usage: tools/yaml2json.py IN.yaml OUT.json   (OUT "-": standard output)

The build runs it on docs/openapi.yaml (api/openapi.cmake): the daemon serves the JSON at
GET /v1/openapi.json. The YAML is read as YAML 1.2's core schema would read it, so that the JSON
says what the author wrote:
  - a key that appears twice in one mapping is an error (PyYAML keeps the last one silently);
  - only true/false (any case) are booleans: yes, no, on, off, y, n stay strings (YAML 1.1 reads
    `no` as false);
  - dates and times stay strings (YAML 1.1 reads 2026-01-01 as a date, which JSON cannot hold);
  - keys are strings (an unquoted 200 is written "200"); any other key type is an error.
For an OpenAPI document (a top-level `openapi` key) it also checks that the version is 3.1.x,
that every local `$ref` ("#/...") points at something, that every `{name}` of a path is a
declared, required path parameter and that every operation has a unique operationId.
OUT is rewritten only when its content changes, so that a rerun rebuilds nothing.
Needs PyYAML (Debian: python3-yaml, tools/install-deps.sh runtime).
"""

import json
import re
import sys

try:
    import yaml
except ImportError:
    sys.exit("yaml2json: PyYAML is missing (Debian: apt-get install python3-yaml; "
             "tools/install-deps.sh runtime)")


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core booleans, no timestamps, and duplicate keys refused."""


# Drop the implicit resolvers for bool and timestamp, then put back true/false only.
Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)  # merge keys (<<) first
    out = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a string, not {key!r}", key_node.start_mark)
        key = str(key)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


Yaml12Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def resolve_pointer(doc, ref):
    node = doc
    for raw in ref[2:].split("/") if ref != "#/" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def check_openapi(doc):
    """Problems of an OpenAPI 3.1 document, as messages."""
    problems = []
    version = str(doc.get("openapi", ""))
    if not version.startswith("3.1."):
        problems.append(f"openapi: {version!r} is not 3.1.x")

    def walk(node, where):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and not resolve_pointer(doc, ref):
                problems.append(f"{where}: $ref {ref} points at nothing")
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(doc, "#")

    def deref(node):
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            target = doc
            for raw in node["$ref"][2:].split("/"):
                target = target.get(raw.replace("~1", "/").replace("~0", "~"), {})
            node = target
        return node

    def path_params(params):
        out = set()
        for p in params or []:
            p = deref(p)
            if isinstance(p, dict) and p.get("in") == "path":
                if p.get("required") is not True:
                    problems.append(f"path parameter {p.get('name')} is not required: true")
                out.add(p.get("name"))
        return out

    seen = {}
    for path, item in (doc.get("paths") or {}).items():
        for method in HTTP_METHODS:
            op = item.get(method) if isinstance(item, dict) else None
            if not isinstance(op, dict):
                continue
            declared = path_params(item.get("parameters")) | path_params(op.get("parameters"))
            for name in re.findall(r"\{([^}]+)\}", path):
                if name not in declared:
                    problems.append(f"{method.upper()} {path}: path parameter {name} not declared")
            op_id = op.get("operationId")
            if not op_id:
                problems.append(f"{method.upper()} {path}: no operationId")
            elif op_id in seen:
                problems.append(f"{method.upper()} {path}: operationId {op_id} is also {seen[op_id]}")
            else:
                seen[op_id] = f"{method.upper()} {path}"
    return problems


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    src, dst = argv[1], argv[2]
    try:
        with open(src, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=Yaml12Loader)
    except (OSError, yaml.YAMLError) as e:
        sys.exit(f"yaml2json: {src}: {e}")
    if isinstance(doc, dict) and "openapi" in doc:
        problems = check_openapi(doc)
        if problems:
            sys.exit("".join(f"yaml2json: {src}: {p}\n" for p in problems).rstrip())
    try:
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        sys.exit(f"yaml2json: {src}: not representable as JSON: {e}")
    if dst == "-":
        sys.stdout.write(text)
        return
    try:
        with open(dst, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
