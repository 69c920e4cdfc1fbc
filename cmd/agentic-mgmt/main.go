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
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/debugserve"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace/hopenv"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
)

var version = "0.1.0-dev"

// tracingShutdownTimeout bounds the export of the last spans at exit.
const tracingShutdownTimeout = 500 * time.Millisecond

func main() {
	hopenv.Start(os.Environ(), "agentic-mgmt") // benchmarks' per-hop timeline; off unless set
	cfg, err := loadConfig(os.Args[1:], os.Environ(), os.Stderr, version)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentic-mgmt:", err)
		os.Exit(2)
	}
	// A line logged inside a traced request carries its trace_id.
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})))
	if err := run(cfg, log); err != nil {
		log.Error("agentic-mgmt failed", "err", err)
		os.Exit(1)
	}
}

// run builds the server, serves until SIGTERM or SIGINT, and tears it down
// in the reverse order of construction.
func run(cfg Config, log *slog.Logger) error {
	tracing, err := telemetry.FromEnv(context.Background(), os.Environ(), "agentic-mgmt", cfg.Version)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	if tracing != nil {
		// Last out: what the server did until its end is exported, within
		// the shutdown budget.
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
			defer cancel()
			if err := tracing.Shutdown(ctx); err != nil {
				log.Warn("spans not all exported before exit", "err", err)
			}
		}()
		log.Info("tracing on: spans exported by OTLP over HTTP (OTEL_EXPORTER_OTLP_*)")
	}
	cfg.Tracing = tracing
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
