package ports

// CommandAdopter takes on a command an agent reports running that this
// server does not know: one an earlier run of the server started (the
// agent outlived the restart). It answers how to route the command's
// output from now on, or false when the command is not its to take; the
// link then holds the command for a claim (Attach) for a while and kills
// it once nobody claimed it.
type CommandAdopter interface {
	AdoptCommand(cmd Command) (StartOptions, bool)
}
