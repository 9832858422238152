# The transport suite's producer beyond its transport tool (built by the Makefile's pattern rules).
SUITE_PRODUCTS += $(BIN)/syscall_load

$(BIN)/syscall_load: tracecost/suites/transport/syscall_load.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

$(BIN)/transport: include/latency_histogram.h
