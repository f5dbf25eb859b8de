# deploy/install.mk: make install / make uninstall (PREFIX, DESTDIR), and the agent's shared library.
#
#   make install PREFIX=/opt/eep    libraries with sonames, headers (the agent's API included),
#                                   pkg-config files (eep, eep-agent), tools, and the kernel
#                                   sources under share/eep where the installed JIT finds them
#   make uninstall PREFIX=/opt/eep  removes exactly what install wrote (its manifest)
#
# deploy/install.sh does the copying; tests/install/test_install.sh builds and runs programs
# against an installed tree with `pkg-config --cflags --libs`.  Included from the Makefile after
# every module.mk, so the source lists below are complete.
PREFIX ?= /usr/local

# libeep_agent.so: the agent, the etcd client, the gRPC glue and the generated protos in one
# shared library that needs libeep.so for the ground floor (status, log, knobs: one copy of
# their state per process) and gRPC, protobuf-c and libibverbs.  Its own soname follows libeep's.
LIBEEP_AGENT_SO  := $(BUILD)/lib/libeep_agent.so
AGENT_SO_OBJS    := $(patsubst %.c,$(BUILD)/%.o,$(AGENT_SRCS) $(CONTROL_SRCS)) $(PROTO_OBJS)

$(LIBEEP_AGENT_SO): $(AGENT_SO_OBJS) $(LIBEEP_SO)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libeep_agent.so.$(EEP_SOVERSION) -Wl,--no-undefined \
	    -o $@.$(EEP_VERSION) $(AGENT_SO_OBJS) -L$(BUILD)/lib -leep $(LDFLAGS) $(AGENT_LDLIBS)
	ln -sfn libeep_agent.so.$(EEP_VERSION) $@.$(EEP_SOVERSION)
	ln -sfn libeep_agent.so.$(EEP_SOVERSION) $@

.PHONY: install uninstall agent-so
agent-so: $(LIBEEP_AGENT_SO)

install: all $(LIBEEP_AGENT_SO)
	@PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' BUILD='$(BUILD)' EEP_VERSION='$(EEP_VERSION)' \
	    EEP_SOVERSION='$(EEP_SOVERSION)' EEP_INSTALL_TOOLS='$(filter-out %.a,$(TOOLS))' \
	    EEP_NCCL_LIBS='$(NCCL_LDFLAGS)' EEP_AGENT_LIBS='$(AGENT_LDLIBS)' deploy/install.sh install

uninstall:
	@PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' BUILD='$(BUILD)' deploy/install.sh uninstall

# tests/install/test_install.sh installs the build: its shared library is built with the tests.
unit-tests: $(LIBEEP_AGENT_SO)
