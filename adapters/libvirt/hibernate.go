package libvirt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Hibernation (ports.HibernateMemory): a running domain's memory and device
// state are saved to a file of its own, EnvDir/hibernate.save — the libvirt
// save image the pool templates are made of (DomainSaveFlags; Wake is
// DomainRestoreFlags, a restore, not a boot) — and QEMU ends, so the
// guest's RAM and CPU are freed; the domain stays defined (shut off).
//
// On disk, in the environment's folder (qemuFolder: QEMU writes and reads
// the file through libvirt):
//   - hibernate.save.tmp: the save being written;
//   - hibernate.json: the record (when, size, CRC-32C of the whole file),
//     written once the save is complete;
//   - hibernate.save: the finished save. A shut-off domain with this file is
//     hibernated (Inspect, List, Recover say EnvHibernated, with the file's
//     size as SavedBytes), whatever libvirtd or this server did meanwhile.
//
// A record without its save, or a save whose size or checksum is not the
// record's (truncated, garbled), or one the restore refuses (QEMU cannot
// load it, or what it needs is gone: restoreRefusedState), is a lost
// state: Wake fails with ErrSavedStateLost, the domain stays shut off, and
// the reason is kept in hibernate.lost, so that Inspect, List and Recover
// report the environment EnvFailed with that reason (also after a restart)
// rather than hibernated. A restore that fails on the host's side (QEMU
// does not start, libvirtd refuses for now) with a sound save loses
// nothing: the environment stays hibernated, its save kept, and the next
// Wake tries again. A corrupt save is removed; one QEMU refused is
// kept as hibernate.save.lost to be looked at. Start boots such an
// environment afresh (its memory is gone) and Destroy removes it all.
//
// The agent link across a hibernation: Hibernate ends the domain's relay
// before the save, so the guest sees the host side of its port go away
// while it still runs: its agent's stream ends and it dials again at once
// (adapters/agentd: a registered serial link that ends is redialled after
// 100 ms, not the 5 s backoff), and that dial's first write blocks in the
// guest kernel until a host side connects. The guest is saved like that,
// as a pool template is, so when Wake restores it and starts a relay, the
// pending connection goes straight through and the agent registers under
// its own identity (its id and secret are in its memory). Had the guest
// been saved with a live link, the restored agent would instead hold a
// stream whose server side is long gone until a write or ping found out.

const (
	hibernateFile   = "hibernate.save"
	hibernateRecord = "hibernate.json"
	hibernateLost   = "hibernate.lost"
	// hibernateAgentAway bounds the wait, between ending the relay and the
	// save, for the agent to see its link end (logged on the console) and
	// dial again; hibernateAgentRedial is that dial's wait in the agent
	// (agentd's serialRedial) with a margin.
	hibernateAgentAway   = 3 * time.Second
	hibernateAgentRedial = 300 * time.Millisecond
	// agentLinkEndedLine is what the agent logs when its stream ends.
	agentLinkEndedLine = "agent stream ended"
)

// crc32c is the checksum of a saved state: fast (SSE 4.2), so checking
// a 100 MB save at Wake costs tens of milliseconds.
var crc32c = crc32.MakeTable(crc32.Castagnoli)

// savedRecord is hibernate.json.
type savedRecord struct {
	At     time.Time `json:"at"`
	Bytes  int64     `json:"bytes"`
	CRC32C uint32    `json:"crc32c"`
	// HeadBytes and HeadCRC32C cover the file's start up to QEMU's
	// stream (libvirt's header and the domain XML, what libvirt acts on
	// before QEMU runs): checked before a restore, the whole file while
	// it runs. Absent in records of older servers (the whole file is
	// then checked while the restore runs, the head check being only the
	// magic and size).
	HeadBytes  int64  `json:"head_bytes,omitempty"`
	HeadCRC32C uint32 `json:"head_crc32c,omitempty"`
}

// SavePath is the file a hibernated environment's memory is saved to.
func (r *Runtime) SavePath(name string) string {
	return filepath.Join(r.EnvDir(name), hibernateFile)
}

func (r *Runtime) recordPath(name string) string {
	return filepath.Join(r.EnvDir(name), hibernateRecord)
}

// saved describes the environment's saved state: ok is false when there is
// no finished save (the environment is not hibernated).
func (r *Runtime) saved(name string) (ports.Hibernation, bool) {
	st, err := os.Stat(r.SavePath(name))
	if err != nil {
		return ports.Hibernation{}, false
	}
	h := ports.Hibernation{Mode: ports.HibernateMemory, Bytes: st.Size(), At: st.ModTime().UTC()}
	if rec, err := r.readRecord(name); err == nil && !rec.At.IsZero() {
		h.At = rec.At
	}
	return h, true
}

func (r *Runtime) readRecord(name string) (savedRecord, error) {
	var rec savedRecord
	b, err := os.ReadFile(r.recordPath(name))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", hibernateRecord, err)
	}
	return rec, nil
}

// hibernated fills in a shut-off environment that is hibernated, or whose
// saved state was lost.
func (r *Runtime) hibernated(env *ports.Environment) {
	if env.State != ports.EnvStopped {
		return
	}
	if h, ok := r.saved(env.Name); ok {
		env.State, env.Detail = ports.EnvHibernated, ""
		env.HibernatedAt, env.SavedBytes = h.At, h.Bytes
	} else if why, ok := r.lost(env.Name); ok {
		env.State, env.Detail = ports.EnvFailed, why
	}
}

func (r *Runtime) lostPath(name string) string {
	return filepath.Join(r.EnvDir(name), hibernateLost)
}

// lost reports why the environment's saved state was lost, if it was.
func (r *Runtime) lost(name string) (string, bool) {
	b, err := os.ReadFile(r.lostPath(name))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// markLost records a Wake's ErrSavedStateLost: the reason in
// hibernate.lost, the save removed (corrupt) or set aside (keep: QEMU
// refused a sound-looking one), the record gone.
func (r *Runtime) markLost(name string, why error, keep bool) {
	if err := writeFileSync(r.lostPath(name), []byte(why.Error())); err != nil {
		r.log.Warn("cannot record a lost saved state", "env", name, "err", err)
		return
	}
	if keep {
		_ = os.Rename(r.SavePath(name), r.SavePath(name)+".lost")
	} else {
		_ = os.Remove(r.SavePath(name))
	}
	_ = os.Remove(r.recordPath(name))
	r.log.Warn("the saved state of a hibernated environment is lost", "env", name, "err", why)
}

// forgetLost removes what a lost saved state left (Start boots afresh).
func (r *Runtime) forgetLost(name string) {
	for _, f := range []string{r.lostPath(name), r.SavePath(name) + ".lost", r.SavePath(name), r.recordPath(name)} {
		_ = os.Remove(f)
	}
}

// Hibernate implements ports.Runtime: it saves a running environment's
// memory to its folder and ends its QEMU process and relay (see above).
// Only a running environment hibernates: a paused, stopped or failed one is
// refused with an error wrapping ports.ErrInvalidSpec; a hibernated one is
// left as it is and its hibernation returned.
func (r *Runtime) Hibernate(ctx context.Context, name string) (ports.Hibernation, error) {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return ports.Hibernation{}, err
	}
	st, detail, err := r.state(lv, o.dom)
	if err != nil {
		return ports.Hibernation{}, err
	}
	if st == ports.EnvStopped {
		if h, ok := r.saved(name); ok {
			return h, nil
		}
	}
	if st != ports.EnvRunning || detail != "" {
		what := string(st)
		if detail != "" {
			what += " (" + detail + ")"
		}
		return ports.Hibernation{}, fmt.Errorf("%w: environment %s is %s: only a running environment hibernates", ports.ErrInvalidSpec, name, what)
	}
	if r.identityPending(name) {
		// A pool member restored from a template whose agent has not
		// taken its identity yet: the identity goes with this relay.
		return ports.Hibernation{}, fmt.Errorf("%w: environment %s: its agent has not registered yet", ports.ErrInvalidSpec, name)
	}
	if err := qemuFolder(r.EnvDir(name)); err != nil {
		return ports.Hibernation{}, fmt.Errorf("libvirt: %w", err)
	}
	tmp := r.SavePath(name) + ".tmp"
	_ = os.Remove(tmp)
	r.forgetLost(name)

	start := time.Now()
	r.letAgentGo(ctx, name)
	away := time.Since(start)
	if err := ctx.Err(); err != nil {
		r.startRelay(name, o.meta.Socket, nil)
		return ports.Hibernation{}, err
	}
	if err := lv.DomainSaveFlags(o.dom, tmp, nil, 0); err != nil {
		_ = os.Remove(tmp)
		// The guest still runs (a failed save resumes it): its link too.
		if st, _, serr := r.state(lv, o.dom); serr == nil && st == ports.EnvRunning {
			r.startRelay(name, o.meta.Socket, nil)
		}
		return ports.Hibernation{}, r.lverr(lv, "save "+o.dom.Name, err)
	}
	saved := time.Since(start)
	h, err := r.finishSave(name)
	if err != nil {
		// The guest exists only in the save now, which cannot be kept
		// (disk full?): run it again rather than leave it in between.
		err = fmt.Errorf("libvirt: hibernate %s: %w", name, err)
		if rerr := lv.DomainRestoreFlags(tmp, nil, r.restoreFlags(false)); rerr != nil {
			r.log.Error("a hibernation that could not be kept cannot be undone either; the saved state is left for Recover", "env", name, "file", tmp, "err", rerr)
			return ports.Hibernation{}, err
		}
		_ = os.Remove(tmp)
		_ = os.Remove(r.recordPath(name))
		r.startRelay(name, o.meta.Socket, nil)
		return ports.Hibernation{}, err
	}
	r.log.Info("hibernated", "env", name, "bytes", h.Bytes, "agent_away", away.Round(time.Millisecond),
		"save", (saved - away).Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	return h, nil
}

// identityPending reports whether the environment's relay still holds an
// identity its guest has not asked for.
func (r *Runtime) identityPending(name string) bool {
	r.relayMu.Lock()
	rl := r.relays[name]
	r.relayMu.Unlock()
	if rl == nil {
		return false
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.identity != nil
}

// letAgentGo ends the environment's relay and waits (bounded) for the
// guest's agent to see its link end and dial again, so that the guest is
// saved with that dial pending (see above). A guest whose agent is not
// connected is not waited for.
func (r *Runtime) letAgentGo(ctx context.Context, name string) {
	_, connected := r.Relaying(name)
	console := r.ConsolePath(name)
	var from int64
	if st, err := os.Stat(console); err == nil {
		from = st.Size()
	}
	r.stopRelay(name)
	if !connected {
		return
	}
	deadline := time.Now().Add(hibernateAgentAway)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if consoleHas(console, from, agentLinkEndedLine) {
			select {
			case <-ctx.Done():
			case <-time.After(hibernateAgentRedial):
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.log.Warn("the agent did not log the end of its link before the save; it reconnects late after Wake", "env", name)
}

// consoleHas reports whether the console log has line after offset from.
func consoleHas(path string, from int64, line string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	return err == nil && bytes.Contains(b, []byte(line))
}

// finishSave turns a complete hibernate.save.tmp into the hibernation: its
// record written and synced, then the file renamed into place.
func (r *Runtime) finishSave(name string) (ports.Hibernation, error) {
	tmp := r.SavePath(name) + ".tmp"
	f, err := os.Open(tmp)
	if err != nil {
		return ports.Hibernation{}, err
	}
	var head int64
	if img, err := readSaveImage(f); err == nil {
		head = img.streamFrom
	}
	sum := crc32.New(crc32c)
	n, err := io.CopyN(sum, f, head)
	headSum := sum.Sum32()
	if err == nil {
		var m int64
		m, err = io.Copy(sum, f)
		n += m
	}
	if err == nil {
		// The guest exists only in this file now: a host crash must not
		// lose it.
		err = f.Sync()
	}
	var st os.FileInfo
	if err == nil {
		st, err = f.Stat()
	}
	f.Close()
	if err != nil {
		return ports.Hibernation{}, err
	}
	if st.Size() != n || n < int64(len(saveMagic)) {
		return ports.Hibernation{}, fmt.Errorf("the save of %d bytes changed while read (%d)", st.Size(), n)
	}
	rec := savedRecord{At: time.Now().UTC(), Bytes: n, CRC32C: sum.Sum32(), HeadBytes: head, HeadCRC32C: headSum}
	b, _ := json.Marshal(rec)
	if err := writeFileSync(r.recordPath(name), b); err != nil {
		return ports.Hibernation{}, err
	}
	if err := os.Rename(tmp, r.SavePath(name)); err != nil {
		return ports.Hibernation{}, err
	}
	if d, err := os.Open(r.EnvDir(name)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return ports.Hibernation{Mode: ports.HibernateMemory, Bytes: n, At: rec.At}, nil
}

func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// checkSaved checks the saved state against its record: ErrSavedStateLost
// when it is missing, cut short or garbled.
func (r *Runtime) checkSaved(name string) error {
	rec, err := r.checkHead(name)
	if err != nil {
		return err
	}
	return r.checkRest(name, rec)
}

func lostState(name, format string, a ...any) error {
	return fmt.Errorf("%w: environment %s: %s", ports.ErrSavedStateLost, name, fmt.Sprintf(format, a...))
}

// checkHead is the part of checkSaved a restore waits for: the record, the
// file's magic and size, and the checksum of its head (see savedRecord).
func (r *Runtime) checkHead(name string) (savedRecord, error) {
	rec, rerr := r.readRecord(name)
	f, err := os.Open(r.SavePath(name))
	if err != nil {
		return rec, lostState(name, "%v", err)
	}
	defer f.Close()
	if rerr != nil {
		return rec, lostState(name, "its record: %v", rerr)
	}
	magic := make([]byte, len(saveMagic))
	// (libvirt's test driver saves a format of its own.)
	if _, err := io.ReadFull(f, magic); err != nil || (string(magic) != saveMagic && r.domType != "test") {
		return rec, lostState(name, "%s is not a libvirt save image", hibernateFile)
	}
	st, err := f.Stat()
	if err != nil {
		return rec, lostState(name, "%v", err)
	}
	if st.Size() != rec.Bytes {
		return rec, lostState(name, "%s has %d bytes, %d were saved", hibernateFile, st.Size(), rec.Bytes)
	}
	if rec.HeadBytes > 0 {
		sum := crc32.New(crc32c)
		if _, err := io.Copy(sum, io.NewSectionReader(f, 0, rec.HeadBytes)); err != nil {
			return rec, lostState(name, "reading %s: %v", hibernateFile, err)
		}
		if sum.Sum32() != rec.HeadCRC32C {
			return rec, lostState(name, "%s is corrupt (the checksum of its header is not the saved one's)", hibernateFile)
		}
	}
	return rec, nil
}

// checkRest checks the checksum of the whole saved state.
func (r *Runtime) checkRest(name string, rec savedRecord) error {
	f, err := os.Open(r.SavePath(name))
	if err != nil {
		return lostState(name, "%v", err)
	}
	defer f.Close()
	sum := crc32.New(crc32c)
	n, err := io.Copy(sum, f)
	if err != nil {
		return lostState(name, "reading %s: %v", hibernateFile, err)
	}
	if n != rec.Bytes {
		return lostState(name, "%s has %d bytes, %d were saved", hibernateFile, n, rec.Bytes)
	}
	if sum.Sum32() != rec.CRC32C {
		return lostState(name, "%s is corrupt (its checksum is not the saved one's)", hibernateFile)
	}
	return nil
}

// Wake implements ports.Runtime: it restores a hibernated environment from
// its saved state (a restore, not a boot), removes the saved state and
// starts its relay; the guest's agent reconnects under its own identity. A
// running environment is left as it is. A saved state that is missing, cut
// short or garbled, or that the restore refuses, is ErrSavedStateLost and
// the domain stays shut off; any other failure leaves it hibernated, shut
// off, for the next Wake. A paused environment, or a stopped one that was
// not hibernated, is refused with ErrInvalidSpec (Resume it, Start it).
func (r *Runtime) Wake(ctx context.Context, name string) error {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return err
	}
	return r.wake(ctx, lv, o)
}

// wake is Wake under the environment's lock.
func (r *Runtime) wake(ctx context.Context, lv *golibvirt.Libvirt, o owned) error {
	name := o.meta.Name
	st, detail, err := r.state(lv, o.dom)
	if err != nil {
		return err
	}
	switch st {
	case ports.EnvRunning:
		r.startRelay(name, o.meta.Socket, nil)
		return nil
	case ports.EnvPaused:
		return fmt.Errorf("%w: environment %s is paused, not hibernated (resume it)", ports.ErrInvalidSpec, name)
	}
	if why, ok := r.lost(name); ok {
		if _, err := os.Stat(r.SavePath(name)); err != nil {
			return fmt.Errorf("%w: environment %s: %s (start it to boot it afresh)", ports.ErrSavedStateLost, name, why)
		}
	}
	if _, err := os.Stat(r.SavePath(name)); errors.Is(err, os.ErrNotExist) {
		if _, rerr := os.Stat(r.recordPath(name)); rerr != nil && detail != "saved" {
			return fmt.Errorf("%w: environment %s is %s, not hibernated (start it)", ports.ErrInvalidSpec, name, st)
		}
	}
	start := time.Now()
	rec, err := r.checkHead(name)
	if err != nil {
		r.markLost(name, err, false)
		return err
	}
	if err := qemuFolder(r.EnvDir(name)); err != nil {
		return fmt.Errorf("libvirt: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The rest of the file (QEMU's stream: the guest's memory and
	// devices, ~100 MB, 15-40 ms to checksum) is checked while libvirt
	// starts QEMU for the restore, which takes ten times longer. The
	// domain is restored paused and runs only once that check passed: a
	// guest is never resumed from a state that failed it. Its relay starts
	// then too, dialling as soon as the restored QEMU listens, so the
	// guest's pending connection goes through as it resumes.
	checked := make(chan error, 1)
	var checkTook time.Duration
	go func() {
		err := r.checkRest(name, rec)
		checkTook = time.Since(start)
		if err == nil {
			r.startRelayWith(name, o.meta.Socket, nil, true)
		}
		checked <- err
	}()
	restoreStart := time.Now()
	err = lv.DomainRestoreFlags(r.SavePath(name), nil, r.restoreFlags(true))
	if cerr := <-checked; cerr != nil {
		r.stopRelay(name)
		if st, _, serr := r.state(lv, o.dom); serr == nil && st != ports.EnvStopped {
			_ = lv.DomainDestroy(o.dom)
		}
		r.markLost(name, cerr, false)
		return cerr
	}
	if err != nil {
		r.stopRelay(name)
		// A failed restore leaves no QEMU; make sure.
		if st, _, serr := r.state(lv, o.dom); serr == nil && st != ports.EnvStopped {
			_ = lv.DomainDestroy(o.dom)
		}
		if restoreRefusedState(err) {
			err = fmt.Errorf("%w: environment %s: restore: %v", ports.ErrSavedStateLost, name, err)
			r.markLost(name, err, true)
			return err
		}
		// The save passed its checks and the restore did not find fault
		// with it: the host failed (QEMU could not start, libvirtd
		// refused for now). It stays hibernated for the next Wake.
		return r.lverr(lv, "restore "+o.dom.Name, err)
	}
	if r.domType != "test" { // (the test driver restores it running)
		if err := lv.DomainResume(o.dom); err != nil {
			// The saved state is still there: a later Wake tries again.
			r.stopRelay(name)
			_ = lv.DomainDestroy(o.dom)
			return r.lverr(lv, "resume "+o.dom.Name+" after its restore", err)
		}
	}
	restored := time.Now()
	// Renamed now, removed after: unlinking 100 MB takes a while.
	_ = os.Remove(r.recordPath(name))
	_ = os.Remove(r.lostPath(name))
	old := r.SavePath(name) + ".old"
	if err := os.Rename(r.SavePath(name), old); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("cannot remove the saved state of a woken environment", "env", name, "err", err)
	}
	r.later(func() {
		if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("cannot remove the saved state of a woken environment", "env", name, "err", err)
		}
	})
	r.log.Info("woken", "env", name, "check", checkTook.Round(time.Millisecond), "restore", restored.Sub(restoreStart).Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// stateRefusals are what libvirt and QEMU say when a restore fails on
// the saved state itself (QEMU refusing its stream, libvirt its header or
// domain XML) or on what it needs that is gone for good (its disk,
// kernel or initrd): a restore that tries again fails again.
var stateRefusals = []string{
	"load of migration failed", "error while loading state", "not a migration stream",
	"savevm section", "section footer", "migration flags", "missing section",
	"image magic", "qemu header", "save image",
	"cannot access storage file", "could not load kernel", "could not load initrd", "could not load initial ram disk",
}

// restoreRefusedState reports whether a failed DomainRestoreFlags failed
// on the saved state (stateRefusals, or a domain XML this libvirt will
// not take), rather than on the host: QEMU or its cgroup, socket or
// monitor failing as it started, a busy or stopping libvirtd, a broken
// connection (not a libvirt error at all).
func restoreRefusedState(err error) bool {
	var le golibvirt.Error
	if !errors.As(err, &le) {
		return false
	}
	switch le.Code {
	case uint32(golibvirt.ErrXMLError), uint32(golibvirt.ErrXMLDetail), uint32(golibvirt.ErrConfigUnsupported):
		return true
	}
	msg := strings.ToLower(le.Message)
	for _, s := range stateRefusals {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// restoreFlags are DomainRestoreFlags' flags: running, or paused,
// whatever the save says.
func (r *Runtime) restoreFlags(paused bool) uint32 {
	if r.domType == "test" {
		return 0 // the test driver takes none (and restores it running)
	}
	if paused {
		return uint32(golibvirt.DomainSavePaused)
	}
	return uint32(golibvirt.DomainSaveRunning)
}

// later runs f in the background (Close waits for it), or now once closed.
func (r *Runtime) later(f func()) {
	r.relayMu.Lock()
	defer r.relayMu.Unlock()
	if r.closed {
		f()
		return
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f()
	}()
}

// recoverSave finishes a hibernation that a crash of this server cut off
// between libvirt's save and the record (the domain is shut off and the
// save complete), and removes a save that never completed.
func (r *Runtime) recoverSave(env ports.Environment) ports.Environment {
	_ = os.Remove(r.SavePath(env.Name) + ".old") // woken before a crash
	tmp := r.SavePath(env.Name) + ".tmp"
	if _, err := os.Stat(tmp); err != nil {
		return env
	}
	if env.State != ports.EnvStopped {
		// Running: the save failed (or is still being made by libvirtd,
		// which then shuts the domain off: the next Hibernate redoes it).
		return env
	}
	if _, ok := r.saved(env.Name); ok {
		_ = os.Remove(tmp)
		return env
	}
	if _, err := r.finishSave(env.Name); err != nil {
		r.log.Warn("a hibernation cut off by a restart cannot be finished", "env", env.Name, "err", err)
		return env
	}
	r.log.Info("finished a hibernation cut off by a restart", "env", env.Name)
	r.hibernated(&env)
	return env
}
