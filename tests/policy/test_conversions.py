"""The pack's analyzer converts each request's properties once for all its policies (policy/conversions.py):
the SDK's own `Analyze`, in this process, with its conversions counted, answers the same with and without."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("pulumi_policy")

import conversions  # noqa: E402
import crossguard  # noqa: E402
import pulumi_policy.policy as sdk  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402
from pulumi.runtime.proto import analyzer_pb2  # noqa: E402
from pulumi_policy import EnforcementLevel  # noqa: E402

from tests.policy.conftest import job_of, stack_objects  # noqa: E402
from tests.policy.feeding import type_token, urn_of  # noqa: E402


def _request(obj: dict[str, Any]) -> Any:
    props = struct_pb2.Struct()
    props.update(obj)
    return analyzer_pb2.AnalyzeRequest(
        type=type_token(obj), properties=props, urn=urn_of(obj), name="mnist-r1"
    )


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The SDK module's three conversions and the pack's plain copy, counted (monkeypatch puts the
    originals back after)."""
    calls = dict.fromkeys((*conversions.NAMES, "plain"), 0)

    def counting(name: str, convert: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return convert(*args, **kwargs)

        return counted

    to_dict = counting("json_format", sdk.json_format.MessageToDict)
    monkeypatch.setattr(sdk, "json_format", type("JsonFormat", (), {"MessageToDict": staticmethod(to_dict)}))
    for name in conversions.NAMES[1:]:
        monkeypatch.setattr(sdk, name, counting(name, getattr(sdk, name)))
    monkeypatch.setattr(crossguard.plain_once, "convert", counting("plain", crossguard.plain))
    return calls


def _diagnostics(response: Any) -> list[tuple[str, str]]:
    return [(d.policyName, d.message) for d in response.diagnostics]


def test_one_conversion_per_request_and_the_same_diagnostics(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counted(monkeypatch)
    servicer = sdk._PolicyAnalyzerServicer(
        crossguard.PACK_NAME, "0.1.0", crossguard.policies(), EnforcementLevel.MANDATORY
    )
    resource_policies = [p for p in crossguard.policies() if isinstance(p, sdk.ResourceValidationPolicy)]
    job = job_of(stack_objects("eks-gpu"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "HF_TOKEN", "value": "canary-Token-Value-5e4d3c"})
    request = _request(job)

    per_policy = _diagnostics(servicer.Analyze(request, None))
    assert calls == dict.fromkeys(calls, len(resource_policies)) and len(resource_policies) > 1
    assert "no-secret-literals-in-env" in {name for name, _ in per_policy}, per_policy

    conversions.share_conversions(sdk)
    conversions.share_conversions(sdk)  # a second call changes nothing
    calls.update(dict.fromkeys(calls, 0))
    assert _diagnostics(servicer.Analyze(request, None)) == per_policy
    assert calls == dict.fromkeys(calls, 1)
    # Another request is converted anew, and so is the same one on another thread.
    other = _request(job)
    assert _diagnostics(servicer.Analyze(other, None)) == per_policy
    assert calls == dict.fromkeys(calls, 2)
    # The policies shared one plain copy of the request, and none of them wrote to it.
    props, shared = crossguard.plain_once._last.pair
    assert props is sdk.unknown_checking_proxy._last.pair[1] and shared == job
    answered: list[Any] = []
    thread = threading.Thread(target=lambda: answered.append(servicer.Analyze(other, None)))
    thread.start()
    thread.join(timeout=60)
    assert [_diagnostics(r) for r in answered] == [per_policy]
    assert calls == dict.fromkeys(calls, 3)


def test_a_call_with_more_arguments_converts_anew() -> None:
    seen: list[tuple[Any, ...]] = []
    shared = conversions.LastResult(lambda *args: seen.append(args) or len(seen))
    props: dict[str, Any] = {"a": 1}
    answers = [shared(props), shared(props), shared(props, True), shared(props), shared({"a": 1})]
    assert answers == [1, 1, 2, 1, 3]
    assert seen == [(props,), (props, True), ({"a": 1},)]


def test_an_sdk_without_the_names_stops_the_pack() -> None:
    module = type("Sdk", (), {"json_format": object(), "deserialize_properties": print})
    with pytest.raises(RuntimeError, match="pulumi_policy.policy has no unknown_checking_proxy"):
        conversions.share_conversions(module)
