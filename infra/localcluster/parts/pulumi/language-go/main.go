// Command pulumi-language-go is the Go language host the local tier's Pulumi CLI starts.
//
// Upstream's host (module github.com/pulumi/pulumi/sdk/go/pulumi-language-go/v3) is untagged and the
// module proxy serves none of its commits, so this small host stands in for it, as language-python does
// for Python. It serves what a Go program that uses a component package needs:
//   - Run: `go build` of the program directory, then the binary with the engine's settings in the
//     environment variables the Go SDK reads (sdk/go/pulumi/run.go: PULUMI_MONITOR, PULUMI_ENGINE,
//     PULUMI_PROJECT, PULUMI_STACK, PULUMI_CONFIG, ...);
//   - GeneratePackage: the Go SDK of a package, by pkg/v3's own code generator (codegen/go);
//   - Link: the program's go.mod requires that SDK, replaced by its local directory;
//   - InstallDependencies: `go mod tidy` in the program directory.
//
// Anything else (templates, converting programs, debugging) answers Unimplemented.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"ddp-mnist.local/parts/pulumi/langhost"
	gogen "github.com/pulumi/pulumi/pkg/v3/codegen/go"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"golang.org/x/mod/modfile"
)

var version = "0.0.0-local"

// The version a program's go.mod requires a local SDK at; the replace directive names its directory.
const localVersion = "v0.0.0-00010101000000-000000000000"

func main() {
	langhost.Serve(version, []string{"binary", "buildTarget", "root"}, func(base langhost.Base) pulumirpc.LanguageRuntimeServer {
		return &host{Base: base}
	})
}

type host struct {
	langhost.Base
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	dir := req.GetInfo().GetProgramDirectory()
	config, err := langhost.ConfigEnvironment(req)
	if err != nil {
		return nil, err
	}
	// What the Go SDK's pulumi.Run reads (sdk/go/pulumi/run.go, getEnvInfo).
	env := append(os.Environ(),
		pulumi.EnvMonitor+"="+req.GetMonitorAddress(),
		pulumi.EnvEngine+"="+h.Engine,
		pulumi.EnvOrganization+"="+req.GetOrganization(),
		pulumi.EnvProject+"="+req.GetProject(),
		pulumi.EnvStack+"="+req.GetStack(),
		pulumi.EnvPulumiRootDirectory+"="+req.GetInfo().GetRootDirectory(),
		pulumi.EnvDryRun+"="+strconv.FormatBool(req.GetDryRun()),
		pulumi.EnvParallel+"="+strconv.Itoa(int(req.GetParallel())),
	)
	built, err := os.MkdirTemp("", "pulumi-go-program-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(built)
	binary := filepath.Join(built, "program")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, ".")
	build.Dir = dir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("unable to build the Go program in %s: %v", dir, err)}, nil
	}
	return h.RunProgram(ctx, req.GetPwd(), append(env, config...), binary, req.GetArgs()...), nil
}

// GeneratePackage writes a package's Go SDK (upstream pulumi-language-go's GeneratePackage: bind the
// schema with the engine's loader, then codegen/go).
func (h *host) GeneratePackage(
	_ context.Context, req *pulumirpc.GeneratePackageRequest,
) (*pulumirpc.GeneratePackageResponse, error) {
	pkg, _, done, err := langhost.BindPackage(req.GetSchema(), req.GetLoaderTarget())
	if err != nil {
		return nil, err
	}
	defer done()
	files, err := gogen.GeneratePackage("pulumi-language-go", pkg, req.GetLocalDependencies())
	if err != nil {
		return nil, err
	}
	if err := langhost.WriteFiles(req.GetDirectory(), files, req.GetExtraFiles()); err != nil {
		return nil, err
	}
	return &pulumirpc.GeneratePackageResponse{}, nil
}

// Link makes the program's go.mod require each generated SDK and replace it with its directory.
func (h *host) Link(_ context.Context, req *pulumirpc.LinkRequest) (*pulumirpc.LinkResponse, error) {
	sdks, err := langhost.LinkedSDKs(req)
	if err != nil {
		return nil, err
	}
	instructions := ""
	for _, sdk := range sdks {
		text, err := os.ReadFile(filepath.Join(sdk.Dir, "go.mod"))
		if err != nil {
			return nil, fmt.Errorf("the SDK at %s has no go.mod: %w", sdk.Dir, err)
		}
		module := modfile.ModulePath(text)
		edit := exec.Command("go", "mod", "edit", "-require="+module+"@"+localVersion, "-replace="+module+"="+sdk.Relative)
		edit.Dir = req.GetInfo().GetProgramDirectory()
		if out, err := edit.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go mod edit in %s: %v: %s", edit.Dir, err, out)
		}
		instructions += fmt.Sprintf("import the package from %s (go.mod replaces it with %s)\n", module, sdk.Relative)
	}
	return &pulumirpc.LinkResponse{ImportInstructions: instructions}, nil
}

// InstallDependencies runs `go mod tidy` in the program's directory, its output streamed to the engine.
func (h *host) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	dir := req.GetInfo().GetProgramDirectory()
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil
	}
	return langhost.StreamCommand(server, req.GetIsTerminal(), dir, "go", "mod", "tidy")
}
