"""The local cluster's real node: containerd, runc and the CNI plugins from Debian's packages, the kubelet
and kube-proxy from the control plane's Kubernetes pin, joined to the local cluster next to KWOK's fake
nodes. Pods on it run for real, from images built on this machine (images.py); nothing is pulled.

- config.py: the files the node's processes read (containerd's, the kubelet's, kube-proxy's, the CNI's)
- host.py: the Debian packages it needs, the node's interface, sysctls, and what teardown must leave
- images.py: images written or built here and loaded into containerd, as `kind load` would
- node.py: start, join and stop the node (`python -m infra.localcluster.node up|down`)
"""
