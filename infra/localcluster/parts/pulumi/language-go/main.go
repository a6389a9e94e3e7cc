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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"

	gogen "github.com/pulumi/pulumi/pkg/v3/codegen/go"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"golang.org/x/mod/modfile"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

var version = "0.0.0-local"

// The version a program's go.mod requires a local SDK at; the replace directive names its directory.
const localVersion = "v0.0.0-00010101000000-000000000000"

func main() {
	flag.String("tracing", "", "accepted for compatibility; tracing is not supported")
	flag.String("binary", "", "accepted for compatibility; the program is always built from source")
	flag.String("buildTarget", "", "accepted for compatibility")
	flag.String("root", "", "accepted for compatibility")
	showVersion := flag.Bool("version", false, "print the plugin version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	engine := ""
	if flag.NArg() > 0 {
		engine = flag.Arg(0)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	cancelled := make(chan bool)
	go func() {
		<-ctx.Done()
		stop()
		close(cancelled)
	}()
	if engine != "" {
		if err := rpcutil.Healthcheck(ctx, engine, 5*time.Minute, stop); err != nil {
			cmdutil.Exit(fmt.Errorf("could not start the engine health check: %w", err))
		}
	}
	runCtx, cancelRuns := context.WithCancel(context.Background())
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancelled,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, &host{engine: engine, runCtx: runCtx, cancelRuns: cancelRuns})
			return nil
		},
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start the language host: %w", err))
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("language host stopped serving: %w", err))
	}
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	engine     string
	runCtx     context.Context
	cancelRuns context.CancelFunc
}

// programEnvironment is what the Go SDK's pulumi.Run reads (sdk/go/pulumi/run.go, getEnvInfo).
func (h *host) programEnvironment(req *pulumirpc.RunRequest) ([]string, error) {
	config, err := json.Marshal(req.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration secret keys: %w", err)
	}
	return append(os.Environ(),
		pulumi.EnvMonitor+"="+req.GetMonitorAddress(),
		pulumi.EnvEngine+"="+h.engine,
		pulumi.EnvOrganization+"="+req.GetOrganization(),
		pulumi.EnvProject+"="+req.GetProject(),
		pulumi.EnvStack+"="+req.GetStack(),
		pulumi.EnvPulumiRootDirectory+"="+req.GetInfo().GetRootDirectory(),
		pulumi.EnvDryRun+"="+strconv.FormatBool(req.GetDryRun()),
		pulumi.EnvParallel+"="+strconv.Itoa(int(req.GetParallel())),
		pulumi.EnvConfig+"="+string(config),
		pulumi.EnvConfigSecretKeys+"="+string(secretJSON),
	), nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	dir := req.GetInfo().GetProgramDirectory()
	env, err := h.programEnvironment(req)
	if err != nil {
		return nil, err
	}
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

	cmdCtx, cancel := context.WithCancel(h.runCtx)
	defer cancel()
	context.AfterFunc(ctx, cancel)
	cmd := exec.CommandContext(cmdCtx, binary, req.GetArgs()...)
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = req.GetPwd()
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("problem executing the program: %v", err)}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode()),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// GeneratePackage writes a package's Go SDK (upstream pulumi-language-go's GeneratePackage: bind the
// schema with the engine's loader, then codegen/go).
func (h *host) GeneratePackage(
	_ context.Context, req *pulumirpc.GeneratePackageRequest,
) (*pulumirpc.GeneratePackageResponse, error) {
	loader, err := schema.NewLoaderClient(req.GetLoaderTarget())
	if err != nil {
		return nil, err
	}
	defer loader.Close()
	var spec schema.PackageSpec
	if err := json.Unmarshal([]byte(req.GetSchema()), &spec); err != nil {
		return nil, fmt.Errorf("could not read the package schema: %w", err)
	}
	pkg, diags, err := schema.BindSpec(spec, schema.NewCachedLoader(loader), schema.ValidationOptions{
		AllowDanglingReferences: true,
	})
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("the package schema is invalid: %w", diags)
	}
	files, err := gogen.GeneratePackage("pulumi-language-go", pkg, req.GetLocalDependencies())
	if err != nil {
		return nil, err
	}
	for name, data := range req.GetExtraFiles() {
		files[name] = data
	}
	for name, data := range files {
		path := filepath.Join(req.GetDirectory(), name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.GeneratePackageResponse{}, nil
}

// Link makes the program's go.mod require each generated SDK and replace it with its directory.
func (h *host) Link(_ context.Context, req *pulumirpc.LinkRequest) (*pulumirpc.LinkResponse, error) {
	dir := req.GetInfo().GetProgramDirectory()
	instructions := ""
	for _, dependency := range req.GetPackages() {
		sdk := dependency.GetPath()
		if !filepath.IsAbs(sdk) {
			sdk = filepath.Join(req.GetInfo().GetRootDirectory(), sdk)
		}
		text, err := os.ReadFile(filepath.Join(sdk, "go.mod"))
		if err != nil {
			return nil, fmt.Errorf("the SDK at %s has no go.mod: %w", sdk, err)
		}
		module := modfile.ModulePath(text)
		relative, err := filepath.Rel(dir, sdk)
		if err != nil {
			return nil, err
		}
		edit := exec.Command("go", "mod", "edit",
			"-require="+module+"@"+localVersion, "-replace="+module+"=./"+filepath.ToSlash(relative))
		edit.Dir = dir
		if out, err := edit.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go mod edit in %s: %v: %s", dir, err, out)
		}
		instructions += fmt.Sprintf("import the package from %s (go.mod replaces it with ./%s)\n", module, relative)
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
	closer, stdout, stderr, err := rpcutil.MakeInstallDependenciesStreams(server, req.GetIsTerminal())
	if err != nil {
		return err
	}
	defer closer.Close()
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = dir
	tidy.Stdout, tidy.Stderr = stdout, stderr
	if err := tidy.Run(); err != nil {
		_, _ = io.WriteString(stderr, fmt.Sprintf("go mod tidy in %s: %v\n", dir, err))
		return err
	}
	return closer.Close()
}

func (h *host) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *host) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (h *host) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (h *host) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return &pulumirpc.AboutResponse{}, nil
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.engine = req.GetEngineAddress()
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.cancelRuns()
	return &emptypb.Empty{}, nil
}
