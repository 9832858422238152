# tracecost: one Makefile drives setup, the C/BPF build, the Rust runtime and the Python package.
#   make run    setup + build, then `tracecost run` (every suite, report.html)
#   make test   setup + build, then the whole test suite
SHELL   := /bin/bash
BUILD   := build
VENV    := .venv
CC      := gcc
CLANG   := clang
BPFTOOL := bpftool
CFLAGS  := -O2 -g -Wall -Wextra -Werror -fno-omit-frame-pointer -Iworkloads/common
BPF_CFLAGS := -O2 -g -Wall -target bpf -D__TARGET_ARCH_x86 -I$(BUILD) -Iprobes

LIB := $(BUILD)/lib
BIN := $(BUILD)/bin
BPF := $(BUILD)/bpf
SKEL := $(BUILD)/skel

SETUP_STAMP := $(VENV)/.setup-stamp

.PHONY: all setup build run test clean
# BPF objects and skeletons are products too (uebpf loads the .bpf.o files): keep them.
.SECONDARY:
all: build

setup: $(SETUP_STAMP)
	@scripts/setup.sh --check-packages

$(SETUP_STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $@

build: setup workloads tracers runtime hook-victims $(BUILD)/buildinfo.json

# Build flags, recorded with every result (DESIGN rule 6).
$(BUILD)/buildinfo.json: Makefile | $(BIN)
	printf '{"cflags": "%s", "bpf_cflags": "%s", "cc": "%s", "clang": "%s"}\n' '$(CFLAGS)' '$(BPF_CFLAGS)' \
	  "$$($(CC) --version | head -1)" "$$($(CLANG) --version | head -1)" > $@

run: build
	$(VENV)/bin/tracecost run

test: build runtime-test
	$(VENV)/bin/pytest -q tests

clean:
	rm -rf $(BUILD)
	rm -rf runtime/target

$(LIB) $(BIN) $(BPF) $(SKEL):
	mkdir -p $@

# --- workloads -----------------------------------------------------------------------------
.PHONY: workloads
workloads: $(LIB)/libmylib.so $(BIN)/sample_app

$(LIB)/libmylib.so: workloads/mylib/mylib.c workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(BIN)/sample_app: workloads/sample_app/sample_app.c workloads/mylib/mylib.h workloads/common/peak_rss.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

# --- hook engine victims (tests/test_hook.py, scripts/hook_bench.py): PIE + shared library ---
.PHONY: hook-victims
hook-victims: $(BIN)/hook_torture $(BIN)/hook_bench

$(LIB)/libhooktorture.so: workloads/hook_torture/torture_lib.c workloads/hook_torture/torture_lib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(BIN)/hook_torture: workloads/hook_torture/torture.c workloads/hook_torture/torture_asm.S workloads/hook_torture/torture_lib.h $(LIB)/libhooktorture.so | $(BIN)
	$(CC) $(CFLAGS) -fPIE -pie -pthread -o $@ workloads/hook_torture/torture.c workloads/hook_torture/torture_asm.S \
	  -L$(LIB) -lhooktorture -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/hook_bench: workloads/hook_torture/hook_bench.c | $(BIN)
	$(CC) $(CFLAGS) -fPIE -pie -o $@ $<

# --- BPF probes: vmlinux.h from this kernel's BTF, one object and skeleton per probe --------
$(BUILD)/vmlinux.h: /sys/kernel/btf/vmlinux | $(BPF)
	$(BPFTOOL) btf dump file $< format c > $@.tmp && mv $@.tmp $@

$(BPF)/%.bpf.o: probes/%.bpf.c probes/%.h $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(SKEL)/%.skel.h: $(BPF)/%.bpf.o | $(SKEL)
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

# --- tracers ----------------------------------------------------------------------------------
.PHONY: tracers
tracers: $(BIN)/functrace $(LIB)/libmylib_lttng.so

$(BIN)/%: tracers/ebpf/%.c $(SKEL)/%.skel.h probes/%.h workloads/common/peak_rss.h | $(BIN)
	$(CC) $(CFLAGS) -Iprobes -I$(SKEL) -o $@ $< $$(pkg-config --cflags --libs libbpf)

LTTNG_SRC := tracers/lttng/mylib_wrapper.c tracers/lttng/mylib_tp.c
$(LIB)/libmylib_lttng.so: $(LTTNG_SRC) tracers/lttng/mylib_tp.h workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -Itracers/lttng -Iworkloads/mylib -o $@ $(LTTNG_SRC) -llttng-ust -ldl

# --- uebpf runtime (Rust workspace; cargo tracks its own dependencies, so these are phony) ----
RUNTIME_OUT := runtime/target/release
.PHONY: runtime runtime-test
runtime: | $(BIN) $(LIB)
	cargo build --release --manifest-path runtime/Cargo.toml
	cp $(RUNTIME_OUT)/uebpf-vmbench $(BIN)/
	cp $(RUNTIME_OUT)/libuebpf_vm.so $(RUNTIME_OUT)/libuebpf_vm.a $(RUNTIME_OUT)/libuebpf_hook_testagent.so $(LIB)/
	mkdir -p $(BUILD)/include && cp runtime/vm/include/uebpf_vm.h $(BUILD)/include/

# Conformance tests load programs into the kernel: run as root.
runtime-test:
	cargo test --release --manifest-path runtime/Cargo.toml
