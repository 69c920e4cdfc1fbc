package wakeful

import (
	"context"
	"io"
	"io/fs"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Files is a ports.AgentFiles whose calls use their environment: each
// wakes it when it sleeps and holds it until the call ends, or, for a read,
// until the returned reader is closed.
type Files struct {
	Files ports.AgentFiles
	Use   ports.EnvironmentUse
}

var _ ports.AgentFiles = Files{}

// ListFiles implements ports.AgentFiles.
func (f Files) ListFiles(ctx context.Context, agentID, path string) (ports.FileListing, error) {
	release, err := f.Use.Use(ctx, agentID, ports.UseFiles)
	if err != nil {
		return ports.FileListing{}, err
	}
	defer release()
	return f.Files.ListFiles(ctx, agentID, path)
}

// ReadFile implements ports.AgentFiles.
func (f Files) ReadFile(ctx context.Context, agentID, path string) (ports.FileReader, error) {
	return f.read(ctx, agentID, func() (ports.FileReader, error) { return f.Files.ReadFile(ctx, agentID, path) })
}

// ReadArchive implements ports.AgentFiles.
func (f Files) ReadArchive(ctx context.Context, agentID, dir string) (ports.FileReader, error) {
	return f.read(ctx, agentID, func() (ports.FileReader, error) { return f.Files.ReadArchive(ctx, agentID, dir) })
}

func (f Files) read(ctx context.Context, agentID string, open func() (ports.FileReader, error)) (ports.FileReader, error) {
	release, err := f.Use.Use(ctx, agentID, ports.UseFiles)
	if err != nil {
		return nil, err
	}
	r, err := open()
	if err != nil {
		release()
		return nil, err
	}
	return &heldReader{FileReader: r, release: release}, nil
}

// WriteFile implements ports.AgentFiles.
func (f Files) WriteFile(ctx context.Context, agentID, path string, mode fs.FileMode, r io.Reader) error {
	release, err := f.Use.Use(ctx, agentID, ports.UseFiles)
	if err != nil {
		return err
	}
	defer release()
	return f.Files.WriteFile(ctx, agentID, path, mode, r)
}

// DeleteFile implements ports.AgentFiles.
func (f Files) DeleteFile(ctx context.Context, agentID, path string, recursive bool) error {
	release, err := f.Use.Use(ctx, agentID, ports.UseFiles)
	if err != nil {
		return err
	}
	defer release()
	return f.Files.DeleteFile(ctx, agentID, path, recursive)
}

// WriteArchive implements ports.AgentFiles.
func (f Files) WriteArchive(ctx context.Context, agentID, dir string, r io.Reader) error {
	release, err := f.Use.Use(ctx, agentID, ports.UseFiles)
	if err != nil {
		return err
	}
	defer release()
	return f.Files.WriteArchive(ctx, agentID, dir, r)
}

// heldReader holds its environment until it is closed.
type heldReader struct {
	ports.FileReader
	release func()
}

// Unwrap is the reader held: what it can do beside reading (adapters/rest
// splices a download whose reader can) stays within reach.
func (r *heldReader) Unwrap() ports.FileReader { return r.FileReader }

func (r *heldReader) Close() error {
	err := r.FileReader.Close()
	r.release()
	return err
}
