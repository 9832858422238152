# The micro suite's victim beyond its micro tool (built by the Makefile's pattern rules): its probe
# sites must stay separate, real calls (see its comments); probe_sites.S holds the ones whose
# first instruction must be exact.
MICROBENCH_SRC := tracecost/suites/micro/microbench.c tracecost/suites/micro/probe_sites.S
SUITE_PRODUCTS += $(BIN)/microbench

$(BIN)/microbench: $(MICROBENCH_SRC) include/latency_histogram.h include/stepcount_marker.h | $(BIN)
	$(CC) $(CFLAGS) -o $@ $(MICROBENCH_SRC)
