.PHONY: install build test server bench crds clean

install:
	npm ci

build: install
	npx tsc -p tsconfig.json

# Everything, as CI runs it: sets up PostgreSQL, Podman and the Python packages when missing.
test: install
	npm test

server: build
	node dist/cli/main.js server

bench: build
	node dist/bench/control-plane.js

# Regenerates crds/ from the schemas in api/ (a test fails while they are stale).
crds: install
	node --import tsx api/crd.ts

clean:
	rm -rf dist
