# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
STATE_DIR ?= $(CURDIR)/.state
BIN := $(CURDIR)/bin
LISTEN_ADDR ?= 127.0.0.1:8120

.PHONY: all build generate sdk-ts dashboard check-generated lint vet fmt-check test test-env vm-image unit bench bench-paths bench-agents run deps clean claude-standin

all: build

# Static (no cgo): the agent runs in images and VMs without a libc.
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

# Regenerates everything under gen/, the Go client (client/client.gen.go)
# and the Wire injectors, deterministically.
generate:
	rm -rf gen/agentic
	$(GO) tool buf generate
	cp openapi.yaml gen/restapi/openapi.yaml
	$(GO) tool oapi-codegen -config gen/restapi/oapi-codegen.yaml openapi.yaml
	$(GO) tool oapi-codegen -config client/oapi-codegen.yaml openapi.yaml
	cd cmd/agentic-mgmt && $(GO) tool wire gen .
	gofmt -w gen cmd
	$(MAKE) dashboard

# The TypeScript SDK (sdk/typescript, @agentic-sandbox/client): npm packages
# from its lockfile, its REST types from openapi.yaml (src/schema.ts,
# committed), then built to dist/ (not committed). Its tests run against the
# real server in cmd/internal/e2e (TestSDKTypeScript).
SDK_TS := sdk/typescript
sdk-ts:
	cd $(SDK_TS) && npm ci --no-audit --no-fund --loglevel=error
	cd $(SDK_TS) && npx openapi-typescript ../../openapi.yaml -o src/schema.ts --silent
	cd $(SDK_TS) && npx tsc -p .

# The dashboard's bundle (adapters/dashboard/dist, embedded in agentic-mgmt):
# npm packages from the lockfile, its REST client and types from the SDK (a
# file: dependency), a type check, then esbuild (a Go tool). Committed like
# gen/, so `go build` needs no npm.
DASH := adapters/dashboard
dashboard: sdk-ts
	cd $(DASH)/ui && npm ci --no-audit --no-fund --loglevel=error
	cd $(DASH)/ui && npx tsc -p .
	cd $(DASH) && $(GO) tool esbuild ui/src/main.ts --bundle --minify --format=esm --target=es2022 \
		--outdir=dist --entry-names=app --log-level=warning

# Fails when the committed generated code differs from what the contracts produce.
check-generated: generate
	@if ! git diff --quiet -- gen client cmd $(DASH) $(SDK_TS) || [ -n "$$(git status --porcelain --untracked-files=all -- gen client cmd $(DASH) $(SDK_TS) | grep '^??')" ]; then \
		git status --short -- gen client cmd $(DASH) $(SDK_TS); git diff --stat -- gen client cmd $(DASH) $(SDK_TS); \
		echo "generated code is stale: run 'make generate' and commit"; exit 1; fi

# --allow-serial-runners: a second checkout's CI on the same machine waits
# for the linter's lock instead of failing on it.
lint:
	$(GO) tool buf lint
	$(GO) tool golangci-lint run --allow-serial-runners ./...
	@# The Go client is a module of its own (client/go.mod): the same linter, run there.
	$(GO) build -o $(BIN)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	cd client && $(BIN)/golangci-lint run --allow-serial-runners ./...
	@# Compare the contract with the previous commit on main, once there is one that has it.
	@if git rev-parse -q --verify HEAD~1 >/dev/null && git cat-file -e HEAD~1:buf.yaml 2>/dev/null; then \
		echo "buf breaking against HEAD~1"; $(GO) tool buf breaking --against '.git#ref=HEAD~1'; fi

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

# Debian packages the tests and benchmarks use; installs only what is missing.
deps:
	@need=""; \
	command -v tmux >/dev/null || need="$$need tmux"; \
	command -v gcc >/dev/null || need="$$need gcc"; \
	command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need="$$need openssh-server"; \
	command -v ssh >/dev/null || need="$$need openssh-client"; \
	command -v chromium >/dev/null || need="$$need chromium"; \
	command -v npm >/dev/null || need="$$need npm"; \
	if [ -n "$$need" ]; then echo "installing:$$need"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; fi; fi

# The runtimes' engines: each runtime's scripts/<name>-test-env.sh installs
# what its tests need, run by its own interpreter (a runtime adds its script;
# nothing here names it).
test-env: deps
	@for s in scripts/*-test-env.sh; do echo "test-env: $$s"; "$$s" || exit 1; done

# The kubernetes runtime's images as archives in build/images (no registry,
# no Docker; cmd/internal/imagebuild): agent.tar (agentic-sandbox/agent:<version>,
# only the static agentic-agent at /agentic/agentic-agent) and workload.tar
# (agentic-sandbox/workload:<version>, static busybox, user 65534), and the
# server's for deploy/kubernetes: mgmt.tar (agentic-sandbox/mgmt:<version>,
# only the static agentic-mgmt, stripped, user 65532). Load them with `docker load -i`
# or `ctr -n k8s.io images import`, or push them.
.PHONY: agent-image
agent-image:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/agentic-agent ./cmd/agentic-agent
	@# Stripped for the image: a 21 MiB archive rather than 40.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o build/bin/agentic-mgmt ./cmd/agentic-mgmt
	$(GO) run ./cmd/internal/imagebuild -agent $(BIN)/agentic-agent -mgmt build/bin/agentic-mgmt -out build/images

# The tiny VM image the libvirt runtime boots by default: build/vm/{vmlinuz,initrd.img}.
vm-image:
	bash scripts/build-vm-image.sh -o build/vm

# The same tests as `make test`, on the machine as it is: a test that needs
# what is missing (root, an engine, tmux, the VM image) skips saying what
# (internal/testreq). `make test` sets up everything and sets CI, under which
# such a test fails instead. The end-to-end package runs the real binaries
# and engines one test after another: on two loaded cores it passed 20 min.
GOTEST := $(GO) test -race -count=1 -timeout 45m ./...

unit:
	$(GOTEST)

test: deps test-env vm-image check-generated lint vet fmt-check
	CI=true $(GOTEST)

bench: deps build
	$(GO) run ./cmd/internal/benchrun -bin $(BIN)

# The byte paths (exec, terminals, files, egress) beside their floors, in
# one run ending with their table (a few minutes; Docker for egress).
bench-paths: build
	$(GO) run ./cmd/internal/benchrun -bin $(BIN) -only paths

# Many simulated agents against one server (0, 1k, 5k, 10k; about four
# minutes; BENCH_AGENT_COUNTS to choose).
bench-agents: build
	$(GO) run ./cmd/internal/benchrun -bin $(BIN) -only agents

# The server on 127.0.0.1 with one host agent, its data in $(STATE_DIR)
# (where agenticctl run from this clone finds its URL and token). Docker:
# DOCKER_HOST if set, else this machine's dockerd, else the private one of
# `make docker`, which the server picks up whenever it starts.
run: build
	@mkdir -p $(STATE_DIR)
	@if [ -z "$$DOCKER_HOST" ] && [ ! -S /var/run/docker.sock ]; then export DOCKER_HOST=unix://$(STATE_DIR)/docker/docker.sock; fi; \
	AGENTIC_HOST_AGENTS=$${AGENTIC_HOST_AGENTS:-1} SECRETS_DIR=$(STATE_DIR)/secrets LISTEN_ADDR=$(LISTEN_ADDR) \
		AGENTIC_AGENT_BINARY=$(BIN)/agentic-agent $(BIN)/agentic-mgmt --print-token

# A private dockerd for `make run` (scripts/docker.sh): installs docker.io
# and busybox-static when missing, needs root or sudo, pulls no image.
.PHONY: docker docker-stop
docker:
	@scripts/docker.sh $(STATE_DIR) start
docker-stop:
	@scripts/docker.sh $(STATE_DIR) stop

# Tasks without an API key (README, "Tasks"): a stand-in `claude` on the
# host agents' PATH and a demo repository (scripts/claude-standin.sh).
claude-standin:
	scripts/claude-standin.sh

clean:
	rm -rf $(BIN) build
