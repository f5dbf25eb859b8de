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
