# The duration suite's programs beyond its functrace tool (built by the Makefile's pattern rules):
# sample_app, the traced program, and LTTng's tracepoint wrapper of libmylib (LD_PRELOAD'ed).
DURATION_DIR := tracecost/suites/duration
LTTNG_SRC := $(DURATION_DIR)/mylib_wrapper.c $(DURATION_DIR)/mylib_tp.c
SUITE_PRODUCTS += $(BIN)/sample_app $(LIB)/libmylib_lttng.so

$(BIN)/sample_app: $(DURATION_DIR)/sample_app.c workloads/mylib/mylib.h include/peak_rss.h include/stepcount_marker.h $(LIB)/libmylib.so | $(BIN)
	$(CC) $(CFLAGS) -Iworkloads/mylib -o $@ $< -L$(LIB) -lmylib -Wl,-rpath,'$$ORIGIN/../lib'

$(LIB)/libmylib_lttng.so: $(LTTNG_SRC) $(DURATION_DIR)/mylib_tp.h workloads/mylib/mylib.h | $(LIB)
	$(CC) $(CFLAGS) -fPIC -shared -I$(DURATION_DIR) -Iworkloads/mylib -o $@ $(LTTNG_SRC) -llttng-ust -ldl
