# The app suite's gate (not a probe and loader pair): it holds the user's command until the
# probes are attached to its pid.
SUITE_PRODUCTS += $(BIN)/gate

$(BIN)/gate: tracecost/suites/app/gate.c | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<
