# tests/control: eepd / agent / eepctl tests (the etcd client's own tests are listed elsewhere).
#
#   test_eepd_view     cmocka: rank order, placement, settle window, epoch rule (no etcd)
#   test_eepd_api      cmocka: handlers on garbage, oversized and valid requests (no etcd)
#   test_agent         libeep_agent's API against real etcd and an in-process eepd
#   test_eepd_fuzz     libFuzzer on the request decoders and handlers, bounded (clang-14)
#   test_eepd_cluster  real etcd + eepd replicas + agent processes on 127.0.0.1: join, leave,
#                      kill -9, SIGSTOP, leader failover, a 3-member etcd losing one; measures
#   test_eepctl        every eepctl command, table and --json, against a real eepd
#   test_eepctl_top_ranks  top's per-rank source: fake rank metrics endpoints, one slowed
#   test_grpc_client   Python grpcio against eepd: GetStatus, WatchViews, bad input, TLS refusal
#   test_tool          cmocka: the tools' JSON emitter and numeric flags (no etcd)
#   test_control_faults  issue 25's quick fault and bad-data cases (real etcd, eepd, agents)
EEPD_TEST_BINS := $(BUILD)/tests/control/test_eepd_view $(BUILD)/tests/control/test_eepd_api \
                  $(BUILD)/tests/control/test_tool
UNIT_TEST_BINS += $(EEPD_TEST_BINS)
SCRIPT_TESTS   += tests/control/test_eepd_fuzz.sh tests/control/test_eepd_cluster.py \
                  tests/control/test_eepctl.py tests/control/test_grpc_client.py \
                  tests/control/test_control_faults.py tests/control/test_eepd_health.py \
                  tests/control/test_eepctl_cli.sh tests/control/test_eepctl_top_ranks.py

$(EEPD_TEST_BINS): $(BUILD)/tests/control/%: $(BUILD)/tests/control/%.o $(LIBEEPD_A) \
                   $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(EEPD_LDLIBS) -lcmocka

EEP_AGENT_TEST := $(BUILD)/tests/control/test_agent
UNIT_TEST_BINS += $(EEP_AGENT_TEST)
$(EEP_AGENT_TEST): $(BUILD)/tests/control/test_agent.o $(BUILD)/tests/control/support/etcd_server.o \
                   $(LIBEEP_AGENT_A) $(LIBEEPD_A) $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(EEPD_LDLIBS) -libverbs -lcmocka

# The fuzzer: eepd's sources and the generated proto built again with clang's libFuzzer and
# ASan; everything else (etcd client, rpc glue, util) links uninstrumented.  No clang: the test
# script skips with the reason.
FUZZ_CC       := $(shell command -v clang-14 2>/dev/null || command -v clang 2>/dev/null)
EEPD_FUZZ_BIN := $(BUILD)/tests/control/fuzz_eepd_api
EEPD_FUZZ_SRCS := tests/control/fuzz_eepd_api.c $(EEPD_SRCS) $(BUILD)/gen/proto/eep.pb-c.c
ifneq ($(FUZZ_CC),)
unit-tests: $(EEPD_FUZZ_BIN)
$(EEPD_FUZZ_BIN): $(EEPD_FUZZ_SRCS) $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBUTIL_A) \
                  | $$(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address $(CPPFLAGS) \
	    $(GRPC_CFLAGS) $(PROTOBUF_C_CFLAGS) -o $@ $(EEPD_FUZZ_SRCS) \
	    $(LIBEEP_CONTROL_A) $(LIBEEP_PROTO_A) $(LIBUTIL_A) $(EEPD_LDLIBS) \
	    || { echo "fuzzer build failed; test_eepd_fuzz will skip"; rm -f $@; }
endif

# test_agent_bootstrap: the etcd backend of the bootstrap, forked ranks against real etcd + eepd
# (the bootstrap's common part, elastic/runtime/bootstrap.c, comes from libeep.a; nothing of CUDA is used).
EEP_AGENT_BOOT_TEST := $(BUILD)/tests/control/test_agent_bootstrap
UNIT_TEST_BINS += $(EEP_AGENT_BOOT_TEST)
$(EEP_AGENT_BOOT_TEST): $(BUILD)/tests/control/test_agent_bootstrap.o \
                        $(BUILD)/tests/control/support/etcd_server.o \
                        $(BUILD)/tests/control/support/eepd_child.o $(LIBEEP_AGENT_A) $(LIBEEPD_A) \
                        $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBEEP_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(EEPD_LDLIBS) -libverbs -lcmocka

# test_agent_membership: the agent as libeep's membership provider, forked ranks against real
# etcd + eepd (eep_view_check and the placement policy come from libeep.a; no CUDA is used).
EEP_AGENT_MS_TEST := $(BUILD)/tests/control/test_agent_membership
UNIT_TEST_BINS += $(EEP_AGENT_MS_TEST)
$(EEP_AGENT_MS_TEST): $(BUILD)/tests/control/test_agent_membership.o \
                      $(BUILD)/tests/control/support/etcd_server.o \
                      $(BUILD)/tests/control/support/eepd_child.o $(LIBEEP_AGENT_A) $(LIBEEPD_A) \
                      $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBEEP_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(EEPD_LDLIBS) -libverbs -lcmocka

# make test-faults: issue 25's slower etcd fault cases (etcd restarts, raft elections, pauses),
# too slow for `make test`'s budget; same runner, same counts.
CONTROL_FAULT_TESTS := tests/control/test_control_faults_slow.py tests/control/test_control_partition.py
.PHONY: test-faults
test-faults: deps-test
	@$(MAKE) --no-print-directory $(EEPD_BIN) $(EEPCTL_BIN) $(EEP_AGENT_BIN)
	@BUILD=$(BUILD) SANITIZER=$(SANITIZER) tests/run.sh $(CONTROL_FAULT_TESTS)

# make soak-control: tests/control/soak_control.py, a seeded fault schedule (SOAK_SECONDS,
# default 180; SOAK_SEED, default 1) against etcd x3, eepd x2 and five agents.
.PHONY: soak-control
soak-control: deps-test
	@$(MAKE) --no-print-directory $(EEPD_BIN) $(EEPCTL_BIN) $(EEP_AGENT_BIN)
	@BUILD=$(BUILD) EEP_TEST_TIMEOUT=$${EEP_TEST_TIMEOUT:-900} tests/run.sh tests/control/soak_control.py
