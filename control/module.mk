# control/: the control plane (eepd, agent, eepctl), the etcd client and the gRPC C-core glue.
#
# Everything here links gRPC, protobuf-c and the generated protos, never CUDA.  Sources of the
# shared control library go into CONTROL_SRCS (append from anywhere: the archive's prerequisites
# are expanded a second time, after every module.mk has been read).  Programs link
#   $(LIBEEP_CONTROL_A) $(LIBEEP_PROTO_A) $(LIBUTIL_A) $(CONTROL_LDLIBS)
# and objects under control/ and tests/control/ get gRPC's flags and the generated headers from
# the pattern rules below.
GRPC_CFLAGS    := $(shell pkg-config --cflags grpc 2>/dev/null)
GRPC_LIBS      := $(or $(shell pkg-config --libs grpc gpr 2>/dev/null),-lgrpc -lgpr)
CONTROL_LDLIBS  = $(GRPC_LIBS) $(PROTOBUF_C_LIBS) -lpthread

LIBEEP_CONTROL_A := $(BUILD)/lib/libeep_control.a

CONTROL_SRCS += control/rpc/rpc_client.c control/rpc/rpc_client_stream.c \
                control/etcd/etcd.c control/etcd/etcd_watch.c control/etcd/etcd_lease.c \
                control/etcd/etcd_knobs.c \
                control/tool/tool.c

# The knob table is plain data that every process registers (elastic/config_registry.c).
UTIL_SRCS += control/etcd/etcd_knobs.c

# Objects under control/ and tests/control/ get gRPC's flags (never CUDA's) and wait for the
# generated headers (order-only).  The knob table is plain data and needs neither.
.SECONDEXPANSION:
$(BUILD)/control/%.o: control/%.c $(BUILD)/flags.stamp | $$(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(GRPC_CFLAGS) $(PROTOBUF_C_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/tests/control/%.o: tests/control/%.c $(BUILD)/flags.stamp | $$(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(GRPC_CFLAGS) $(PROTOBUF_C_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/control/etcd/etcd_knobs.o: control/etcd/etcd_knobs.c $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIBEEP_CONTROL_A): $$(patsubst %.c,$(BUILD)/%.o,$$(filter-out $$(UTIL_SRCS),$$(CONTROL_SRCS)))
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

# eepd, the agent, eepctl, the gRPC server glue, and their tests.
include control/eepd/module.mk tests/control/eepd.mk

include tests/control/module.mk
