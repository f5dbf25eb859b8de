# tools/: eep-info (versions, knobs).
EEP_INFO := $(BUILD)/bin/eep-info
TOOLS += $(EEP_INFO)

# Every knob table registers itself when linked (util/config.h): eep-info links all of libeep
# (--whole-archive) and the control plane's tables, so `eep-info --config` lists every knob.
$(EEP_INFO): $(BUILD)/tools/eep_info.o $(CONTROL_KNOB_OBJS) $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $(BUILD)/tools/eep_info.o $(CONTROL_KNOB_OBJS) -Wl,--whole-archive $(LIBEEP_A) \
	    -Wl,--no-whole-archive $(LDFLAGS) $(NCCL_LDFLAGS) -ldl

# eep-jit-bench: cold/warm JIT timings per backend (--gpu: load and launch too).
EEP_JIT_BENCH := $(BUILD)/bin/eep-jit-bench
TOOLS += $(EEP_JIT_BENCH)

$(EEP_JIT_BENCH): $(BUILD)/tools/eep_jit_bench.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl

# eep-rank: one rank of a job (make run starts one per GPU).  It links the data plane (libeep)
# and the rank side of the control plane (libeep_agent), so it builds only where the control
# plane builds (control/module.mk defines LIBEEP_AGENT_A).
ifdef LIBEEP_AGENT_A
EEP_RANK := $(BUILD)/bin/eep-rank
TOOLS += $(EEP_RANK)

$(EEP_RANK): $(BUILD)/tools/eep_rank.o $(BUILD)/tools/eep_rank_fault.o $(BUILD)/tools/eep_step.o \
             $(BUILD)/tools/eep_rank_obs.o \
             $(BUILD)/tools/eep_fault.o $(LIBEEP_AGENT_A) $(LIBEEP_RANK_A) $(LIBEEP_CONTROL_A) \
             $$(LIBEEP_PROTO_A) $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(AGENT_LDLIBS) $(RANK_LDLIBS) $(NCCL_LDFLAGS) -ldl
endif
