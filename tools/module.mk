# tools/: eep-info (versions, knobs).
EEP_INFO := $(BUILD)/bin/eep-info
TOOLS += $(EEP_INFO)

$(EEP_INFO): $(BUILD)/tools/eep_info.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl
