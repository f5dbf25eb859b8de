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
                control/etcd/etcd.c control/etcd/etcd_kv.c control/etcd/etcd_watch.c control/etcd/etcd_lease.c \
                control/etcd/etcd_knobs.c \
                control/tool/tool.c control/tool/prom.c

# Objects under control/ get gRPC's flags (never CUDA's) and wait for the
# generated headers (order-only).
.SECONDEXPANSION:
$(BUILD)/control/%.o: control/%.c $(BUILD)/flags.stamp | $$(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(GRPC_CFLAGS) $(PROTOBUF_C_CFLAGS) $(CFLAGS) -c $< -o $@

# The knob tables include only util/config.h: no gRPC flags, no generated headers, so eep-info
# links them (every knob documented) on a machine without the control plane's packages too.
CONTROL_KNOB_OBJS := $(BUILD)/control/etcd/etcd_knobs.o $(BUILD)/control/eepd/eepd_knobs.o \
                     $(BUILD)/control/agent/agent_knobs.o $(BUILD)/control/eepctl/eepctl_knobs.o \
                     $(BUILD)/control/rank/rank_knobs.o
$(CONTROL_KNOB_OBJS): $(BUILD)/control/%.o: control/%.c $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIBEEP_CONTROL_A): $$(patsubst %.c,$(BUILD)/%.o,$$(CONTROL_SRCS))
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

# eepd, the agent, eepctl and the gRPC server glue (their tests: tests/control/, from tests/).
include control/eepd/module.mk
include control/rank/module.mk
