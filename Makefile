# The user's entry points. Real work lives in CMake (the C build) and hack/ (scripts).
.DEFAULT_GOAL := build
SHELL := /bin/bash

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
C_SOURCES = $(shell git ls-files -co --exclude-standard -- '*.c' '*.h')

.PHONY: deps build build-asan unit unit-asan valgrind e2e test run cluster-up cluster-down \
        cluster-status fmt fmt-check lint tools clean

deps:
	@hack/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) $(GENERATOR) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) --parallel

build-asan: deps
	@cmake -S . -B $(ASAN_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=Debug -DTELO_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_DIR) --parallel

unit: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure

unit-asan: build-asan
	@ctest --test-dir $(ASAN_DIR) --output-on-failure

valgrind: build
	@hack/valgrind-unit.sh $(BUILD_DIR)

tools:
	@hack/build-tools.sh

cluster-up: deps
	@hack/cluster/up.sh

cluster-down:
	@hack/cluster/down.sh

cluster-status:
	@hack/cluster/status.sh

e2e: build
	@hack/e2e.sh

test: build build-asan
	@hack/test.sh $(BUILD_DIR) $(ASAN_DIR)

run: build
	@hack/run.sh $(BUILD_DIR)

fmt:
	@clang-format -i $(C_SOURCES)

fmt-check:
	@clang-format --dry-run -Werror $(C_SOURCES)

lint: build fmt-check
	@clang-tidy -p $(BUILD_DIR) --quiet $(filter %.c,$(C_SOURCES)) 2>&1 | grep -v 'warnings generated' || true
	@clang-tidy -p $(BUILD_DIR) --quiet $(filter %.c,$(C_SOURCES)) >/dev/null 2>&1
	@cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,performance,portability \
	  --inline-suppr --suppress=missingIncludeSystem -I pkg $(filter %.c,$(C_SOURCES))

clean:
	@rm -rf $(BUILD_DIR) $(ASAN_DIR)
