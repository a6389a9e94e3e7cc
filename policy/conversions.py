"""One conversion of a resource's properties per `Analyze` request, shared by the pack's policies.

pulumi-policy 1.21.0 converts the properties of each `Analyze` request again for every resource policy
(`pulumi_policy/policy.py`, `_PolicyAnalyzerServicer.Analyze`): `json_format.MessageToDict`, then
`deserialize_properties`, then `unknown_checking_proxy`, inside its loop over the policies. For a CRD
with its whole schema (KServe's are 730-840 KiB) that is about half a second per policy, nine times per
resource. `share_conversions` makes the three calls return, on the same thread, the result of the last
call with the same argument object, so each request is converted once:

- `request.properties` is the same object while one request is analyzed (protobuf's upb messages hand
  out one object per field), and each later step receives the object the step before returned;
- a new request, another resource of `AnalyzeStack`'s list or a call with more arguments (the
  remediation path's `deserialize_properties(..., True)`) converts anew, as before;
- the last argument is held, so its identity cannot pass to another object; per thread, because the
  SDK's server answers requests on a pool of four.

The policies share the converted properties, and the plain copy the rules read
(`crossguard.plain_once`, shared the same way); none of them writes to either. The engine's own gRPC
messages are never changed.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import pulumi_policy.policy as sdk

NAMES = ("json_format", "deserialize_properties", "unknown_checking_proxy")


class LastResult:
    """`convert`, returning the last result again while the same object is passed alone, per thread."""

    def __init__(self, convert: Callable[..., Any]) -> None:
        self.convert = convert
        self._last = threading.local()

    def __call__(self, arg: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return self.convert(arg, *args, **kwargs)
        last = getattr(self._last, "pair", None)
        if last is not None and last[0] is arg:
            return last[1]
        result = self.convert(arg)
        self._last.pair = (arg, result)
        return result


def share_conversions(module: Any = sdk) -> None:
    """Convert each request's properties once in `module` (the SDK's analyzer), for every policy.

    Raises RuntimeError if the SDK no longer has the three names, so that an upgrade that moves them
    fails the pack's start (and its tests) instead of silently converting per policy again.
    """
    missing = [name for name in NAMES if not hasattr(module, name)]
    if missing:
        raise RuntimeError(f"pulumi_policy.policy has no {', '.join(missing)}: see policy/conversions.py")
    if isinstance(module.deserialize_properties, LastResult):
        return
    json_format = module.json_format
    module.json_format = types.SimpleNamespace(
        **{name: getattr(json_format, name) for name in dir(json_format) if not name.startswith("__")}
    )
    module.json_format.MessageToDict = LastResult(json_format.MessageToDict)
    module.deserialize_properties = LastResult(module.deserialize_properties)
    module.unknown_checking_proxy = LastResult(module.unknown_checking_proxy)
