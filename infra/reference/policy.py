"""docs/reference/policy.md: the policy pack's rules, their enforcement and settings (policy/crossguard.py).

The pack's policies are built by `crossguard.policies()` (the definition the Pulumi CLI serves); it
needs `pulumi_policy`, which the test extra of .venv pins as policy/requirements.txt does.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from infra.program.common import yamlio
from infra.program.settings import PROJECT_ROOT
from infra.reference.markdown import code, slug, table
from infra.reference.page import header

POLICY_DIR = PROJECT_ROOT / "policy"


def _pack() -> Any:
    """The pack's module, imported as the Pulumi CLI imports the pack (its directory on sys.path)."""
    sys.path.insert(0, str(POLICY_DIR))
    try:
        import crossguard
    finally:
        sys.path.remove(str(POLICY_DIR))
    return crossguard


def policies() -> list[Any]:
    """The pack's policies, as it serves them."""
    return list(_pack().policies())


def pack_name() -> str:
    return str(_pack().PACK_NAME)


def level(policy: Any) -> str:
    return str(getattr(policy.enforcement_level, "value", policy.enforcement_level))


def settings_of(policy: Any) -> dict[str, dict[str, Any]]:
    return dict(policy.config_schema.properties) if policy.config_schema is not None else {}


def _type(prop: dict[str, Any]) -> str:
    kind = prop.get("type", "")
    if kind == "array":
        return f"list of {prop.get('items', {}).get('type', 'values')}s"
    return f"{kind}, >= {prop['minimum']}" if "minimum" in prop else kind


def page() -> str:
    found = policies()
    pack = yamlio.load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    rows = [
        (
            f"[{code(p.name)}](#{slug(p.name)})",
            level(p),
            p.description,
            type(p).__name__.removesuffix("ValidationPolicy"),
        )
        for p in found
    ]
    parts = [
        header("policy/crossguard.py"),
        f"# Policy pack\n\n`{pack_name()}` (`policy/`, version {pack['version']}): {pack['description']} "
        "Run it with `pulumi preview --policy-pack policy` from the repository root. A **mandatory** rule "
        "stops the update; an **advisory** one warns. Settings are given per policy in a policy config "
        'file (`--policy-pack-config`), e.g. `{"pod-security-restricted": {"excludeNamespaces": []}}`.\n\n'
        "## Rules\n\n" + table(("Rule", "Enforcement", "What it requires", "Checks each"), rows),
    ]
    for p in found:
        props = settings_of(p)
        body = (
            table(
                ("Setting", "Type", "Default", "Description"),
                [
                    (code(k), _type(v), code(json.dumps(v.get("default"))), v.get("description", ""))
                    for k, v in props.items()
                ],
            )
            if props
            else "No settings.\n"
        )
        parts.append(f"## {p.name}\n\n{p.description} Enforcement: {level(p)}.\n\n{body}")
    return "\n".join(parts)


def anchors() -> list[str]:
    return ["rules", *(slug(p.name) for p in policies())]
