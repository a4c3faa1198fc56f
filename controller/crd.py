"""Generate the HybridScalingPolicy CRD (and docs/api.md's field reference) from controller/api.py.

pydantic writes JSON Schema (2020-12); the API server wants a *structural*
OpenAPI v3.0 schema. The translation: inline every $ref, drop titles and
`additionalProperties: false` (the API server prunes unknown fields instead),
turn `X | None` into "omitted" (when it defaults to None: the API server prunes a
null there) or `nullable: true` (when None is a value in its own right), turn
numeric exclusive bounds into the v3.0 boolean form, keep defaults as the wire
form the field's serializer writes ('2m', '158Mi'), and attach the CEL rules of
`api.CEL_RULES` to the schema of the model they belong to.

    hybrid-scaler crd > crds/hybridscalingpolicy.yaml       (also: make crds)
    python -m controller.crd --write                        (CRD and docs/api.md)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, get_args

import yaml
from pydantic import BaseModel, TypeAdapter

from controller import api
from policies.spec import DURATION_PATTERN, MEMORY_PATTERN

REPO = Path(__file__).resolve().parent.parent
CRD_PATH = REPO / "crds" / "hybridscalingpolicy.yaml"
# Helm installs CRDs only from a chart's own crds/ folder, so the chart keeps a copy.
CHART_CRD_PATH = REPO / "charts" / "hybrid-scaler" / "crds" / "hybridscalingpolicy.yaml"
DOCS_PATH = REPO / "docs" / "api.md"
DOCS_BEGIN = "<!-- BEGIN GENERATED: python -m controller.crd --write -->"
DOCS_END = "<!-- END GENERATED -->"

HEADER = (
    "# Generated from controller/api.py by `hybrid-scaler crd`; do not edit.\n"
    "# Regenerate with `make crds`; tests/api fails when this file drifts.\n"
)

# JSONSchemaProps fields the API server accepts and that we use; anything else
# pydantic emits (title, const, gt from constrained custom types, ...) is dropped.
_KEPT = {
    "type", "format", "description", "default", "enum", "pattern", "nullable",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "minItems", "maxItems",
    "properties", "required", "items", "additionalProperties",
    # A field's own bounds as CEL (policies.spec.Within); a model's rules come from CEL_RULES.
    "x-kubernetes-validations",
}

PRINTER_COLUMNS: tuple[dict[str, str], ...] = (
    {"name": "Target", "type": "string", "jsonPath": ".spec.targetRef.name"},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
    {"name": "Operators", "type": "integer", "jsonPath": ".status.summary.operators"},
    # What the TaskManager pods request (what the cluster bills), not what tasks use.
    {"name": "CPU", "type": "number", "jsonPath": ".status.summary.cpu",
     "description": "CPU cores the TaskManager pods request (cpu × replicas)"},
    {"name": "Memory", "type": "string", "jsonPath": ".status.summary.memory",
     "description": "memory the TaskManager pods request (memory × replicas)"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.summary.step"},
    {"name": "Last Decision", "type": "string", "jsonPath": ".status.summary.lastAction"},
    {"name": "Ready", "type": "string",
     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """Every pydantic model reachable from `root`'s fields, root first."""
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for field in model.model_fields.values():
            todo.extend(_nested_models(field.annotation))


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _nested_models(arg)


def _wire_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each defaulted field's default as its serializer writes it, by wire name."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required() or field.default_factory is not None:
            continue
        annotation: Any = field.annotation
        if field.metadata:
            annotation = Annotated[annotation, *field.metadata]
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        out[field.alias or name] = adapter.dump_python(
            field.default, mode="json", by_alias=True, exclude_none=True
        )
    return out


# Key order in the generated YAML: what a reader looks for first.
_ORDER = ("description", "type", "format", "nullable", "enum", "default", "pattern",
          "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength",
          "minItems", "maxItems", "required", "properties", "items", "additionalProperties",
          "x-kubernetes-validations")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    return {k: node[k] for k in sorted(node, key=_ORDER.index)}


class _Translator:
    def __init__(self, root: type[BaseModel]) -> None:
        schema = root.model_json_schema(by_alias=True, mode="validation")
        self.defs: dict[str, Any] = schema.pop("$defs", {})
        self.root = schema
        models = list(_models(root))
        self.models = {m.__name__: m for m in models}
        if len(self.models) != len(models):  # pydantic would then qualify the $defs names
            raise ValueError("two models in the CRD share a class name; rename one")
        self.defaults = {name: _wire_defaults(m) for name, m in self.models.items()}

    def model(self, name: str) -> dict[str, Any]:
        node = self.defs.get(name, self.root)
        out = self.node(node)
        model = self.models.get(name)
        if model is None:  # an enum
            return out
        for prop, default in self.defaults[name].items():
            if prop in out.get("properties", {}):
                self._set_default(out["properties"][prop], default)
        rules = api.CEL_RULES.get(model, ())
        if rules:
            out["x-kubernetes-validations"] = out.get("x-kubernetes-validations", []) + [
                {"rule": r.rule, "message": r.message}
                | ({"fieldPath": r.field_path} if r.field_path else {})
                for r in rules
            ]
        return _ordered(out)

    @staticmethod
    def _set_default(prop: dict[str, Any], default: Any) -> None:
        if default is None:
            prop.pop("default", None)
        else:
            # A section's default is written in full, not as {}: the API server checks
            # a default against the section's CEL rules without defaulting inside it.
            prop["default"] = default

    def node(self, node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            resolved = self.model(node["$ref"].rsplit("/", 1)[-1])
            siblings = self.node({k: v for k, v in node.items() if k != "$ref"})
            return _ordered(resolved | siblings)
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
            merged = self.node(options[0]) | self.node(
                {k: v for k, v in node.items() if k != "anyOf"}
            )
            if "default" not in node:
                merged["nullable"] = True  # a required field whose value may be None
            return _ordered(merged)
        if "required" in node:
            # None may arrive as an absent key (a merge patch drops nulls): not required.
            props = node.get("properties", {})
            node = node | {"required": [
                r for r in node["required"]
                if not any(o.get("type") == "null" for o in props.get(r, {}).get("anyOf", ()))
            ]}
            if not node["required"]:
                del node["required"]
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "const":
                out["enum"] = [value]
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
            elif key == "properties":
                out[key] = {k: self.node(v) for k, v in value.items()}
            elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
                out[key] = self.node(value)
            elif key == "x-kubernetes-validations":
                out[key] = [{k: r[k] for k in ("rule", "message", "fieldPath") if k in r}
                            for r in value]
            elif key in _KEPT and key != "additionalProperties":
                out[key] = value
        return _ordered(out)


def status_schema() -> dict[str, Any]:
    return _Translator(api.Status).model("Status")


def spec_schema() -> dict[str, Any]:
    return _Translator(api.HybridScalingPolicySpec).model("HybridScalingPolicySpec")


def openapi_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": api.DESCRIPTION,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{api.PLURAL}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": list(api.CATEGORIES),
            },
            "versions": [{
                "name": api.VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [dict(c) for c in PRINTER_COLUMNS],
                "schema": {"openAPIV3Schema": openapi_schema()},
            }],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Writes repeated sub-schemas out in full: no YAML anchors in a CRD."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd_yaml() -> str:
    return HEADER + yaml.dump(
        crd(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )


# --- docs/api.md ---------------------------------------------------------------------


def _type_of(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type", "object")
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if kind == "string" and prop.get("pattern") == DURATION_PATTERN:
        return "duration"
    if kind == "string" and prop.get("pattern") == MEMORY_PATTERN:
        return "quantity"
    return str(kind)


def _bounds(prop: dict[str, Any]) -> str:
    parts = []
    if "minimum" in prop:
        parts.append((">" if prop.get("exclusiveMinimum") else "≥") + f" {prop['minimum']}")
    if "maximum" in prop:
        parts.append(("<" if prop.get("exclusiveMaximum") else "≤") + f" {prop['maximum']}")
    if "maxItems" in prop:
        parts.append(f"≤ {prop['maxItems']} items")
    words = {"must be at least ": "≥ ", "must be more than ": "> ", "must be at most ": "≤ "}
    for r in prop.get("x-kubernetes-validations", ()):  # a field's own bounds (Within)
        parts += [r["message"].replace(w, sign) for w, sign in words.items()
                  if r["message"].startswith(w)]
    return ", ".join(parts)


def _rows(schema: dict[str, Any], path: str) -> Iterator[str]:
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        where = f"{path}.{name}"
        default = prop.get("default")
        if name in required:
            shown = "required"
        elif default is None:
            shown = "unset"
        elif isinstance(default, dict):
            shown = "see below"
        elif isinstance(default, str):
            shown = f"`{default}`"
        else:
            shown = "`" + json.dumps(default).replace('"', "") + "`"
        description = " ".join(str(prop.get("description", "")).split()).replace("|", "\\|")
        bounds = _bounds(prop)
        yield (f"| `{where}` | {_type_of(prop)} | {shown} | "
               f"{description}{' (' + bounds + ')' if bounds else ''} |")
        child = prop.get("items") if prop.get("type") == "array" else prop
        if child and "properties" in child:
            yield from _rows(child, where + ("[]" if child is not prop else ""))


def reference_markdown() -> str:
    spec = spec_schema()
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    lines.extend(_rows(spec, "spec"))
    lines += ["", "Cross-field rules the API server checks (CEL), also checked locally "
              "by `hybrid-scaler validate`:", ""]
    for model, rules in api.CEL_RULES.items():
        for r in rules:
            lines.append(f"- `{r.rule}` ({model.__name__}): {r.message}")
    return "\n".join(lines) + "\n"


def render_docs(current: str) -> str:
    """`current` with the text between the GENERATED markers replaced."""
    head, found, rest = current.partition(DOCS_BEGIN)
    if not found:
        raise ValueError(f"{DOCS_PATH} lacks the marker {DOCS_BEGIN!r}")
    _, found, tail = rest.partition(DOCS_END)
    if not found:
        raise ValueError(f"{DOCS_PATH} lacks the marker {DOCS_END!r}")
    return f"{head}{DOCS_BEGIN}\n{reference_markdown()}{DOCS_END}{tail}"


def write() -> None:
    CRD_PATH.write_text(crd_yaml())
    CHART_CRD_PATH.write_text(crd_yaml())
    DOCS_PATH.write_text(render_docs(DOCS_PATH.read_text()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.stdout.write(crd_yaml())
