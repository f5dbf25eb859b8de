# tests/control/: control-plane tests against a real etcd (skipped when etcd is missing).
#
# The etcd client's tests (eepd's are in eepd.mk), each one cmocka program linked with the etcd
# test support (tests/control/support/), the control library, the generated protos and
# libeep_util, and run by `make test` (UNIT_TEST_BINS).
CONTROL_TEST_SUPPORT_SRCS := tests/control/support/etcd_server.c
ETCD_TEST_BINS := $(BUILD)/tests/control/test_etcd $(BUILD)/tests/control/test_etcd_cluster \
                  $(BUILD)/tests/control/test_etcd_tls
UNIT_TEST_BINS += $(ETCD_TEST_BINS)

# Objects here get gRPC's flags (never CUDA's) and wait for the generated headers.
$(BUILD)/tests/control/%.o: tests/control/%.c $(BUILD)/flags.stamp | $$(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(GRPC_CFLAGS) $(PROTOBUF_C_CFLAGS) $(CFLAGS) -c $< -o $@


$(ETCD_TEST_BINS): $(BUILD)/tests/control/%: $(BUILD)/tests/control/%.o \
        $(patsubst %.c,$(BUILD)/%.o,$(CONTROL_TEST_SUPPORT_SRCS)) $(LIBEEP_CONTROL_A) \
        $(BUILD)/lib/libeep_proto.a $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(CONTROL_LDLIBS) -lcmocka

# The etcd test server script itself (other tests source it).
SCRIPT_TESTS += tests/control/test_etcd_server_sh.sh

# test_rank_metrics: a rank's Prometheus text, the reader eepctl top scrapes it with, and the
# rank's /metrics endpoint on 127.0.0.1 (cmocka, no etcd).
RANK_METRICS_TEST := $(BUILD)/tests/control/test_rank_metrics
UNIT_TEST_BINS += $(RANK_METRICS_TEST)
$(RANK_METRICS_TEST): $(BUILD)/tests/control/test_rank_metrics.o $(LIBEEP_RANK_A) \
                      $(LIBEEP_CONTROL_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(RANK_LDLIBS) -lcmocka -lm
