.PHONY: build test server bench crds clean

node_modules: package.json package-lock.json
	npm ci
	touch node_modules

build: node_modules
	npx tsc -p tsconfig.json

# Everything, as CI runs it: sets up PostgreSQL, Podman and the Python packages when missing.
test: node_modules
	npm test

server: build
	node dist/cli/main.js server

bench: build
	node dist/bench/control-plane.js

# Regenerates crds/ from the schemas in api/ (a test fails while they are stale).
crds: node_modules
	node --import tsx api/crd.ts

clean:
	rm -rf dist
