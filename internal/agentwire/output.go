package agentwire

import sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"

// OutputStreamName is a stream's name in OutputPath ("" for none).
func OutputStreamName(s sandboxv1.OutputStream) string {
	switch s {
	case sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT:
		return "stdout"
	case sandboxv1.OutputStream_OUTPUT_STREAM_STDERR:
		return "stderr"
	case sandboxv1.OutputStream_OUTPUT_STREAM_PTY:
		return "pty"
	}
	return ""
}

// OutputStreamNamed is the inverse of OutputStreamName (unspecified for
// an unknown name).
func OutputStreamNamed(name string) sandboxv1.OutputStream {
	for _, s := range []sandboxv1.OutputStream{sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT, sandboxv1.OutputStream_OUTPUT_STREAM_STDERR, sandboxv1.OutputStream_OUTPUT_STREAM_PTY} {
		if OutputStreamName(s) == name {
			return s
		}
	}
	return sandboxv1.OutputStream_OUTPUT_STREAM_UNSPECIFIED
}
