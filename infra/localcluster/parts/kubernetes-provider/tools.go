//go:build tools

// Package parts pins the main packages this wrapper builds, so `go mod tidy` keeps their dependencies.
package parts

import (
	_ "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
)
