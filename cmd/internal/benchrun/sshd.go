package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// startSSHD runs a throwaway sshd on a free loopback port with a fresh host
// key and a fresh client key, and returns a builder of ssh commands to it
// (extra ssh args, then the remote command) and a stop function.
func startSSHD() (func(...string) *exec.Cmd, func(), error) {
	d, err := startSSHDWithSCP()
	if err != nil {
		return nil, nil, err
	}
	return d.ssh, d.stop, nil
}

// sshdRun is a throwaway sshd: ssh builds `ssh … 127.0.0.1 CMD`, scp builds
// an scp between two paths, either written 127.0.0.1:PATH.
type sshdRun struct {
	ssh  func(...string) *exec.Cmd
	scp  func(src, dst string) *exec.Cmd
	stop func()
}

func startSSHDWithSCP() (sshdRun, error) {
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/sshd"); e != nil {
			return sshdRun{}, fmt.Errorf("sshd not installed (make deps installs openssh-server)")
		}
		sshd = "/usr/sbin/sshd"
	}
	dir, err := os.MkdirTemp("", "agentic-bench-ssh-")
	if err != nil {
		return sshdRun{}, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	for _, k := range []string{"host", "client"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			cleanup()
			return sshdRun{}, fmt.Errorf("ssh-keygen: %v %s", err, out)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "client.pub"))
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		cleanup()
		return sshdRun{}, err
	}
	port, err := harness.FreeBasePort()
	if err != nil {
		cleanup()
		return sshdRun{}, err
	}
	_ = os.MkdirAll("/run/sshd", 0o755)
	// HOME is the scratch dir: the user's shell start-up files (a
	// ~/.bashrc that bash runs under sshd) are not part of the floor, and
	// one that hangs (a stale pyenv lock: 60 s each) broke every ssh row.
	cfg := fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s/host\nAuthorizedKeysFile %s/authorized_keys\nPidFile %s/pid\nStrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\nSubsystem sftp internal-sftp\nSetEnv HOME=%s\n", port, dir, dir, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		cleanup()
		return sshdRun{}, err
	}
	d := exec.Command(sshd, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	var dlog bytes.Buffer
	d.Stderr = &dlog
	if err := d.Start(); err != nil {
		cleanup()
		return sshdRun{}, err
	}
	stop := func() { _ = d.Process.Kill(); _ = d.Wait(); cleanup() }
	build := func(args ...string) *exec.Cmd {
		remote := args[len(args)-1]
		a := []string{"-q", "-i", filepath.Join(dir, "client"), "-p", strconv.Itoa(port),
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"}
		a = append(a, args[:len(args)-1]...)
		return exec.Command("ssh", append(a, "127.0.0.1", remote)...)
	}
	var lastErr error
	for range 50 { // wait for sshd to listen
		out, err := build("true").CombinedOutput()
		if err == nil {
			scp := func(src, dst string) *exec.Cmd {
				return exec.Command("scp", "-q", "-i", filepath.Join(dir, "client"), "-P", strconv.Itoa(port),
					"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", src, dst)
			}
			return sshdRun{ssh: build, scp: scp, stop: stop}, nil
		}
		lastErr = fmt.Errorf("%v: %s %s", err, out, dlog.String())
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return sshdRun{}, lastErr
}

// sshTrue runs `true` over ssh through build, bounded so a hung ssh cannot
// hang the whole bench.
func sshTrue(build func(...string) *exec.Cmd) func() error {
	return func() error {
		cmd := build("true")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return err
		}
		timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%v: %s", err, out.String())
		}
		return nil
	}
}
