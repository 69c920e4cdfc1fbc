package harness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// DockerdArgs are the arguments of a private dockerd living in dir: its
// socket (host, the DOCKER_HOST for it), data, exec root and pid file there,
// its own containerd namespaces (should a system containerd be shared), and
// no iptables rules or bridge, so the host network is left alone.
func DockerdArgs(dir string) (host string, args []string) {
	host = "unix://" + dir + "/docker.sock"
	ns := "agentic-" + filepath.Base(dir)
	return host, []string{"--iptables=false", "--bridge=none", "--log-level=warn", "-H", host,
		"--data-root", dir + "/root", "--exec-root", dir + "/exec", "--pidfile", dir + "/pid",
		"--containerd-namespace", ns, "--containerd-plugins-namespace", ns + "-plugins"}
}

// StartDockerd starts the docker runtime's test engine and returns its
// DOCKER_HOST. It predates StartEngine, which callers should use instead
// (StartEngine("docker"), or NeedEngine in a test).
func StartDockerd() (string, func(), error) {
	e, err := StartEngine("docker")
	if err != nil {
		return "", nil, err
	}
	return e.Getenv("DOCKER_HOST"), e.Stop, nil
}

// startDockerEngine runs a private dockerd on its own directories and
// socket (DOCKER_HOST in the engine's Env), without touching the host
// network (no iptables, no bridge). Stop ends it and removes its directories.
func startDockerEngine() (Engine, error) {
	if err := canRunDockerd(); err != nil {
		return Engine{}, err
	}
	dir, err := os.MkdirTemp("/tmp", "bd")
	if err != nil {
		return Engine{}, err
	}
	host, stop, err := StartDockerdIn(dir)
	if err != nil {
		return Engine{}, err
	}
	return Engine{Env: []string{"DOCKER_HOST=" + host}, stop: stop}, nil
}

// StartCheckpointDockerEngine is the docker engine of StartEngine("docker")
// started to checkpoint containers (CheckpointDockerd): environments on it
// hibernate with their memory.
func StartCheckpointDockerEngine() (Engine, error) {
	if err := canRunDockerd(); err != nil {
		return Engine{}, err
	}
	dir, err := os.MkdirTemp("/tmp", "bc")
	if err != nil {
		return Engine{}, err
	}
	host, stop, err := StartCheckpointDockerd(dir)
	if err != nil {
		return Engine{}, err
	}
	return Engine{Runtime: "docker", Env: []string{"DOCKER_HOST=" + host}, stop: stop}, nil
}

func canRunDockerd() error {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return &Missing{What: "dockerd", How: testEnvHow("docker")}
	}
	if os.Geteuid() != 0 {
		return &Missing{What: "root (a private dockerd)", How: "run the tests as root, as `make test` in CI does"}
	}
	return nil
}

// StartDockerdIn runs a private dockerd living in dir (DockerdArgs), made
// beforehand by the caller and short enough for a socket path, and
// returns its DOCKER_HOST once it answers. stop ends it and removes dir.
func StartDockerdIn(dir string) (host string, stop func(), err error) {
	return StartDockerdWith(dir)
}

// StartDockerdWith is StartDockerdIn with more arguments for dockerd
// (--config-file registering a runtime, say).
func StartDockerdWith(dir string, extra ...string) (host string, stop func(), err error) {
	return StartDockerdEnv(dir, nil, extra...)
}

// CriuSbin is where scripts/criu/build-criu.sh (run by make test-env)
// installs the criu that a checkpointing dockerd runs.
const CriuSbin = "/var/cache/agentic-criu/4.1.1-p2/sbin"

// CheckpointDockerd is what a dockerd needs to checkpoint containers here
// (docs/benchmarks.md, "CRIU 4.1.1 tried"): the environment putting
// CriuSbin first in its PATH (runc runs criu from there), and the
// arguments --experimental and --init-path naming docker-init's real file
// (criu cannot restore the bind mount of a symlink, which Debian's
// docker-init is). An error, saying how to get it, when criu is missing.
func CheckpointDockerd() (env, args []string, err error) {
	if _, err := os.Stat(filepath.Join(CriuSbin, "criu")); err != nil {
		return nil, nil, &Missing{What: "criu 4.1.1 (" + CriuSbin + "/criu)", How: "run make test-env (scripts/criu/build-criu.sh builds it)"}
	}
	args = []string{"--experimental"}
	if init, err := exec.LookPath("docker-init"); err == nil {
		if real, err := filepath.EvalSymlinks(init); err == nil {
			args = append(args, "--init-path", real)
		}
	}
	return []string{"PATH=" + CriuSbin + ":" + os.Getenv("PATH")}, args, nil
}

// StartCheckpointDockerd is StartDockerdIn for a dockerd that checkpoints
// (CheckpointDockerd), in a mount namespace of its own: a CRIU restore
// mounts a cgroup yard for a moment (/tmp/.criu.cgyard.*), and a libvirtd
// seeing it then takes it for the cgroup root and refuses to start or
// restore a domain. Mounts made outside still reach it (slave).
func StartCheckpointDockerd(dir string) (host string, stop func(), err error) {
	env, args, err := CheckpointDockerd()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return startDockerd(dir, env, true, args...)
}

// StartDockerdEnv is StartDockerdWith with variables added to dockerd's
// environment (env, as KEY=value; later ones win).
func StartDockerdEnv(dir string, env []string, extra ...string) (host string, stop func(), err error) {
	return startDockerd(dir, env, false, extra...)
}

func startDockerd(dir string, env []string, ownMounts bool, extra ...string) (host string, stop func(), err error) {
	if err := canRunDockerd(); err != nil {
		return "", nil, err
	}
	bin, _ := exec.LookPath("dockerd")
	host, args := DockerdArgs(dir)
	cmd := exec.Command(bin, append(args, extra...)...)
	if ownMounts {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return "", nil, &Missing{What: "unshare (util-linux)", How: "apt-get install util-linux"}
		}
		cmd = exec.Command(unshare, append([]string{"--mount", "--propagation", "slave", bin}, append(args, extra...)...)...)
	}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		// dockerd leaves its exec root and overlay mounts behind only when killed.
		_ = exec.Command("umount", "-R", dir+"/root").Run()
		_ = os.RemoveAll(dir)
	}
	for range 300 {
		if exec.Command("docker", "-H", host, "version").Run() == nil {
			return host, stop, nil
		}
		select {
		case <-exited:
			stop()
			return "", nil, errors.New("dockerd exited at start")
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return "", nil, errors.New("dockerd did not answer within 30s")
}
