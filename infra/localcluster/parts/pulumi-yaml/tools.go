//go:build tools

// Package parts pins the main packages this wrapper builds, so `go mod tidy` keeps their dependencies.
package parts

import (
	_ "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
)
