# tests/: mirrors the source folders.  unit/ runs anywhere (make test); gpu/ needs GPUs.
#
# A unit test is one cmocka program, tests/unit/test_<name>.c, linked against libeep.a.  Folders
# with other needs (control/ links gRPC) add their binaries to UNIT_TEST_BINS with their own rule.
# Script tests (SCRIPT_TESTS) are executables: exit 0 passes, 77 skips, anything else fails.
UNIT_TEST_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_TEST_BINS += $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_TEST_SRCS))
SCRIPT_TESTS   +=

.PHONY: unit-tests
unit-tests: $(UNIT_TEST_BINS)

$(BUILD)/tests/unit/%: $(BUILD)/tests/unit/%.o $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -lcmocka -ldl

# test_ep_*: the CPU reference of dispatch/combine (tests/unit/ep_reference.c) is linked in; it
# must come before libeep.a on the link line, hence a rule of their own.
EP_REFERENCE_OBJ := $(BUILD)/tests/unit/ep_reference.o
EP_REFERENCE_TESTS := $(BUILD)/tests/unit/test_ep_layout $(BUILD)/tests/unit/test_ep_reference
$(EP_REFERENCE_TESTS): $(BUILD)/tests/unit/%: $(BUILD)/tests/unit/%.o $(EP_REFERENCE_OBJ) $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -lcmocka -ldl

# GPU tests (make gpu-check): tests/gpu/module.mk.
include tests/gpu/module.mk
