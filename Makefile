# SPDX-License-Identifier: Apache-2.0
# Thin wrapper over CMake/CTest. `make demo` and `make test` are the two commands of the README.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all deps configure build test test-main test-asan test-tsan lint demo bench clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) --preset release $(CMAKE_ARGS) >/dev/null

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Every test tier, then the sanitizer passes and the format check.
test: build
	scripts/run-tests.sh $(BUILD)

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	scripts/bench.sh $(BUILD)

lint:
	scripts/lint.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan
