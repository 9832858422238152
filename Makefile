# tracecost: one Makefile drives setup, the C/BPF build, the Rust runtime and the Python package.
#   make run    setup + build, then `tracecost run` (every suite, report.html)
#   make test   setup + build + lint, then the whole test suite
#   make lint   rustfmt, clippy and ruff: the tree passes them
SHELL   := /bin/bash
BUILD   := build
VENV    := .venv
CC      := gcc
CLANG   := clang
BPFTOOL := bpftool
# include/: the C headers several programs share (a loader's common parts, peak RSS, histograms).
CFLAGS  := -O2 -g -Wall -Wextra -Werror -fno-omit-frame-pointer -Iinclude
# The multiarch include folder last: libbpf's usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> lives there.
BPF_CFLAGS := -O2 -g -Wall -target bpf -D__TARGET_ARCH_x86 -I$(BUILD) -Iprobes -idirafter /usr/include/$(shell $(CC) -dumpmachine)

LIB := $(BUILD)/lib
BIN := $(BUILD)/bin
BPF := $(BUILD)/bpf
SKEL := $(BUILD)/skel

SETUP_STAMP := $(VENV)/.setup-stamp
PLOTLY_JS := $(BUILD)/vendor/plotly-basic.min.js

.PHONY: all setup build run test test-unit docs clean lint lint-python
# BPF objects and skeletons are products too (uebpf loads the .bpf.o files): keep them.
.SECONDARY:
all: build

setup: $(SETUP_STAMP)
	@scripts/setup.sh --check-packages

$(SETUP_STAMP): pyproject.toml scripts/setup.sh $(wildcard tracecost/suites/*/packages.txt)
	scripts/setup.sh
	touch $@

build: setup suites workloads runtime runtime-tools hook-victims $(BUILD)/buildinfo.json $(PLOTLY_JS)

# Build flags, recorded with every result (docs/methodology.md: the environment is recorded).
$(BUILD)/buildinfo.json: Makefile | $(BIN)
	printf '{"cflags": "%s", "bpf_cflags": "%s", "cc": "%s", "clang": "%s"}\n' '$(CFLAGS)' '$(BPF_CFLAGS)' \
	  "$$($(CC) --version | head -1)" "$$($(CLANG) --version | head -1)" > $@

# The report's plotly.js (the script pins its version and hash).
$(PLOTLY_JS): scripts/fetch_plotly_basic.sh
	scripts/fetch_plotly_basic.sh $@

run: build
	$(VENV)/bin/tracecost run

test: build lint runtime-test
	$(VENV)/bin/pytest -q tests

# docs/cli.md from the CLI's own definitions (tests/unit/test_clidoc.py checks it is current).
docs: setup
	$(VENV)/bin/python -m tracecost.clidoc > docs/cli.md

# The unit tests alone, as the README promises them: nothing built (CI runs this first, on a
# clean clone, before `make test` builds).
test-unit: setup
	$(VENV)/bin/pytest -q tests/unit

lint: lint-rust lint-python

# The Python half of `lint`: ruff's checks and formatting (pyproject.toml [tool.ruff]).
lint-python: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(BUILD)
	rm -rf runtime/target

$(LIB) $(BIN) $(BPF) $(SKEL):
	mkdir -p $@

# --- suites: each suite's C programs live in its folder (tracecost/suites/NAME/) -------------
# A `NAME.bpf.c` + `NAME.c` + `NAME.h` there is a libbpf tool (libbpf-bootstrap's layout): its
# object, skeleton and loader build by the pattern rules below with no line here. A suite whose
# programs need more (other libraries, a victim, generated objects) says so in its own build.mk,
# which adds its products to SUITE_PRODUCTS. Nothing here names a suite.
.PHONY: suites
SUITE_DIRS := $(wildcard tracecost/suites/*)
SUITE_TOOLS := $(foreach bpf,$(wildcard tracecost/suites/*/*.bpf.c),\
  $(if $(wildcard $(bpf:.bpf.c=.c)),$(BIN)/$(notdir $(bpf:.bpf.c=))))
SUITE_PRODUCTS := $(SUITE_TOOLS)
vpath %.bpf.c probes $(SUITE_DIRS)
vpath %.c $(SUITE_DIRS)
vpath %.h probes $(SUITE_DIRS)
include $(wildcard tracecost/suites/*/build.mk)
suites: $(SUITE_PRODUCTS)

# --- workloads several suites and tests share --------------------------------------------------
.PHONY: workloads
workloads: $(LIB)/libmylib.so $(BIN)/inject_victim $(BIN)/static_victim $(BIN)/sleep_victim $(BIN)/signal_victim \
  $(BIN)/timer_victim $(BIN)/selftrace $(BIN)/syscall_ways

$(LIB)/libmylib.so: workloads/mylib/mylib.c workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

# uebpf inject's targets (tests/test_inject.py): threads calling libmylib, and a static binary.
$(BIN)/inject_victim: workloads/inject_victim/inject_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -pthread -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/static_victim: workloads/inject_victim/static_victim.c | $(BIN)
	$(CC) $(CFLAGS) -static -o $@ $<

# The same system calls made every way (tests/test_app.py: counted alike on the kernel and uebpf).
$(BIN)/syscall_ways: workloads/syscall_ways/syscall_ways.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl

$(BIN)/sleep_victim: workloads/inject_victim/sleep_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/signal_victim: workloads/inject_victim/signal_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/timer_victim: workloads/inject_victim/timer_victim.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

# --- hook engine victims (tests/test_hook.py, scripts/hook_bench.py): PIE + shared library ---
.PHONY: hook-victims
hook-victims: $(BIN)/hook_torture $(BIN)/hook_torture_cxx $(BIN)/hook_bench

$(LIB)/libhooktorture.so: workloads/hook_torture/torture_lib.c workloads/hook_torture/torture_lib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(BIN)/hook_torture: workloads/hook_torture/torture.c workloads/hook_torture/torture_asm.S workloads/hook_torture/torture_lib.h $(LIB)/libhooktorture.so | $(BIN)
	$(CC) $(CFLAGS) -fPIE -pie -pthread -o $@ workloads/hook_torture/torture.c workloads/hook_torture/torture_asm.S \
	  -L$(LIB) -lhooktorture -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/hook_torture_cxx: workloads/hook_torture/torture_cxx.cc | $(BIN)
	$(CXX) $(filter-out -Iinclude,$(CFLAGS)) -fPIE -pie -o $@ $<

$(BIN)/hook_bench: workloads/hook_torture/hook_bench.c | $(BIN)
	$(CC) $(CFLAGS) -fPIE -pie -o $@ $<

# --- BPF probes: vmlinux.h from this kernel's BTF, one object and skeleton per probe --------
$(BUILD)/vmlinux.h: /sys/kernel/btf/vmlinux | $(BPF)
	$(BPFTOOL) btf dump file $< format c > $@.tmp && mv $@.tmp $@

# A probe and its header side by side (probes/, or a suite's folder: found by vpath).
$(BPF)/%.bpf.o: %.bpf.c %.h $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -I$(<D) -c $< -o $@

$(SKEL)/%.skel.h: $(BPF)/%.bpf.o | $(SKEL)
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

# A libbpf tool's loader: NAME.c beside NAME.bpf.c and NAME.h, with its skeleton.
$(BIN)/%: %.c $(SKEL)/%.skel.h %.h $(wildcard include/*.h) | $(BIN)
	$(CC) $(CFLAGS) -I$(<D) -I$(SKEL) -o $@ $< $$(pkg-config --cflags --libs libbpf)

# selftrace: a loader that traces itself (libbpf-bootstrap's layout: name.bpf.c + name.c side by
# side; tests/test_agent.py runs it on the kernel and with the server and the agent preloaded).
$(BPF)/selftrace.bpf.o: workloads/selftrace/selftrace.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BIN)/selftrace: workloads/selftrace/selftrace.c $(SKEL)/selftrace.skel.h | $(BIN)
	$(CC) $(CFLAGS) -I$(SKEL) -o $@ $< $$(pkg-config --cflags --libs libbpf)

# --- uebpf runtime (Rust workspace; cargo tracks its own dependencies, so these are phony) ----
RUNTIME_OUT := runtime/target/release
.PHONY: runtime runtime-test
# --remove-destination: a new file, not the old one rewritten in place, so that a process still
# running the old binary or library keeps its own (rewriting a mapped library under it crashes
# it; rewriting a running binary fails with ETXTBSY).
runtime: | $(BIN) $(LIB)
	cargo build --release --manifest-path runtime/Cargo.toml
	cp --remove-destination $(RUNTIME_OUT)/uebpf-vmbench $(RUNTIME_OUT)/uebpf $(RUNTIME_OUT)/stepcount $(BIN)/
	cp --remove-destination $(RUNTIME_OUT)/libuebpf_vm.so $(RUNTIME_OUT)/libuebpf_vm.a $(RUNTIME_OUT)/libuebpf.so $(RUNTIME_OUT)/libuebpf.a $(LIB)/
	cp --remove-destination $(RUNTIME_OUT)/libuebpf_server.so $(RUNTIME_OUT)/libuebpf_agent.so $(RUNTIME_OUT)/libuebpf_hook_testagent.so $(LIB)/
	mkdir -p $(BUILD)/include && cp runtime/vm/include/uebpf_vm.h runtime/uebpf/include/uebpf.h $(BUILD)/include/

# The objects uebpf is checked with (cargo tests and tests/test_uebpf.py load them), and the
# kernel-vs-uebpf cross-check harness (C: libbpf for the kernel side, uebpf.h for ours).
UEBPF_OBJECTS := $(BPF)/functrace.bpf.o $(BPF)/uebpf_check.bpf.o $(BPF)/uebpf_stress.bpf.o $(BPF)/uebpf_embed.bpf.o
.PHONY: runtime-tools
# agent_bench.bpf.o: the agent's per-hit benchmark (scripts/agent_bench.py).
runtime-tools: $(UEBPF_OBJECTS) $(BPF)/agent_bench.bpf.o $(BIN)/uebpf-crosscheck

$(BIN)/uebpf-crosscheck: runtime/crosscheck/crosscheck.c runtime/uebpf/include/uebpf.h | runtime $(BIN)
	$(CC) $(CFLAGS) -Iruntime/uebpf/include -o $@ $< $$(pkg-config --cflags --libs libbpf) -L$(LIB) -luebpf -Wl,-rpath,'$$ORIGIN/../lib'

# Conformance tests load programs into the kernel: run as root. Object tests load $(UEBPF_OBJECTS).
runtime-test: $(UEBPF_OBJECTS)
	UEBPF_OBJECTS=$(abspath $(BPF)) cargo test --release --manifest-path runtime/Cargo.toml

# The Rust half of `lint`: formatting (runtime/rustfmt.toml) and clippy, warnings as errors.
.PHONY: lint-rust
lint-rust:
	cargo fmt --manifest-path runtime/Cargo.toml --all -- --check
	cargo clippy --release --manifest-path runtime/Cargo.toml --all-targets -- -D warnings
