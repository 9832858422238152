# The compat suite's programs beyond its uprobe tools (built by the Makefile's pattern rules): the
# workloads the corpus and the distribution's tools run on, and the corpus itself.
SUITE_PRODUCTS += $(BIN)/compat_app $(BIN)/distro_app compat-tools

# The compatibility corpus's workload; calls libmylib like sample_app.
$(BIN)/compat_app: tracecost/suites/compat/compat_app.c workloads/mylib/mylib.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

# The workload of the distribution's tracing tools (tests/test_distro_tools.py).
$(BIN)/distro_app: tracecost/suites/compat/distro_app.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

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
