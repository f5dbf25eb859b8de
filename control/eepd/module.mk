# control/eepd, control/agent, control/eepctl and the gRPC server glue (see control/README.md).
# Included from control/module.mk; the etcd client and rpc_client come from there.
#
#   $(BUILD)/lib/libeep_agent.a  the rank side (link with libeep_control.a, libeep_proto.a)
#   $(BUILD)/lib/libeepd.a       eepd's logic, shared by the daemon, its tests and the fuzzer
#   $(BUILD)/bin/eepd, eepctl, eep-agent
CONTROL_SRCS += control/rpc/rpc_server.c
AGENT_SRCS   += control/agent/agent.c control/agent/agent_lease.c control/agent/agent_view.c
AGENT_SRCS   += control/agent/agent_bootstrap.c control/agent/agent_knobs.c \
                control/agent/agent_membership.c
EEPD_SRCS    := control/eepd/eepd.c control/eepd/eepd_mirror.c control/eepd/eepd_watch.c \
                control/eepd/eepd_election.c control/eepd/eepd_publish.c \
                control/eepd/eepd_api.c control/eepd/eepd_view.c \
                control/eepd/eepd_jobs.c \
                control/eepd/eepd_metrics.c control/eepd/eepd_knobs.c \
                control/tool/http_page.c

LIBEEP_AGENT_A := $(BUILD)/lib/libeep_agent.a
LIBEEPD_A      := $(BUILD)/lib/libeepd.a
EEPD_BIN       := $(BUILD)/bin/eepd
EEPCTL_BIN     := $(BUILD)/bin/eepctl
EEP_AGENT_BIN  := $(BUILD)/bin/eep-agent
TOOLS += $(LIBEEP_AGENT_A) $(EEPD_BIN) $(EEPCTL_BIN) $(EEP_AGENT_BIN)

EEPD_LDLIBS  = $(CONTROL_LDLIBS) -lmicrohttpd
AGENT_LDLIBS = $(CONTROL_LDLIBS) -libverbs

$(LIBEEP_AGENT_A): $(patsubst %.c,$(BUILD)/%.o,$(AGENT_SRCS))
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(LIBEEPD_A): $(patsubst %.c,$(BUILD)/%.o,$(EEPD_SRCS))
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(EEPD_BIN): $(BUILD)/control/eepd/eepd_main.o $(LIBEEPD_A) $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) \
             $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(EEPD_LDLIBS)

$(EEPCTL_BIN): $(BUILD)/control/eepctl/eepctl.o $(BUILD)/control/eepctl/eepctl_top.o \
               $(BUILD)/control/eepctl/eepctl_knobs.o \
               $(LIBEEP_CONTROL_A) $$(LIBEEP_PROTO_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(CONTROL_LDLIBS)

$(EEP_AGENT_BIN): $(BUILD)/control/agent/agent_main.o $(LIBEEP_AGENT_A) $(LIBEEP_CONTROL_A) \
                  $$(LIBEEP_PROTO_A) $(LIBUTIL_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(AGENT_LDLIBS)
