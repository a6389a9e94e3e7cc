"""The local scheduler: runs a stack's rendered workloads as local processes."""
