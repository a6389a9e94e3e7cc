// Command pulumi-language-nodejs is the Node.js language host the local tier's Pulumi CLI starts.
//
// Upstream's host (module github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3) is
// untagged and the module proxy serves none of its commits, so this small host stands in for it, as
// language-python does for Python. It serves what a TypeScript or JavaScript program that uses a
// component package needs:
//   - Run: the program through @pulumi/pulumi's own runner (node_modules/@pulumi/pulumi/cmd/run), with
//     the arguments and environment upstream's host gives it (its flags --monitor, --engine, --project,
//     --stack, ...; PULUMI_CONFIG, PULUMI_CONFIG_SECRET_KEYS; PULUMI_NODEJS_TYPESCRIPT unless the
//     project's runtime option typescript is false);
//   - GeneratePackage: the package's Node.js SDK, by pkg/v3's own code generator (codegen/nodejs);
//   - Link: `npm install` of that SDK's directory into the program;
//   - InstallDependencies: `npm install` in the program directory.
//
// Anything else (templates, converting programs, debugging, pnpm or yarn) answers Unimplemented.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"ddp-mnist.local/parts/pulumi/langhost"
	nodegen "github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

var version = "0.0.0-local"

func main() {
	langhost.Serve(version, []string{"typescript", "tsconfig", "nodeargs", "packagemanager"},
		func(base langhost.Base) pulumirpc.LanguageRuntimeServer { return &host{Base: base} })
}

type host struct {
	langhost.Base
}

// runner finds @pulumi/pulumi's program runner in the node_modules of the program's directory or above.
func runner(dir string) (string, error) {
	for at := dir; ; at = filepath.Dir(at) {
		candidate := filepath.Join(at, "node_modules", "@pulumi", "pulumi", "cmd", "run")
		if _, err := os.Stat(filepath.Join(candidate, "index.js")); err == nil {
			return candidate, nil
		}
		if filepath.Dir(at) == at {
			return "", fmt.Errorf("no @pulumi/pulumi in the node_modules of %s or above: run `npm install`", dir)
		}
	}
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	dir := req.GetInfo().GetProgramDirectory()
	run, err := runner(dir)
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	args := []string{run}
	add := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.Engine)
	add("organization", req.GetOrganization())
	add("project", req.GetProject())
	add("root-directory", req.GetInfo().GetRootDirectory())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	if req.GetDryRun() {
		args = append(args, "--dry-run")
	}
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	entry := req.GetInfo().GetEntryPoint()
	if entry == "" {
		entry = "."
	}
	args = append(append(args, entry), req.GetArgs()...)

	config, err := langhost.ConfigEnvironment(req)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), config...)
	if typescript, ok := req.GetInfo().GetOptions().AsMap()["typescript"].(bool); !ok || typescript {
		env = append(env, "PULUMI_NODEJS_TYPESCRIPT=true")
	}
	return h.RunProgram(ctx, req.GetPwd(), env, "node", args...), nil
}

// GeneratePackage writes a package's Node.js SDK (upstream pulumi-language-nodejs's GeneratePackage:
// bind the schema with the engine's loader, then codegen/nodejs; a local SDK compiles itself with tsc
// when npm installs it).
func (h *host) GeneratePackage(
	_ context.Context, req *pulumirpc.GeneratePackageRequest,
) (*pulumirpc.GeneratePackageResponse, error) {
	pkg, loader, done, err := langhost.BindPackage(req.GetSchema(), req.GetLoaderTarget())
	if err != nil {
		return nil, err
	}
	defer done()
	files, err := nodegen.GeneratePackage(
		"pulumi-language-nodejs", pkg, req.GetExtraFiles(), req.GetLocalDependencies(), req.GetLocal(), loader)
	if err != nil {
		return nil, err
	}
	if err := langhost.WriteFiles(req.GetDirectory(), files, nil); err != nil {
		return nil, err
	}
	return &pulumirpc.GeneratePackageResponse{}, nil
}

// Link installs each generated SDK's directory into the program (`npm install ./sdks/<name>`).
func (h *host) Link(_ context.Context, req *pulumirpc.LinkRequest) (*pulumirpc.LinkResponse, error) {
	sdks, err := langhost.LinkedSDKs(req)
	if err != nil {
		return nil, err
	}
	instructions := ""
	for _, sdk := range sdks {
		var manifest struct {
			Name string `json:"name"`
		}
		text, err := os.ReadFile(filepath.Join(sdk.Dir, "package.json"))
		if err == nil {
			err = json.Unmarshal(text, &manifest)
		}
		if err != nil {
			return nil, fmt.Errorf("the SDK at %s has no readable package.json: %w", sdk.Dir, err)
		}
		install := exec.Command("npm", "install", "--no-audit", "--no-fund", sdk.Relative)
		install.Dir = req.GetInfo().GetProgramDirectory()
		if out, err := install.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install in %s: %v: %s", install.Dir, err, out)
		}
		instructions += fmt.Sprintf("import * as pkg from %q;\n", manifest.Name)
	}
	return &pulumirpc.LinkResponse{ImportInstructions: instructions}, nil
}

// InstallDependencies runs `npm install` in the program's directory, its output streamed to the engine.
func (h *host) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	dir := req.GetInfo().GetProgramDirectory()
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		return nil
	}
	return langhost.StreamCommand(server, req.GetIsTerminal(), dir, "npm", "install", "--no-audit", "--no-fund")
}
