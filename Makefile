# The user's entry points. Real work lives in CMake (the C build) and hack/ (scripts).
.DEFAULT_GOAL := build
SHELL := /bin/bash

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
C_SOURCES = $(shell git ls-files -co --exclude-standard -- '*.c' '*.h')
# What make lint analyses: the library, the commands and the unit tests (with the headers they
# include; hack/, the fuzz targets and the benches are not in its scope).
LINT_SOURCES = $(filter pkg/% cmd/% test/unit/%,$(filter %.c,$(C_SOURCES)))

.PHONY: deps build build-asan unit unit-asan valgrind e2e test run cluster-up cluster-down \
        cluster-status fmt fmt-check lint tools clean install fuzz image bench-report

# DEPS_FLAGS: make run sets --no-venv (it runs no Python), for itself and the build it needs.
deps:
	@hack/install-deps.sh $(DEPS_FLAGS)

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

# The local cluster (as root with the real node: hack/run.sh says which and why), the gateway, the
# operator and a sample session; prints its app's answer and the command that attaches to it.
# It builds only the three programs it runs (the operator, the gateway, the kubectl plugin), not
# the unit tests: a first run on a fresh machine waits for less.
RUN_TARGETS = telo-operator telo-gateway kubectl-telo
run: DEPS_FLAGS = --no-venv
run: deps
	@cmake -S . -B $(BUILD_DIR) $(GENERATOR) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) --parallel --target $(RUN_TARGETS)
	@hack/run.sh $(BUILD_DIR)

# PNG plots of the latest bench results on this machine (bench/report/README.md).
bench-report:
	@bench/report/run.sh

# The operator's OCI image (hack/image.sh): built without a daemon, pushed to the real node.
image: build
	@hack/image.sh $(BUILD_DIR)

fmt:
	@clang-format -i $(C_SOURCES)

fmt-check:
	@clang-format --dry-run -Werror $(C_SOURCES)

# clang-tidy: every diagnostic is printed and is an error; the run fails if any file has one
# (xargs exits non-zero, pipefail passes it on). Only the "N warnings generated." lines are
# filtered out. One clang-tidy process per file: clang-tidy 14 checking several files in one
# process reports clang-analyzer-valist.Uninitialized on correct va_start/va_end pairs, which it
# does not when each file is checked alone (https://bugs.llvm.org/show_bug.cgi?id=41311).
# The processes run in parallel, one per core.
lint: build fmt-check
	@hack/sync-chart.sh --check
	@set -o pipefail; printf '%s\n' $(LINT_SOURCES) \
	  | xargs -r -n1 -P$$(nproc) clang-tidy -p $(BUILD_DIR) --quiet --warnings-as-errors='*' 2>&1 \
	  | { grep -Ev '^[0-9]+ (warnings?|errors?)( and [0-9]+ errors?)? generated\.$$' || true; }
	@cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,performance,portability \
	  --inline-suppr --suppress=missingIncludeSystem -I pkg $(LINT_SOURCES)

# libFuzzer targets of test/fuzz with clang, ASan and UBSan in build-fuzz/, each run for
# FUZZ_SECONDS (60) over its corpus in test/fuzz/corpus/<target>/ (hack/fuzz.sh --help);
# FUZZ_SECONDS=600 make fuzz is the 10-minute run. make test runs each for FUZZ_SMOKE_SECONDS.
fuzz: deps
	@hack/fuzz.sh

# kubectl finds plugins as kubectl-<name> on PATH: `make install` puts kubectl-telo into
# $(PREFIX)/bin (/usr/local/bin); PREFIX=$$HOME/.local for a user install, DESTDIR for packaging.
PREFIX ?= /usr/local
install: build
	@install -d "$(DESTDIR)$(PREFIX)/bin"
	@install -m 0755 $(BUILD_DIR)/bin/kubectl-telo "$(DESTDIR)$(PREFIX)/bin/kubectl-telo"
	@echo "installed $(DESTDIR)$(PREFIX)/bin/kubectl-telo (try: kubectl telo --help)"

clean:
	@rm -rf $(BUILD_DIR) $(ASAN_DIR)
