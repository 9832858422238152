# The redis suite's power-cut filesystem (libfuse3; its packages come with packages.txt).
SUITE_PRODUCTS += $(BIN)/powercut

$(BIN)/powercut: tracecost/suites/redis/powercut.c include/fuse_source.h | $(BIN)
	$(CC) $(CFLAGS) -pthread -o $@ $< $$(pkg-config --cflags --libs fuse3)

# Its extension: a .bpf.o that `uebpf attach` loads into redis (no loader of its own).
SUITE_PRODUCTS += $(BPF)/aof_bounded.bpf.o
