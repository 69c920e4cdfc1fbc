package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Warm pool members of the tiny image are not booted: they are restored
// from a template, a saved guest that booted once with an agent that waits
// to be told who it is (AGENT_IDENTITY_FROM_LINK). Under TCG a restore runs
// the guest in about 0.7 s where a boot takes 5 to 6 s, for a tenth of the
// CPU (docs/vm-restore.md). The template's agent never connected and holds
// no credential: each clone's relay answers its hello with the member's own
// identity and the host's clock. A clone is defined with its own initrd and
// agent.env, so a later Stop/Start cold-boots it as itself.

const (
	templatesDir = ".templates" // under StateDir; not an environment name
	// templateReadyLine is what the template's agent logs on the console
	// once it waits for its identity: the guest is then worth saving.
	templateReadyLine = "waiting for this agent's identity over the agent link"
	// templateRetryAfter spaces attempts to make a template that failed.
	templateRetryAfter = 10 * time.Minute
	templateBootLimit  = 3 * time.Minute
)

// templateFor describes the template a plan can be cloned from: the same
// domain type, vCPUs, memory, network, kernel, command line, initrd and
// agent, and the same environment for the agent bar its identity.
type templateFor struct {
	key, shape string
	plan       domainPlan
	env        map[string]string // the plan's agent environment without an identity
}

// templateOf works out the template of a tiny-image plan.
func (r *Runtime) templateOf(lv *golibvirt.Libvirt, plan domainPlan) (templateFor, error) {
	tenv := maps.Clone(plan.agentEnv)
	delete(tenv, "AGENT_ID")
	delete(tenv, "AGENT_SECRET")
	tenv["AGENT_IDENTITY_FROM_LINK"] = "1"
	libVer, err := lv.ConnectGetLibVersion()
	if err != nil {
		return templateFor{}, err
	}
	hvVer, err := lv.ConnectGetVersion()
	if err != nil {
		return templateFor{}, err
	}
	h := sha256.New()
	add := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	add(r.domType, strconv.FormatUint(uint64(plan.VCPUs), 10), strconv.FormatUint(uint64(plan.MemoryMiB), 10), string(plan.Network))
	shape := hex.EncodeToString(h.Sum(nil))[:12]
	add(plan.Kernel, plan.Cmdline, strconv.FormatUint(libVer, 10), strconv.FormatUint(hvVer, 10))
	for _, f := range []string{plan.Kernel, plan.baseInitrd, plan.addedAgent} {
		if f == "" {
			add("")
			continue
		}
		sum, err := r.sums.sum(f)
		if err != nil {
			return templateFor{}, err
		}
		add(sum)
	}
	for _, k := range slices.Sorted(maps.Keys(tenv)) {
		add(k, tenv[k])
	}
	key := shape + "-" + hex.EncodeToString(h.Sum(nil))[:20]
	return templateFor{key: key, shape: shape, plan: plan, env: tenv}, nil
}

func (r *Runtime) templatePath(key string) string {
	return filepath.Join(r.cfg.StateDir, templatesDir, key+".sav")
}

// template returns the saved template, making it first when there is none
// (a cold boot and a save, 7 to 10 s under TCG). One at a time per key.
func (r *Runtime) template(ctx context.Context, lv *golibvirt.Libvirt, t templateFor) (saveImage, error) {
	unlock := r.tmplLocks.Lock(t.key)
	defer unlock()
	path := r.templatePath(t.key)
	if img, err := readSaveImageFile(path); err == nil {
		return img, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("dropping an unusable VM template", "template", t.key, "err", err)
		_ = os.Remove(path)
	}
	r.tmplMu.Lock()
	failedAt := r.tmplFailed[t.key]
	r.tmplMu.Unlock()
	if time.Since(failedAt) < templateRetryAfter {
		return saveImage{}, errors.New("the last attempt to make this template failed; booting until it is retried")
	}
	start := time.Now()
	img, err := r.makeTemplate(ctx, lv, t)
	if err != nil {
		if ctx.Err() == nil {
			r.tmplMu.Lock()
			r.tmplFailed[t.key] = time.Now()
			r.tmplMu.Unlock()
		}
		return saveImage{}, err
	}
	r.log.Info("made a VM template", "template", t.key, "took", time.Since(start).Round(time.Millisecond))
	r.pruneTemplates(t)
	return img, nil
}

// makeTemplate boots the template's guest with no relay (its agent's link
// must never have been up: a restored clone would carry a dead HTTP/2
// connection), waits for its agent to ask who it is, and saves it.
func (r *Runtime) makeTemplate(ctx context.Context, lv *golibvirt.Libvirt, t templateFor) (saveImage, error) {
	// Short: the channel socket's path must fit a unix socket address.
	dir := filepath.Join(r.cfg.StateDir, templatesDir, t.key[:8]+".build")
	p := t.plan
	p.DomainName = r.templateDomain(t.key)
	// Recover's clean-up of a crashed process's builds must leave this one.
	r.tmplMu.Lock()
	r.tmplActive[p.DomainName] = []string{dir, r.templatePath(t.key) + ".tmp"}
	r.tmplMu.Unlock()
	defer func() {
		r.tmplMu.Lock()
		delete(r.tmplActive, p.DomainName)
		r.tmplMu.Unlock()
	}()
	p.Initrd = filepath.Join(dir, "initrd.img")
	p.Console = filepath.Join(dir, "console.log")
	p.Channel = filepath.Join(dir, "agent.sock")
	p.Meta = envMeta{Owner: r.templateOwner(), Name: "tmpl-" + t.key, Created: time.Now().UTC().Format(time.RFC3339Nano), Network: p.Network, Dir: dir}
	p.UUID = ""
	_ = os.RemoveAll(dir)
	if err := qemuFolder(dir); err != nil {
		return saveImage{}, err
	}
	defer os.RemoveAll(dir)
	if err := writeInitrd(p.Initrd, p.baseInitrd, t.env, p.addedAgent); err != nil {
		return saveImage{}, fmt.Errorf("template initrd: %w", err)
	}
	x, err := domainXML(p)
	if err != nil {
		return saveImage{}, err
	}
	r.destroyTemplateDomain(lv, p.DomainName)
	dom, err := lv.DomainCreateXML(x, golibvirt.DomainNone)
	if err != nil {
		return saveImage{}, r.lverr(lv, "boot template "+p.DomainName, err)
	}
	saved := false
	defer func() {
		if !saved {
			_ = lv.DomainDestroy(dom)
			r.removeQemuLog(p.DomainName)
		}
	}()
	if err := waitConsole(ctx, p.Console, templateReadyLine, templateBootLimit, func() bool {
		st, _, err := lv.DomainGetState(dom, 0)
		return err == nil && golibvirt.DomainState(st) == golibvirt.DomainRunning
	}); err != nil {
		return saveImage{}, fmt.Errorf("template %s: %w", p.DomainName, err)
	}
	tmp := r.templatePath(t.key) + ".tmp"
	_ = os.Remove(tmp)
	if err := lv.DomainSaveFlags(dom, tmp, nil, 0); err != nil {
		_ = os.Remove(tmp)
		return saveImage{}, r.lverr(lv, "save template "+p.DomainName, err)
	}
	saved = true // a transient domain is gone once saved
	r.removeQemuLog(p.DomainName)
	img, err := readSaveImageFile(tmp)
	if err != nil {
		_ = os.Remove(tmp)
		return saveImage{}, fmt.Errorf("template %s: %w", p.DomainName, err)
	}
	if err := os.Rename(tmp, r.templatePath(t.key)); err != nil {
		_ = os.Remove(tmp)
		return saveImage{}, err
	}
	return img, nil
}

// pruneTemplates removes the templates of the same shape made from other
// files (an older kernel, initrd or agent): nothing will match them again.
func (r *Runtime) pruneTemplates(keep templateFor) {
	old, _ := filepath.Glob(filepath.Join(r.cfg.StateDir, templatesDir, keep.shape+"-*.sav"))
	for _, f := range old {
		if f != r.templatePath(keep.key) {
			_ = os.Remove(f)
		}
	}
}

func (r *Runtime) templateOwner() string { return r.cfg.Owner + "/template" }

func (r *Runtime) templateDomain(key string) string {
	return r.cfg.NamePrefix + "tmpl-" + key[:min(len(key), 20)]
}

func (r *Runtime) destroyTemplateDomain(lv *golibvirt.Libvirt, name string) {
	if dom, err := lv.DomainLookupByName(name); err == nil {
		_ = lv.DomainDestroy(dom)
		_ = lv.DomainUndefineFlags(dom, 0)
	}
}

// cleanTemplateBuilds destroys template guests a crash left running and
// their folders: a template that was being made when the server went (not
// one this process is making: a create may come in before Recover).
func (r *Runtime) cleanTemplateBuilds(lv *golibvirt.Libvirt) {
	r.tmplMu.Lock()
	active := maps.Clone(r.tmplActive)
	r.tmplMu.Unlock()
	doms, _, err := lv.ConnectListAllDomains(1, 0)
	if err == nil {
		for _, d := range doms {
			if _, mine := active[d.Name]; mine || !strings.HasPrefix(d.Name, r.cfg.NamePrefix+"tmpl-") {
				continue
			}
			x, err := lv.DomainGetXMLDesc(d, 0)
			if err != nil {
				continue
			}
			def := &libvirtxml.Domain{}
			if def.Unmarshal(x) != nil {
				continue
			}
			if meta, ok := parseMeta(def.Metadata); ok && meta.Owner == r.templateOwner() {
				r.log.Info("destroying a VM template left half made", "domain", d.Name)
				_ = lv.DomainDestroy(d)
				r.removeQemuLog(d.Name)
			}
		}
	}
	builds, _ := filepath.Glob(filepath.Join(r.cfg.StateDir, templatesDir, "*.build"))
	tmps, _ := filepath.Glob(filepath.Join(r.cfg.StateDir, templatesDir, "*.tmp"))
	building := map[string]bool{}
	for _, files := range active {
		for _, f := range files {
			building[f] = true
		}
	}
	for _, f := range append(builds, tmps...) {
		if !building[f] {
			_ = os.RemoveAll(f)
		}
	}
}

// cloneXML is the template's saved domain as the member: its name, a new
// UUID and generation id, its metadata, console, channel and initrd.
func cloneXML(saved string, p domainPlan) (string, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(saved); err != nil {
		return "", fmt.Errorf("template XML: %w", err)
	}
	if d.OS == nil || d.Devices == nil || len(d.Devices.Serials) != 1 || len(d.Devices.Channels) != 1 {
		return "", errors.New("template XML: not the tiny image's devices")
	}
	d.Name, d.UUID = p.DomainName, p.UUID
	// Empty: libvirt makes a new one, and the guest reseeds its RNG.
	d.GenID = &libvirtxml.DomainGenID{}
	d.Description = "agentic-sandbox environment " + p.Meta.Name + " (owner " + p.Meta.Owner + ")"
	d.Metadata = &libvirtxml.DomainMetadata{XML: p.Meta.marshal()}
	d.OS.Initrd = p.Initrd
	setFile := func(src *libvirtxml.DomainChardevSource) {
		if src != nil && src.File != nil {
			src.File.Path = p.Console
		}
	}
	setFile(d.Devices.Serials[0].Source)
	for i := range d.Devices.Consoles {
		setFile(d.Devices.Consoles[i].Source)
	}
	ch := d.Devices.Channels[0].Source
	if ch == nil || ch.UNIX == nil {
		return "", errors.New("template XML: the agent channel is not a unix socket")
	}
	ch.UNIX.Path = p.Channel
	return d.Marshal()
}

// restoreClone starts the member from the template: a copy of the save
// image with the member's XML, restored, then defined (a restored domain
// is transient) with the member's own configuration for later boots.
func (r *Runtime) restoreClone(lv *golibvirt.Libvirt, img saveImage, t templateFor, p domainPlan) (golibvirt.Domain, error) {
	p.UUID = uuid.NewString()
	x, err := cloneXML(img.xml, p)
	if err != nil {
		return golibvirt.Domain{}, err
	}
	src, err := os.Open(r.templatePath(t.key))
	if err != nil {
		return golibvirt.Domain{}, err
	}
	defer src.Close()
	clone := filepath.Join(p.Meta.Dir, "restore.sav")
	dst, err := os.OpenFile(clone, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return golibvirt.Domain{}, err
	}
	defer os.Remove(clone)
	err = writeClone(dst, src, img, x)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("clone of the template: %w", err)
	}
	if err := lv.DomainRestoreFlags(clone, nil, uint32(golibvirt.DomainSaveRunning)); err != nil {
		return golibvirt.Domain{}, r.lverr(lv, "restore "+p.DomainName, err)
	}
	dom, err := lv.DomainLookupByName(p.DomainName)
	if err != nil {
		return golibvirt.Domain{}, r.lverr(lv, "look up "+p.DomainName, err)
	}
	persistent, err := domainXML(p)
	if err == nil {
		_, err = lv.DomainDefineXMLFlags(persistent, golibvirt.DomainDefineValidate)
		if err != nil {
			err = r.lverr(lv, "define "+p.DomainName, err)
		}
	}
	if err != nil {
		_ = lv.DomainDestroy(dom)
		return golibvirt.Domain{}, err
	}
	return dom, nil
}

// linkIdentity is the answer to the clone's hello.
func linkIdentity(id, secret string) func() ([]byte, error) {
	return func() ([]byte, error) {
		return agentwire.EncodeLinkIdentity(agentwire.LinkIdentity{AgentID: id, Secret: secret, UnixNano: time.Now().UnixNano()})
	}
}

// waitConsole waits for line in a console log while alive holds.
func waitConsole(ctx context.Context, path, line string, limit time.Duration, alive func() bool) error {
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), line) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q on the console within %s", line, limit)
		}
		if i%20 == 19 && !alive() {
			return errors.New("the guest stopped before its agent was up")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restores says whether Provision restores this member from a template:
// warm pool members of the tiny image under QEMU, unless turned off.
func (r *Runtime) restores(spec ports.EnvironmentSpec, p domainPlan) bool {
	return !r.cfg.NoRestore && r.domType != "test" && p.Kernel != "" && p.Disk == "" &&
		(spec.Labels[ports.LabelPool] != "" || r.cfg.RestoreAll)
}

// tryRestore starts the member from its template, making the template
// first if needed; false means boot it instead (nothing is left over).
// wait says whether to make a missing template first (a pool member: it
// is not waited for by a caller).
func (r *Runtime) tryRestore(ctx context.Context, lv *golibvirt.Libvirt, p domainPlan, wait bool, progress func(string)) (golibvirt.Domain, bool) {
	t, err := r.templateOf(lv, p)
	if err != nil {
		r.log.Warn("no VM template; booting", "env", p.Meta.Name, "err", err)
		return golibvirt.Domain{}, false
	}
	if !wait {
		if _, err := os.Stat(r.templatePath(t.key)); err != nil {
			// Not worth a caller's wait: this one boots, the template is
			// made meanwhile for the next.
			r.makeTemplateLater(t)
			return golibvirt.Domain{}, false
		}
	}
	progress("template")
	img, err := r.template(ctx, lv, t)
	if err != nil {
		r.log.Warn("no VM template; booting", "env", p.Meta.Name, "template", t.key, "err", err)
		return golibvirt.Domain{}, false
	}
	progress("restore")
	dom, err := r.restoreClone(lv, img, t, p)
	if err != nil {
		// A template this libvirt or QEMU refuses now is dropped: the next
		// member makes a new one.
		r.log.Warn("restoring the VM template failed; dropping it and booting", "env", p.Meta.Name, "template", t.key, "err", err)
		_ = os.Remove(r.templatePath(t.key))
		return golibvirt.Domain{}, false
	}
	return dom, true
}

// makeTemplateLater makes t's template in the background, one at a time;
// Close waits for it.
func (r *Runtime) makeTemplateLater(t templateFor) {
	r.relayMu.Lock()
	defer r.relayMu.Unlock()
	if r.closed || r.tmplBuilding {
		return
	}
	r.tmplBuilding = true
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer func() {
			r.relayMu.Lock()
			r.tmplBuilding = false
			r.relayMu.Unlock()
		}()
		lv, err := r.conn(r.bgCtx)
		if err == nil {
			_, err = r.template(r.bgCtx, lv, t)
		}
		if err != nil && r.bgCtx.Err() == nil {
			r.log.Warn("no VM template made; VMs boot until one is", "template", t.key, "err", err)
		}
	}()
}
