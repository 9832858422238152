# The load suite: beside its loadlat tool (built by the Makefile's pattern rules), its victim and
# the objects it times with functrace's and micro's: an empty program and two generated
# straight-line programs of about 4k and 32k instructions (gen_loadlat_prog.sh STEPS: 5
# instructions a step).
LOAD_DIR := tracecost/suites/load
LOADLAT_OBJECTS := $(BPF)/loadlat_empty.bpf.o $(BPF)/loadlat_gen4k.bpf.o $(BPF)/loadlat_gen32k.bpf.o \
  $(BPF)/functrace.bpf.o $(BPF)/micro.bpf.o
SUITE_PRODUCTS += $(BIN)/loadlat_victim $(LOADLAT_OBJECTS)

$(BIN)/loadlat_victim: $(LOAD_DIR)/loadlat_victim.c $(LOAD_DIR)/loadlat.h | $(BIN)
	$(CC) $(CFLAGS) -o $@ $<

$(BPF)/loadlat_empty.bpf.o: $(LOAD_DIR)/loadlat_empty.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/gen/loadlat_gen4k.bpf.c: STEPS := 819
$(BUILD)/gen/loadlat_gen32k.bpf.c: STEPS := 6553
$(BUILD)/gen/loadlat_gen%.bpf.c: $(LOAD_DIR)/gen_loadlat_prog.sh
	mkdir -p $(@D)
	$< $(STEPS) > $@.tmp && mv $@.tmp $@

$(BPF)/loadlat_gen%.bpf.o: $(BUILD)/gen/loadlat_gen%.bpf.c $(BUILD)/vmlinux.h | $(BPF)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@
