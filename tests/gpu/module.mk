# tests/gpu/: GPU tests, plain C programs run one process per GPU (launch.sh) by `make gpu-check`.
# They link libeep.a only: no cmocka, no gRPC, nothing the GPU machine lacks.
# A test that needs NCCL's device API types (nccl_device.h is C++) is a .cc file.
GPU_TEST_SRCS := $(wildcard tests/gpu/test_*.c) $(wildcard tests/gpu/test_*.cc)
GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(patsubst tests/gpu/%.cc,$(BUILD)/tests/gpu/%,$(GPU_TEST_SRCS)))

$(BUILD)/tests/gpu/%: $(BUILD)/tests/gpu/%.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl

# Script tests drive a tool themselves (test_ep_cases.sh: eep-bench ep against the CPU reference).
GPU_TEST_SCRIPTS := tests/gpu/test_ep_cases.sh

gpu-check: check-cuda $(LIBEEP_A) $(GPU_TEST_BINS) $(BUILD)/bin/eep-bench
	@BUILD=$(BUILD) GPU_TEST_EEP_BENCH=$(BUILD)/bin/eep-bench tests/gpu/run_all.sh \
	    $(GPU_TEST_BINS) $(GPU_TEST_SCRIPTS)
