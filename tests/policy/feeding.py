"""Resources fed to the pack's policies the way the engine feeds them, without an engine: property
proxies (``unknown_checking_proxy``), URNs of this project's stacks, and each policy's validate call,
for the tests of ``tests/policy``."""

from __future__ import annotations

import crossguard
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import unknown_checking_proxy


def type_token(obj):
    api = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return f"kubernetes:{api}:{obj['kind']}"


def resource_options():
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def urn_of(obj, stack="test", parents=()):
    qualified = "$".join([*parents, type_token(obj)])
    return f"urn:pulumi:{stack}::ddp-mnist::{qualified}::{obj['metadata']['name']}"


def validation_args(obj, config=None, stack="test", urn=None):
    return ResourceValidationArgs(
        type_token(obj),
        unknown_checking_proxy(obj),
        urn or urn_of(obj, stack),
        obj["metadata"]["name"],
        resource_options(),
        None,
        config,
    )


def policies_by_name():
    return {p.name: p for p in crossguard.policies()}


def violations_of(policy, obj, config=None, stack="test", urn=None):
    reported = []
    policy.validate(
        validation_args(obj, config, stack, urn), lambda message, urn=None: reported.append(message)
    )
    return reported


def policy_resource(urn, obj):
    return PolicyResource(
        type_token(obj),
        unknown_checking_proxy(obj),
        urn,
        obj["metadata"]["name"],
        resource_options(),
        None,
        None,
        [],
        {},
    )


def stack_violations_of(policy, resources, config=None):
    """(URN, message) for each violation a stack policy reports over (URN, object) pairs."""
    reported = []
    args = StackValidationArgs([policy_resource(urn, obj) for urn, obj in resources], config)
    policy.validate(args, lambda message, urn=None: reported.append((urn, message)))
    return reported


def mandatory_policies():
    return {n: p for n, p in policies_by_name().items() if p.enforcement_level == EnforcementLevel.MANDATORY}


def reported_by_pack(resources, config=None, stack="test"):
    """(policy, message) for every violation the pack's mandatory policies report over a stack's (URN,
    object) pairs: each resource policy on each object, each stack policy on them all."""
    found = []
    for name, policy in mandatory_policies().items():
        if isinstance(policy, StackValidationPolicy):
            found += [(name, message) for _, message in stack_violations_of(policy, resources, config)]
            continue
        for urn, obj in resources:
            found += [(name, message) for message in violations_of(policy, obj, config, stack, urn)]
    return found
