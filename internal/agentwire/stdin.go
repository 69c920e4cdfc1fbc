package agentwire

// StdinWindow is how many bytes of one command's input the server lets be
// on their way to the process (sent, not yet acknowledged written) when the
// agent acknowledges stdin; beyond it, writes are refused (busy). The
// agent's input queue holds at least this much, so it never has to drop.
const StdinWindow = 4 << 20

// StdinQueueBytes bounds the input an agent holds for one command. It is
// above StdinWindow, so a server that paces never fills it; a server that
// does not (no offsets) is paced by the agent's link instead, never by
// dropping.
const StdinQueueBytes = 8 << 20
