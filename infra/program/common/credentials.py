"""The S3/MinIO credentials Secret, or a checked reference to an existing one.

An existing Secret (`minioExistingSecret`, only with `createNamespace: false`) is read with
`Secret.get`: the engine runs that read in `pulumi preview` as well as `pulumi up`, and a Secret that is
not there fails it at once with one line, `resource '<namespace>/<name>' does not exist`, instead of
pods stuck in CreateContainerConfigError until a wait times out (see docs/ENGINE.md).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.config import S3Credentials
from infra.program.common.meta import ACCESS_KEY_ID, S3_CA_CONFIG_MAP, S3_CA_KEY, SECRET_ACCESS_KEY, labels
from infra.program.settings import PROJECT, Settings

READ_SECRET = f"{PROJECT}-s3-read"


class ObjectStoreCredentials(pulumi.ComponentResource):
    """Names the Secret the trainer reads its S3 keys from; creates it from secret config, or reads
    the existing one so that a missing Secret fails the deployment before any pod waits on it.

    Pods only ever see the values through `secretKeyRef`; the Secret's data never becomes an output.
    """

    secret_name: pulumi.Output[str]
    read_secret_name: pulumi.Output[str]  # the read-only pair's Secret, else the read/write one

    def __init__(
        self,
        name: str,
        settings: Settings,
        credentials: S3Credentials | None,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:credentials:ObjectStoreCredentials", name, {}, opts)
        if credentials is None:
            # The namespace is a plain name here (createNamespace false), so the read's id is known in
            # preview too. The job takes the name from the read, so it also waits for it. The provider
            # marks the read Secret's `data` secret in state; nothing here exports it.
            self.secret_name = self._existing(f"{name}-existing", settings, settings.minio_existing_secret)
        else:
            # Both are secret Outputs (require_secret): they stay encrypted in state.
            pair = (credentials.access_key_id, credentials.secret_access_key)
            self.secret_name = self._created(f"{name}-secret", f"{PROJECT}-s3", pair, settings, namespace)
        self.read_secret_name = self.secret_name
        if credentials is not None and credentials.read_access_key_id is not None:
            assert credentials.read_secret_access_key is not None  # the pair goes together (config.py)
            pair = (credentials.read_access_key_id, credentials.read_secret_access_key)
            self.read_secret_name = self._created(
                f"{name}-read-secret", READ_SECRET, pair, settings, namespace
            )
        elif settings.minio_read_existing_secret:
            self.read_secret_name = self._existing(
                f"{name}-read-existing", settings, settings.minio_read_existing_secret
            )
        self.register_outputs({"secret_name": self.secret_name, "read_secret_name": self.read_secret_name})

    def _created(
        self,
        resource: str,
        secret: str,
        pair: tuple[pulumi.Output[str], pulumi.Output[str]],
        settings: Settings,
        namespace: pulumi.Input[str],
    ) -> pulumi.Output[str]:
        """A Secret `secret` holding the key pair, under the names the S3 client reads; its name."""
        created = k8s.core.v1.Secret(
            resource,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=secret, namespace=namespace, labels=labels(settings, "credentials")
            ),
            type="Opaque",
            string_data={ACCESS_KEY_ID: pair[0], SECRET_ACCESS_KEY: pair[1]},
            opts=pulumi.ResourceOptions(parent=self),
        )
        return created.metadata.name

    def _existing(self, resource: str, settings: Settings, secret: str) -> pulumi.Output[str]:
        """The name of an existing Secret of the namespace, read so that a missing one fails at once."""
        found = k8s.core.v1.Secret.get(
            resource, f"{settings.namespace}/{secret}", opts=pulumi.ResourceOptions(parent=self)
        )
        return found.metadata.name


def ca_bundle_config_map(
    settings: Settings, namespace: pulumi.Input[str], parent: pulumi.Resource | None = None
) -> k8s.core.v1.ConfigMap | None:
    """The ConfigMap of minioCaBundle's certificates, which every pod reaching the store mounts."""
    from infra.program.checks.s3 import ca_bundle_text

    if not (settings.minio_ca_bundle and settings.minio_endpoint):
        return None
    text = ca_bundle_text(settings)
    assert text is not None  # checks.s3.ca_bundle read it already
    return k8s.core.v1.ConfigMap(
        "s3-ca",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=S3_CA_CONFIG_MAP, namespace=namespace, labels=labels(settings, "credentials")
        ),
        data={S3_CA_KEY: text},
        opts=pulumi.ResourceOptions(parent=parent),
    )
