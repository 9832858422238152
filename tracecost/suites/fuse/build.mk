# The fuse suite: its passthrough filesystem (libfuse3), the workloads' driver, and the metadata
# cache's program (loaded by uebpf, no loader of its own).
SUITE_PRODUCTS += $(BIN)/fuse_passthrough $(BIN)/fsbench $(BPF)/fuse_cache.bpf.o

$(BIN)/fuse_passthrough: tracecost/suites/fuse/fuse_passthrough.c include/fuse_source.h | $(BIN)
	$(CC) $(CFLAGS) -o $@ $< $$(pkg-config --cflags --libs fuse3)

$(BIN)/fsbench: tracecost/suites/fuse/fsbench.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<
