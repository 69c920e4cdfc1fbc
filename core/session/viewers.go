package session

import (
	"fmt"
	"sort"
)

// Role is what a viewer of a session may do.
type Role string

const (
	// Controller may type and resize; a session has at most one.
	Controller Role = "controller"
	// Observer sees the output only.
	Observer Role = "observer"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == Controller || r == Observer }

// Viewer is one viewer of a session and its role.
type Viewer struct {
	ID   string
	Role Role
}

// RoleChange tells the caller whose role changed (a role_changed frame each).
type RoleChange struct {
	ViewerID string
	Role     Role
}

// Join adds a viewer to a session, or changes the role of one already there,
// and returns the role granted. Rules:
//   - Asking for control when another viewer holds it does not fail: the
//     viewer is demoted to observer (and sees that in the granted role), so a
//     second tab or a late attach still gets the output; control only moves
//     by HandOver or when its holder leaves or steps down.
//   - Control is only granted on a live session (nothing to type into otherwise).
//   - A controller re-joining as observer steps down: control becomes free.
//
// Ended sessions can still be joined (as observers) to replay their output.
func (r *Registry) Join(sessionID, viewerID string, want Role) (Role, error) {
	rec, ok := r.byID[sessionID]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if viewerID == "" {
		return "", fmt.Errorf("%w: empty viewer id", ErrNotJoined)
	}
	if !want.Valid() {
		return "", fmt.Errorf("%w: %q", ErrInvalidRole, want)
	}
	granted := Observer
	if want == Controller && rec.s.State.Live() && (rec.controller == "" || rec.controller == viewerID) {
		granted = Controller
	}
	if granted == Controller {
		rec.controller = viewerID
	} else if rec.controller == viewerID {
		rec.controller = ""
	}
	rec.viewers[viewerID] = granted
	return granted, nil
}

// TakeControl gives viewerID control of a live session even when another
// viewer holds it (an operator taking over a terminal from the dashboard);
// the previous controller, returned, becomes an observer. On a session that
// has ended the viewer only observes.
func (r *Registry) TakeControl(sessionID, viewerID string) (granted Role, prev string, err error) {
	rec, ok := r.byID[sessionID]
	if !ok {
		return "", "", fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if viewerID == "" {
		return "", "", fmt.Errorf("%w: empty viewer id", ErrNotJoined)
	}
	if !rec.s.State.Live() {
		if rec.viewers[viewerID] != Controller {
			rec.viewers[viewerID] = Observer
		}
		return rec.viewers[viewerID], "", nil
	}
	if rec.controller != "" && rec.controller != viewerID {
		prev = rec.controller
		rec.viewers[prev] = Observer
	}
	rec.controller = viewerID
	rec.viewers[viewerID] = Controller
	return Controller, prev, nil
}

// Leave removes a viewer. A leaving controller frees control; no observer is
// promoted implicitly (control is handed over explicitly, or claimed by a
// Join as controller).
func (r *Registry) Leave(sessionID, viewerID string) error {
	rec, ok := r.byID[sessionID]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if _, joined := rec.viewers[viewerID]; !joined {
		return fmt.Errorf("%w: %s", ErrNotJoined, viewerID)
	}
	delete(rec.viewers, viewerID)
	if rec.controller == viewerID {
		rec.controller = ""
	}
	return nil
}

// HandOver moves control from the current controller to another viewer of
// the session, which must have joined; from becomes an observer. It returns
// the role changes (to first), none when from == to.
func (r *Registry) HandOver(sessionID, from, to string) ([]RoleChange, error) {
	rec, ok := r.byID[sessionID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if from == "" || rec.controller != from {
		return nil, fmt.Errorf("%w: %q", ErrNotController, from)
	}
	if _, joined := rec.viewers[to]; !joined {
		return nil, fmt.Errorf("%w: %q", ErrNotJoined, to)
	}
	if from == to {
		return nil, nil
	}
	rec.controller = to
	rec.viewers[to] = Controller
	rec.viewers[from] = Observer
	return []RoleChange{{ViewerID: to, Role: Controller}, {ViewerID: from, Role: Observer}}, nil
}

// Controller returns the controlling viewer of a session, "" if none.
func (r *Registry) Controller(sessionID string) string {
	if rec, ok := r.byID[sessionID]; ok {
		return rec.controller
	}
	return ""
}

// Viewers returns the viewers of a session, by id.
func (r *Registry) Viewers(sessionID string) []Viewer {
	rec, ok := r.byID[sessionID]
	if !ok {
		return nil
	}
	out := make([]Viewer, 0, len(rec.viewers))
	for id, role := range rec.viewers {
		out = append(out, Viewer{ID: id, Role: role})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CanInput reports whether viewerID may send stdin to the session: it is the
// controller, the session is live and its type takes input.
func (r *Registry) CanInput(sessionID, viewerID string) bool {
	rec, ok := r.byID[sessionID]
	return ok && viewerID != "" && rec.controller == viewerID && rec.s.State.Live() && AcceptsInput(rec.s.Type)
}

// CanResize reports whether viewerID may resize the session's terminal: it
// is the controller, the session is live and has a PTY.
func (r *Registry) CanResize(sessionID, viewerID string) bool {
	rec, ok := r.byID[sessionID]
	return ok && viewerID != "" && rec.controller == viewerID && rec.s.State.Live() && rec.s.PTY
}
