// Package langhost is what the tier's own language hosts for Go and Node.js share: serving the
// LanguageRuntime service to the engine, the calls every host answers alike, the program's config in
// its environment, running a program, and binding a package schema for code generation.
package langhost

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Base answers the calls every host answers alike; a host embeds it.
type Base struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	Version    string
	Engine     string
	RunCtx     context.Context
	cancelRuns context.CancelFunc
}

// Serve parses the flags the engine passes (those in `ignored` accepted and unused), health-checks the
// engine, serves the host on a port it prints, and returns when the engine goes away.
func Serve(version string, ignored []string, newHost func(base Base) pulumirpc.LanguageRuntimeServer) {
	flag.String("tracing", "", "accepted for compatibility; tracing is not supported")
	for _, name := range ignored {
		flag.String(name, "", "accepted for compatibility")
	}
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
	base := Base{Version: version, Engine: engine, RunCtx: runCtx, cancelRuns: cancelRuns}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancelled,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, newHost(base))
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

// ConfigEnvironment is the program's config as the SDKs read it: PULUMI_CONFIG (a JSON object) and
// PULUMI_CONFIG_SECRET_KEYS (a JSON array).
func ConfigEnvironment(req *pulumirpc.RunRequest) ([]string, error) {
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
	return []string{"PULUMI_CONFIG=" + string(config), "PULUMI_CONFIG_SECRET_KEYS=" + string(secretJSON)}, nil
}

// RunProgram runs a program to its end: interrupted when the run's context or the host is cancelled,
// its output on the host's, its failure the engine's RunResponse error.
func (b *Base) RunProgram(ctx context.Context, dir string, env []string, name string, args ...string) *pulumirpc.RunResponse {
	cmdCtx, cancel := context.WithCancel(b.RunCtx)
	defer cancel()
	context.AfterFunc(ctx, cancel)
	cmd := exec.CommandContext(cmdCtx, name, args...)
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("problem executing the program: %v", err)}
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode())}
	}
	return &pulumirpc.RunResponse{}
}

// BindPackage reads a package schema as upstream's hosts do before code generation: bound with the
// engine's schema loader, dangling references allowed.
func BindPackage(schemaJSON, loaderTarget string) (*schema.Package, schema.ReferenceLoader, func(), error) {
	client, err := schema.NewLoaderClient(loaderTarget)
	if err != nil {
		return nil, nil, nil, err
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal([]byte(schemaJSON), &spec); err != nil {
		client.Close()
		return nil, nil, nil, fmt.Errorf("could not read the package schema: %w", err)
	}
	loader := schema.NewCachedLoader(client)
	pkg, diags, err := schema.BindSpec(spec, loader, schema.ValidationOptions{AllowDanglingReferences: true})
	if err == nil && diags.HasErrors() {
		err = fmt.Errorf("the package schema is invalid: %w", diags)
	}
	if err != nil {
		client.Close()
		return nil, nil, nil, err
	}
	return pkg, loader, func() { client.Close() }, nil
}

// WriteFiles writes generated files (and the request's extra files) under dir.
func WriteFiles(dir string, files map[string][]byte, extra map[string][]byte) error {
	for name, data := range extra {
		files[name] = data
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// SDK is a generated SDK a Link request names: its directory, and that directory relative to the
// program's.
type SDK struct {
	Dir, Relative string
}

// LinkedSDKs are the SDKs of a Link request, each path made absolute from the project's root.
func LinkedSDKs(req *pulumirpc.LinkRequest) ([]SDK, error) {
	program := req.GetInfo().GetProgramDirectory()
	var sdks []SDK
	for _, dependency := range req.GetPackages() {
		dir := dependency.GetPath()
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(req.GetInfo().GetRootDirectory(), dir)
		}
		relative, err := filepath.Rel(program, dir)
		if err != nil {
			return nil, err
		}
		sdks = append(sdks, SDK{Dir: dir, Relative: "./" + filepath.ToSlash(relative)})
	}
	return sdks, nil
}

// StreamCommand runs a command in dir with its output streamed to the engine (InstallDependencies).
func StreamCommand(
	server pulumirpc.LanguageRuntime_InstallDependenciesServer, terminal bool, dir, name string, args ...string,
) error {
	closer, stdout, stderr, err := rpcutil.MakeInstallDependenciesStreams(server, terminal)
	if err != nil {
		return err
	}
	defer closer.Close()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s in %s: %w", name, dir, err)
	}
	return closer.Close()
}

func (b *Base) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (b *Base) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (b *Base) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: b.Version}, nil
}

func (b *Base) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (b *Base) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return &pulumirpc.AboutResponse{}, nil
}

func (b *Base) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	b.Engine = req.GetEngineAddress()
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (b *Base) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	b.cancelRuns()
	return &emptypb.Empty{}, nil
}
