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
CFLAGS  := -O2 -g -Wall -Wextra -Werror -fno-omit-frame-pointer -Iworkloads/common
# The multiarch include folder last: libbpf's usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> lives there.
BPF_CFLAGS := -O2 -g -Wall -target bpf -D__TARGET_ARCH_x86 -I$(BUILD) -Iprobes -idirafter /usr/include/$(shell $(CC) -dumpmachine)

LIB := $(BUILD)/lib
BIN := $(BUILD)/bin
BPF := $(BUILD)/bpf
SKEL := $(BUILD)/skel

SETUP_STAMP := $(VENV)/.setup-stamp
PLOTLY_JS := $(BUILD)/vendor/plotly-basic.min.js

.PHONY: all setup build run test clean lint lint-python
# BPF objects and skeletons are products too (uebpf loads the .bpf.o files): keep them.
.SECONDARY:
all: build

setup: $(SETUP_STAMP)
	@scripts/setup.sh --check-packages

$(SETUP_STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $@

build: setup workloads tracers runtime runtime-tools hook-victims $(BUILD)/buildinfo.json $(PLOTLY_JS)

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

# --- workloads -----------------------------------------------------------------------------
.PHONY: workloads
workloads: $(LIB)/libmylib.so $(BIN)/sample_app $(BIN)/microbench $(BIN)/syscall_load $(BIN)/compat_app $(BIN)/distro_app \
  $(BIN)/inject_victim $(BIN)/static_victim $(BIN)/sleep_victim $(BIN)/signal_victim $(BIN)/timer_victim \
  $(BIN)/fuse_passthrough $(BIN)/fsbench $(BPF)/fuse_cache.bpf.o

# The fuse suite's filesystem (libfuse3) and its workloads' driver.
$(BIN)/fuse_passthrough: workloads/fuse_passthrough/fuse_passthrough.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $< $$(pkg-config --cflags --libs fuse3)

$(BIN)/fsbench: workloads/fuse_passthrough/fsbench.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

$(LIB)/libmylib.so: workloads/mylib/mylib.c workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

# The micro-benchmark victim: its probe sites must stay separate, real calls (see its comments);
# probe_sites.S holds the ones whose first instruction must be exact.
MICROBENCH_SRC := workloads/microbench/microbench.c workloads/microbench/probe_sites.S
$(BIN)/microbench: $(MICROBENCH_SRC) workloads/common/latency_histogram.h | $(BIN)
	$(CC) $(CFLAGS) -o $@ $(MICROBENCH_SRC)

# The compatibility corpus's workload (tests/test_compat.py); calls libmylib like sample_app.
$(BIN)/compat_app: workloads/compat/compat_app.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

# The workload of the distribution's tracing tools (tests/test_distro_tools.py).
$(BIN)/distro_app: workloads/compat/distro_app.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

$(BIN)/sample_app: workloads/sample_app/sample_app.c workloads/mylib/mylib.h workloads/common/peak_rss.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

# uebpf inject's targets (tests/test_inject.py): threads calling libmylib, and a static binary.
$(BIN)/inject_victim: workloads/inject_victim/inject_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -pthread -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/static_victim: workloads/inject_victim/static_victim.c | $(BIN)
	$(CC) $(CFLAGS) -static -o $@ $<

$(BIN)/sleep_victim: workloads/inject_victim/sleep_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/signal_victim: workloads/inject_victim/signal_victim.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(BIN)/timer_victim: workloads/inject_victim/timer_victim.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

$(BIN)/syscall_load: workloads/syscall_load/syscall_load.c | $(BIN)
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
	$(CXX) $(filter-out -Iworkloads/common,$(CFLAGS)) -fPIE -pie -o $@ $<

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
# The compatibility corpus (tests/test_compat.py) adds three small uprobe loaders.
COMPAT_LOADERS := $(BIN)/malloc_sizes $(BIN)/func_latency $(BIN)/greet_printk $(BIN)/usdt_args $(BIN)/func_ip
tracers: $(BIN)/functrace $(BIN)/micro $(BIN)/transport $(COMPAT_LOADERS) $(LIB)/libmylib_lttng.so loadlat \
  $(BIN)/selftrace $(BIN)/sslsniff $(BIN)/syscount compat-tools

# tracecost load: its loader, its victim, and the objects it times beside functrace's and micro's:
# an empty program and two generated straight-line programs of about 4k and 32k instructions
# (scripts/gen_loadlat_prog.sh STEPS: 5 instructions a step).
.PHONY: loadlat
LOADLAT_OBJECTS := $(BPF)/loadlat_empty.bpf.o $(BPF)/loadlat_gen4k.bpf.o $(BPF)/loadlat_gen32k.bpf.o \
  $(BPF)/functrace.bpf.o $(BPF)/micro.bpf.o
loadlat: $(BIN)/loadlat $(BIN)/loadlat_victim $(LOADLAT_OBJECTS)

$(BIN)/loadlat_victim: workloads/loadlat_victim/loadlat_victim.c probes/loadlat.h | $(BIN)
	$(CC) $(CFLAGS) -Iprobes -o $@ $<

$(BPF)/loadlat_empty.bpf.o: probes/loadlat_empty.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/gen/loadlat_gen4k.bpf.c: STEPS := 819
$(BUILD)/gen/loadlat_gen32k.bpf.c: STEPS := 6553
$(BUILD)/gen/loadlat_gen%.bpf.c: scripts/gen_loadlat_prog.sh
	mkdir -p $(@D)
	scripts/gen_loadlat_prog.sh $(STEPS) > $@.tmp && mv $@.tmp $@

$(BPF)/loadlat_gen%.bpf.o: $(BUILD)/gen/loadlat_gen%.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(COMPAT_LOADERS): tracers/ebpf/uprobe_loader.h

$(BIN)/%: tracers/ebpf/%.c $(SKEL)/%.skel.h probes/%.h tracers/ebpf/loader.h workloads/common/peak_rss.h | $(BIN)
	$(CC) $(CFLAGS) -Iprobes -I$(SKEL) -o $@ $< $$(pkg-config --cflags --libs libbpf)

$(BIN)/transport: workloads/common/latency_histogram.h

# selftrace: a loader that traces itself (libbpf-bootstrap's layout: name.bpf.c + name.c side by
# side; tests/test_agent.py runs it on the kernel and with the server and the agent preloaded).
$(BPF)/selftrace.bpf.o: workloads/selftrace/selftrace.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BIN)/selftrace: workloads/selftrace/selftrace.c $(SKEL)/selftrace.skel.h | $(BIN)
	$(CC) $(CFLAGS) -I$(SKEL) -o $@ $< $$(pkg-config --cflags --libs libbpf)

# The compatibility corpus's tools (tests/test_compat.py): tests/compat/NAME.bpf.c + NAME.c, one
# libbpf tool each (libbpf-bootstrap's layout), built into build/compat/NAME with its skeleton.
.PHONY: compat-tools
COMPAT := $(BUILD)/compat
COMPAT_TOOLS := $(patsubst tests/compat/%.bpf.c,$(COMPAT)/%,$(wildcard tests/compat/*.bpf.c))
compat-tools: $(COMPAT_TOOLS) $(COMPAT)/compat_app.stripped

# The workload without a symbol table (strip --strip-all, as distributions ship binaries), for
# probes placed by file offset: its rpath ($$ORIGIN/../lib) still finds build/lib from here.
$(COMPAT)/compat_app.stripped: $(BIN)/compat_app | $(COMPAT)
	strip --strip-all -o $@ $<

$(COMPAT):
	mkdir -p $@

$(COMPAT)/%.bpf.o: tests/compat/%.bpf.c tests/compat/compat.h $(BUILD)/vmlinux.h | $(COMPAT)
	$(CLANG) $(BPF_CFLAGS) -Itests/compat -c $< -o $@

$(COMPAT)/%.skel.h: $(COMPAT)/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $*_bpf > $@.tmp && mv $@.tmp $@

$(COMPAT)/%: tests/compat/%.c $(COMPAT)/%.skel.h tests/compat/compat.h
	$(CC) $(CFLAGS) -Itests/compat -I$(COMPAT) -o $@ $< $$(pkg-config --cflags --libs libbpf)

LTTNG_SRC := tracers/lttng/mylib_wrapper.c tracers/lttng/mylib_tp.c
$(LIB)/libmylib_lttng.so: $(LTTNG_SRC) tracers/lttng/mylib_tp.h workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -Itracers/lttng -Iworkloads/mylib -o $@ $(LTTNG_SRC) -llttng-ust -ldl

# --- uebpf runtime (Rust workspace; cargo tracks its own dependencies, so these are phony) ----
RUNTIME_OUT := runtime/target/release
.PHONY: runtime runtime-test
runtime: | $(BIN) $(LIB)
	cargo build --release --manifest-path runtime/Cargo.toml
	cp $(RUNTIME_OUT)/uebpf-vmbench $(RUNTIME_OUT)/uebpf $(BIN)/
	cp $(RUNTIME_OUT)/libuebpf_vm.so $(RUNTIME_OUT)/libuebpf_vm.a $(RUNTIME_OUT)/libuebpf.so $(RUNTIME_OUT)/libuebpf.a $(LIB)/
	cp $(RUNTIME_OUT)/libuebpf_server.so $(RUNTIME_OUT)/libuebpf_agent.so $(RUNTIME_OUT)/libuebpf_hook_testagent.so $(LIB)/
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
