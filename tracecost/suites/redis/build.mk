# The redis suite's power-cut filesystem (libfuse3; its packages come with packages.txt).
SUITE_PRODUCTS += $(BIN)/powercut

$(BIN)/powercut: tracecost/suites/redis/powercut.c | $(BIN)
	$(CC) $(CFLAGS) -pthread -o $@ $< $$(pkg-config --cflags --libs fuse3)
