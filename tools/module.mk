# tools/: eep-info (versions, knobs).
EEP_INFO := $(BUILD)/bin/eep-info
TOOLS += $(EEP_INFO)

$(EEP_INFO): $(BUILD)/tools/eep_info.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl

# eep-jit-bench: cold/warm JIT timings per backend (--gpu: load and launch too).
EEP_JIT_BENCH := $(BUILD)/bin/eep-jit-bench
TOOLS += $(EEP_JIT_BENCH)

$(EEP_JIT_BENCH): $(BUILD)/tools/eep_jit_bench.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl
