"""Reads of the API server for the program's own waits (`infra/program/job/runwatch.py`), with the
credentials the Kubernetes provider uses.

The provider (pulumi-kubernetes v4.25 `provider/pkg/provider/provider.go` Configure) takes
`kubernetes:kubeconfig` (a path or the file's contents) when set, else client-go's default loading
rules (`$KUBECONFIG`, then `~/.kube/config`, then the in-cluster service account), with
`kubernetes:context` choosing the context. The reader resolves them in that order with the Kubernetes
Python client, which runs a kubeconfig's exec plugins (`aws eks get-token`, `gke-gcloud-auth-plugin`,
`kubelogin`) as kubectl does. It only ever GETs. `kubernetes:cluster` (a cluster override) is not
followed: a stack that sets it gets one clear line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.program.common import yamlio


class ReadError(Exception):
    """The API server could not be read (anything but 404)."""


class KubeConfigError(Exception):
    """The provider's cluster settings cannot be followed by the program's reader."""


def _client(kubeconfig: str | None, context: str | None) -> Any:
    import yaml
    from kubernetes import client, config  # imported here: only `pulumi up` and preview read the cluster

    try:
        if kubeconfig and ("\n" in kubeconfig or kubeconfig.lstrip().startswith(("{", "apiVersion"))):
            return config.new_client_from_config_dict(yamlio.load(kubeconfig), context=context)
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        if any(Path(p).expanduser().is_file() for p in default.split(os.pathsep) if p):
            # Passed explicitly: the client reads $KUBECONFIG once, when it is imported.
            return config.new_client_from_config(config_file=default, context=context)
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, yaml.YAMLError) as error:
        raise KubeConfigError(f"cannot load the provider's kubeconfig: {error}") from None


class KubeReader:
    """`runwatch.ClusterReader` over the Kubernetes Python client's ApiClient (raw GETs, JSON)."""

    def __init__(self, kubeconfig: str | None, context: str | None, cluster: str | None = None) -> None:
        if cluster:
            raise KubeConfigError(
                "kubernetes:cluster is set: the program's waits cannot follow a cluster override; "
                "choose the cluster with kubernetes:context instead"
            )
        self._api = _client(kubeconfig, context)

    def _get(self, path: str, query: Mapping[str, str] | None = None) -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            method, url, headers, _, _ = self._api.param_serialize(
                "GET",
                path,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(method, url, header_params=headers, _request_timeout=30)
            data = response.read()
        except ApiException as error:
            raise ReadError(f"GET {path}: {error.status} {error.reason}") from None
        except (HTTPError, OSError) as error:
            raise ReadError(f"GET {path}: {error}") from None
        if response.status == 404:
            return None
        if response.status >= 300:
            raise ReadError(f"GET {path}: {response.status} {response.reason}")
        body: Mapping[str, Any] = json.loads(data)
        return body

    def get(self, path: str) -> Mapping[str, Any] | None:
        return self._get(path)

    def items(self, path: str, query: Mapping[str, str] | None = None) -> list[Mapping[str, Any]]:
        found = self._get(path, query)
        return list((found or {}).get("items") or [])


def provider_reader() -> KubeReader:
    """A reader with the stack's `kubernetes:*` config, as the default provider takes it."""
    import pulumi

    config = pulumi.Config("kubernetes")
    # The raw value (a path, or a kubeconfig set with --secret): never logged, never exported.
    kubeconfig = pulumi.runtime.get_config("kubernetes:kubeconfig")
    return KubeReader(kubeconfig or None, config.get("context"), config.get("cluster"))
