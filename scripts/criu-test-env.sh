#!/bin/sh
# Builds criu 4.1.1 into /var/cache/agentic-criu for the docker runtime's
# memory hibernation tests (TestAContainerHibernatesWithItsMemory...), which
# start their own dockerd with it first in its PATH (cmd/internal/harness,
# CheckpointDockerd). A no-op once built. POSIX sh.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$here/criu/build-criu.sh" >/dev/null
