//go:build wireinject

package main

import (
	"io"
	"log/slog"

	"github.com/google/wire"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/system"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func newApp(cfg Config, log *slog.Logger, banner io.Writer) (*App, func(), error) {
	wire.Build(
		provideDataDir,
		provideCredentials,
		provideCredentialAudit,
		wire.Bind(new(ports.AgentCredentials), new(*credentialAudit)),
		provideOperatorToken,
		provideClock,
		wire.Bind(new(ports.Clock), new(clock.Wall)),
		provideIDs,
		wire.Bind(new(ports.IDGenerator), new(system.UUIDv7)),
		provideChanges,
		wire.Bind(new(ports.ChangeNotifier), new(*changes.Hub)),
		provideLinkReports,
		provideAgentService,
		provideLinkHold,
		provideWakeful,
		provideIdentity,
		provideMissionStore,
		wire.Bind(new(ports.MissionStore), new(*filestore.MissionStore)),
		provideOutbox,
		wire.Bind(new(ports.EventOutbox), new(*filestore.Outbox)),
		provideAuditLog,
		wire.Bind(new(ports.AuditLog), new(*filestore.AuditLog)),
		provideMissions,
		provideAIWG,
		provideSessionLog,
		provideSessions,
		provideViewedSessions,
		provideWS,
		provideTokenWatch,
		provideSupervisor,
		provideRuntimes,
		provideProvisionTimes,
		provideTaskMetrics, provideEgressMetrics, providePoolMetrics, provideSleepMetrics,
		providePublicPorts,
		provideTokens,
		provideSignIns,
		provideInjection,
		provideEnvironments,
		provideTasks,
		provideReadiness,
		provideAgentTLS,
		provideHostUsers,
		wire.Struct(new(UseCases), "*"),
		bindLinkReports,
		provideOperatorHTTP,
		provideMetrics,
		provideREST,
		provideApp,
	)
	return nil, nil, nil
}
