package agentwire

// The agent link's plain HTTP beside its Connect service: the headers an
// agent signs in with, and the routes of its raw forwarded connections and
// of its injected secrets' requests. The server (agentrpc) serves them and
// the agent (agentd) calls them.
const (
	HeaderAgentID     = "x-agent-id"
	HeaderAgentSecret = "x-agent-secret"

	// ForwardRawPath is upgraded (HTTP/1.1, ForwardRawProtocol) into a
	// forwarded connection's raw bytes, for the dial HeaderForwardID names.
	ForwardRawPath     = "/agentic-sandbox/forward"
	ForwardRawProtocol = "agentic-forward"
	HeaderForwardID    = "x-forward-id"

	// TunnelRawPath is upgraded (HTTP/1.1, TunnelRawProtocol) into an
	// egress tunnel's raw bytes, to the destination HeaderTunnelTo names
	// (host:port), once the server has checked it against the
	// environment's egress policy.
	TunnelRawPath     = "/agentic-sandbox/tunnel"
	TunnelRawProtocol = "agentic-tunnel"
	HeaderTunnelTo    = "x-tunnel-to"
	// HeaderTunnelRefused, on a refusal of TunnelRawPath, says whether the
	// policy denied the destination ("denied") or it could not be reached
	// ("failed"); the body is the reason.
	HeaderTunnelRefused = "x-tunnel-refused"

	// InjectPath + a secret's name + the request's own path carries a
	// workload's request for an injected secret.
	InjectPath = "/agentic-sandbox/inject/"

	// DataPath + a transfer id carries a file transfer's bytes on the data
	// plane (FileRequest.data_plane): the agent POSTs a read's bytes, or
	// GETs a write's, as the raw body of that HTTP/2 stream.
	DataPath = "/agentic-sandbox/data/"
	// DataRawProtocol: a GET of DataPath + a transfer id on a connection
	// of the agent's own, upgraded (HTTP/1.1) to it, carries the bytes
	// raw on that connection: a write's from the server up to its
	// half-close, a read's from the agent up to its end (opened before
	// the read's ready; a server without raw reads answers 404).
	DataRawProtocol = "agentic-data"

	// OutputPath + a command id + "/" + a stream's name (OutputStreamName)
	// carries that command stream's output on the data plane
	// (Registration.output_data_plane): the agent POSTs the stream's bytes
	// from HeaderOutputOffset on as the raw body of one HTTP/2 stream on
	// its link, for the connection HeaderOutputConnection names.
	OutputPath             = "/agentic-sandbox/output/"
	HeaderOutputOffset     = "x-output-offset"
	HeaderOutputConnection = "x-output-connection"
)
