# tests/gin/: the GIN plugin's CPU tests (make test): plain C programs that dlopen the plugin and
# call its two tables from forked processes with host memory (gin_harness.c); no GPU, no NCCL.
GIN_TEST_BINS    := $(BUILD)/tests/gin/test_gin_net $(BUILD)/tests/gin/test_gin_put
GIN_HARNESS_OBJ  := $(BUILD)/tests/gin/gin_harness.o
UNIT_TEST_BINS   += $(GIN_TEST_BINS)
unit-tests: $(GIN_TEST_BINS)

$(GIN_HARNESS_OBJ): CPPFLAGS += -DEEP_GIN_PLUGIN_PATH='"$(abspath $(GIN_PLUGIN_SO))"'

$(GIN_TEST_BINS): $(BUILD)/tests/gin/%: $(BUILD)/tests/gin/%.o $(GIN_HARNESS_OBJ) $(GIN_PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) $(LDFLAGS) -ldl

# The one-GPU cluster's launcher: where it puts ranks (GPUs, nodes), on the CPU.
SCRIPT_TESTS += tests/gin/test_one_gpu_cluster_sh.sh

.PHONY: gin-test
gin-test: $(GIN_TEST_BINS)
	@BUILD=$(BUILD) tests/run.sh $(GIN_TEST_BINS)

# The GPU side (make gpu-gin on the GPU machine; builds here too): tests/gpu/gin/module.mk.
include tests/gpu/gin/module.mk
