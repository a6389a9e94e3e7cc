//go:build tools

// Package parts pins cert-manager's module: the local cluster takes its CRDs (deploy/crds) from it.
// Its controllers are not built: their main packages are nested modules (cmd/controller,
// cmd/cainjector) that the module proxy does not serve.
package parts

import (
	_ "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
)
