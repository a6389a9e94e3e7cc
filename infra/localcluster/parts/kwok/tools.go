//go:build tools

// Package parts pins the main packages this wrapper builds, so `go mod tidy` keeps their dependencies.
package parts

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
