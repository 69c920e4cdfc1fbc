package libvirt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// prepareDisk makes a disk image's per-domain files: a qcow2 overlay backed
// by the image (the image itself is never written) and a cloud-init NoCloud
// seed ISO (volume "cidata") that installs the agent: user-data writes
// agent.env and a systemd unit, and copies the agent binary from the seed.
func (r *Runtime) prepareDisk(ctx context.Context, image, overlay, seed, name string, env map[string]string, agentBinary string, diskGB int) error {
	format, err := r.imageFormat(ctx, image)
	if err != nil {
		return err
	}
	args := []string{"create", "-q", "-f", "qcow2", "-F", format, "-b", image, overlay}
	if diskGB > 0 {
		args = append(args, fmt.Sprintf("%dG", diskGB))
	}
	if out, err := exec.CommandContext(ctx, r.cfg.QemuImg, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("libvirt: qemu-img create: %v: %s", err, out)
	}
	if err := os.Chmod(overlay, 0o600); err != nil {
		return err
	}
	return r.writeSeed(ctx, seed, name, env, agentBinary)
}

func (r *Runtime) imageFormat(ctx context.Context, image string) (string, error) {
	out, err := exec.CommandContext(ctx, r.cfg.QemuImg, "info", "--output=json", image).Output()
	if err != nil {
		return "", fmt.Errorf("%w: image %s: qemu-img info: %v", ports.ErrInvalidSpec, image, err)
	}
	var info struct {
		Format  string `json:"format"`
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.Format == "" {
		return "", fmt.Errorf("%w: image %s: unknown format", ports.ErrInvalidSpec, image)
	}
	if info.Backing != "" && r.cfg.DiskImageDir != "" {
		return "", fmt.Errorf("%w: image %s has a backing file (%s): only self-contained images are booted", ports.ErrInvalidSpec, image, info.Backing)
	}
	if info.Format != "qcow2" && info.Format != "raw" {
		return "", fmt.Errorf("%w: image %s: format %s, want qcow2 or raw", ports.ErrInvalidSpec, image, info.Format)
	}
	return info.Format, nil
}

func (r *Runtime) isoTool() (string, error) {
	if r.cfg.ISOTool != "" {
		return r.cfg.ISOTool, nil
	}
	for _, t := range []string{"genisoimage", "mkisofs", "xorrisofs"} {
		if p, err := exec.LookPath(t); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: a disk image needs a cloud-init seed ISO, and none of genisoimage, mkisofs, xorrisofs is installed (apt-get install genisoimage)", ports.ErrInvalidSpec)
}

// writeSeed writes the NoCloud seed ISO.
func (r *Runtime) writeSeed(ctx context.Context, seed, name string, env map[string]string, agentBinary string) error {
	tool, err := r.isoTool()
	if err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Dir(seed), ".seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	files := map[string]string{
		"meta-data": "instance-id: " + name + "\nlocal-hostname: " + name + "\n",
		"user-data": userData(env, agentBinary != ""),
	}
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(stage, f), []byte(content), 0o600); err != nil {
			return err
		}
	}
	args := []string{"-quiet", "-input-charset", "utf-8", "-output", seed, "-volid", "cidata", "-joliet", "-rock", "-graft-points",
		"user-data=" + filepath.Join(stage, "user-data"), "meta-data=" + filepath.Join(stage, "meta-data")}
	if agentBinary != "" {
		args = append(args, "agentic-agent="+agentBinary)
	}
	if out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("libvirt: %s: %v: %s", filepath.Base(tool), err, out)
	}
	return os.Chmod(seed, 0o600)
}

// userData is the cloud-config that installs and starts the agent.
func userData(env map[string]string, withBinary bool) string {
	indent := func(s string) string {
		return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ") + "\n"
	}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	b.WriteString("write_files:\n")
	b.WriteString("  - path: /etc/agentic-sandbox/agent.env\n    permissions: '0600'\n    content: |\n")
	b.WriteString(indent(formatEnv(env)))
	b.WriteString("  - path: /etc/systemd/system/agentic-agent.service\n    permissions: '0644'\n    content: |\n")
	b.WriteString(indent(`[Unit]
Description=agentic-sandbox agent
After=local-fs.target

[Service]
ExecStart=/usr/local/bin/agentic-agent
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target`))
	b.WriteString("runcmd:\n")
	if withBinary {
		b.WriteString(`  - [sh, -c, "mkdir -p /run/agentic-seed && mount -o ro LABEL=cidata /run/agentic-seed && install -m 0755 /run/agentic-seed/agentic-agent /usr/local/bin/agentic-agent; umount /run/agentic-seed"]` + "\n")
	}
	b.WriteString("  - [systemctl, daemon-reload]\n")
	b.WriteString("  - [systemctl, enable, --now, agentic-agent.service]\n")
	return b.String()
}
