"""Settings: the job's rendezvous and the NetworkPolicy around its pods."""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic import field_validator, model_validator

from infra.program.settings.base import DEFAULT_MASTER_PORT, TRAINER_MASTER_PORT, SettingsGroup, key


class RendezvousSettings(SettingsGroup):
    """The master's port and the timeouts of the ranks meeting and talking."""

    job_master_port: int = key(
        "jobMasterPort",
        DEFAULT_MASTER_PORT,
        "Rendezvous port of the master (node rank 0). With jobKind trainjob the torch plugin fixes it "
        "at 29500, which the default then stands for.",
        ge=1024,
        le=65535,
    )
    job_master_wait_seconds: int = key(
        "jobMasterWaitSeconds",
        300,
        "How long a worker waits for the master's port before failing.",
        ge=1,
        le=3600,
    )
    job_dist_timeout_seconds: int = key(
        "jobDistTimeoutSeconds",
        600,
        "Collective timeout; a hung rank fails the job after this.",
        ge=30,
        le=86400,
    )

    @model_validator(mode="before")
    @classmethod
    def _trainjob_master_port(cls, data: Any) -> Any:
        """Under jobKind trainjob the default jobMasterPort (the v1 operator's 23456) stands for the
        torch plugin's fixed 29500. The Pulumi CLI hands a program every key's default as if set, so
        the default cannot be told apart from an explicit 23456; any other port is refused by a check."""
        if not isinstance(data, dict) or data.get("jobKind", data.get("job_kind")) != "trainjob":
            return data
        port = data.get("jobMasterPort", data.get("job_master_port"))
        if port is not None and str(port) != str(DEFAULT_MASTER_PORT):
            return data
        rest = {k: v for k, v in data.items() if k not in ("jobMasterPort", "job_master_port")}
        return {**rest, "jobMasterPort": TRAINER_MASTER_PORT}


class NetworkSettings(SettingsGroup):
    """What the job's pods may reach: each other, DNS and the S3 endpoint."""

    job_network_policy_peer_ports: Literal["all", "rendezvous-and-ephemeral"] = key(
        "jobNetworkPolicyPeerPorts",
        "all",
        "Ports the job's pods may use with each other: every TCP port (the policy's selector already "
        "confines it to the job), or only the rendezvous port and 32768-60999 (an endPort rule, which "
        "some network plugins do not support).",
    )
    job_dns_egress_cidrs: list[str] = key(
        "jobDnsEgressCidrs",
        ["169.254.20.10/32"],
        "Addresses (CIDRs) besides kube-system pods the job may send DNS to: node-local caches such as "
        "NodeLocal DNSCache (169.254.20.10); add 169.254.169.254/32 on GKE with Cloud DNS (the GKE "
        "stacks do), never elsewhere: on EKS and AKS it is the instance metadata service.",
    )
    job_network_policy: bool = key(
        "jobNetworkPolicy",
        True,
        "A NetworkPolicy that limits the job's pods to each other, DNS and the S3 endpoint, and one that "
        "denies every other pod of the namespace all traffic (ddp-mnist-default-deny; the seed's and the "
        "server's pods have their own); false leaves the job's traffic unrestricted and adds no "
        "default deny (for CNIs or DNS setups the policy does not fit).",
    )

    @field_validator("job_dns_egress_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"a list of CIDRs such as 169.254.20.10/32 ({cidr!r} is not one)") from None
        return value
