// Command agentic-mgmt is the management server: agents connect to it, and
// operators and aiwg serve drive it over REST.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentic-sandbox/agentic-sandbox/internal/debugserve"
)

var version = "0.1.0-dev"

func main() {
	cfg, err := loadConfig(os.Args[1:], os.Environ(), os.Stderr, version)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentic-mgmt:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	if err := run(cfg, log); err != nil {
		log.Error("agentic-mgmt failed", "err", err)
		os.Exit(1)
	}
}

// run builds the server, serves until SIGTERM or SIGINT, and tears it down
// in the reverse order of construction.
func run(cfg Config, log *slog.Logger) error {
	app, cleanup, err := newApp(cfg, log, os.Stdout)
	if err != nil {
		return fmt.Errorf("start-up: %w", err)
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if addr := os.Getenv("AGENTIC_PPROF_ADDR"); addr != "" {
		if err := debugserve.Start(ctx, addr, log); err != nil {
			return err
		}
	}
	return app.Run(ctx)
}

func logLevel() slog.Level {
	if os.Getenv("AGENTIC_LOG_LEVEL") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
