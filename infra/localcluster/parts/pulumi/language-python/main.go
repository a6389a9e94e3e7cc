// Command pulumi-language-python is the Python language host the local tier's Pulumi CLI starts.
//
// Upstream's host (module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) is untagged and
// the module proxy serves none of its commits, so this small host stands in for it. It does what upstream's
// does for `preview`, `up`, `refresh` and `destroy` of a pip/virtualenv project (upstream
// sdk/python/cmd/pulumi-language-python/main.go: main, Run, constructArguments, constructConfig, Handshake):
// it health-checks the engine, serves the LanguageRuntime service on a port it prints, and runs the
// program through the real `pulumi-language-python-exec` script of sdk/v3 (placed next to this binary)
// with the project's virtualenv, the engine's arguments, PULUMI_CONFIG and PULUMI_CONFIG_SECRET_KEYS.
// It reports no required packages: the local tier installs the Kubernetes provider plugin itself.
// It also runs Python plugins such as a policy pack (upstream RunPlugin, for a plugin directory with a
// __main__.py). Anything else (templates, packing, code generation, debugging, type checkers) answers
// Unimplemented.
package main

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
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The exit code with which the Python SDK says it has already shown the user what went wrong
// (upstream: pythonProcessExitedAfterShowingUserActionableMessage).
const exitAfterUserMessage = 32

var version = "0.0.0-local"

func main() {
	flag.String("tracing", "", "accepted for compatibility; tracing is not supported")
	showVersion := flag.Bool("version", false, "print the plugin version and exit")
	executor := flag.String("use-executor", "", "the program to run Python programs with")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	execPath := *executor
	if execPath == "" {
		self, err := os.Executable()
		if err != nil {
			cmdutil.Exit(fmt.Errorf("could not determine this executable: %w", err))
		}
		execPath = filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")
		if _, err := os.Stat(execPath); err != nil {
			cmdutil.Exit(fmt.Errorf("missing executor %s: %w", execPath, err))
		}
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
			pulumirpc.RegisterLanguageRuntimeServer(srv, &host{
				exec: execPath, engine: engine, runCtx: runCtx, cancelRuns: cancelRuns,
			})
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
	exec       string
	engine     string
	runCtx     context.Context
	cancelRuns context.CancelFunc
}

func pythonOptions(info *pulumirpc.ProgramInfo) (toolchain.PythonOptions, error) {
	opts := toolchain.PythonOptions{Root: info.GetRootDirectory(), ProgramDir: info.GetProgramDirectory()}
	values := info.GetOptions().AsMap()
	if venv, ok := values["virtualenv"]; ok {
		s, isString := venv.(string)
		if !isString {
			return opts, errors.New("virtualenv option must be a string")
		}
		opts.Virtualenv = s
	}
	if tc, ok := values["toolchain"]; ok && tc != "pip" {
		return opts, fmt.Errorf("toolchain %v is not supported by this language host (pip only)", tc)
	}
	opts.Toolchain = toolchain.Pip
	return opts, nil
}

// runArguments mirrors upstream's constructArguments: the engine's arguments, then the entry point.
func (h *host) runArguments(req *pulumirpc.RunRequest) []string {
	args := []string{h.exec}
	add := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engine)
	add("project", req.GetProject())
	add("root_directory", req.GetInfo().GetRootDirectory())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("organization", req.GetOrganization())
	args = append(args, req.GetInfo().GetEntryPoint())
	return append(args, req.GetArgs()...)
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	opts, err := pythonOptions(req.GetInfo())
	if err != nil {
		return nil, err
	}
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	cmdCtx, cancel := context.WithCancel(h.runCtx)
	defer cancel()
	context.AfterFunc(ctx, cancel)
	cmd, err := tc.Command(cmdCtx, h.runArguments(req)...)
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
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
	cmd.Env = append(env, "PULUMI_CONFIG="+string(config), "PULUMI_CONFIG_SECRET_KEYS="+string(secretJSON))

	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("problem executing program (could not run language executor): %v", err),
			}, nil
		}
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.ExitStatus() == exitAfterUserMessage {
			return &pulumirpc.RunResponse{Bail: true}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode()),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// RunPlugin runs a Python plugin, such as a policy pack (`--policy-pack DIR`): `python DIR ARGS...` with
// the plugin's virtualenv (PulumiPolicy.yaml's runtime options), in the engine's working directory and
// with its environment added, the plugin's output streamed back to the engine, then its exit code
// (upstream sdk/python/cmd/pulumi-language-python/main.go RunPlugin, its bare-directory case).
func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer) error {
	opts, err := pythonOptions(req.GetInfo())
	if err != nil {
		return err
	}
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return err
	}
	args := append([]string{req.GetInfo().GetProgramDirectory()}, req.GetArgs()...)
	cmd, err := tc.Command(server.Context(), args...)
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	cmd.Dir = req.GetPwd()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, req.GetEnv()...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return fmt.Errorf("could not run the plugin in %s: %w", req.GetInfo().GetProgramDirectory(), err)
		}
		return server.Send(&pulumirpc.RunPluginResponse{
			Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(exitErr.ExitCode())},
		})
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

// InstallDependencies installs nothing: the local tier builds the project's virtualenv itself.
func (h *host) InstallDependencies(
	*pulumirpc.InstallDependenciesRequest, pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	return nil
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
