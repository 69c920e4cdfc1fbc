package ports

import "context"

// ContextCarrier copies into work's context what follows the work past the
// request that asked for it (the request's trace, where the server traces),
// and returns the result: a task runs long after its POST has been
// answered, under a context of its own. Nil carries nothing.
type ContextCarrier func(request, work context.Context) context.Context
