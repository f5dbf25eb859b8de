# proto/: every proto/**/*.proto is compiled by protoc-c at build time into $(BUILD)/gen/proto/
# (proto/x/y.proto -> $(BUILD)/gen/proto/x/y.pb-c.{c,h}, included as "proto/x/y.pb-c.h") and
# archived into $(BUILD)/lib/libeep_proto.a.  Imports are written from the repository root
# (import "proto/etcd/kv.proto").  See proto/README.md.
PROTOC_C ?= protoc-c

PROTO_SRCS  := $(shell find proto -name '*.proto' 2>/dev/null | LC_ALL=C sort)
PROTO_GEN_C := $(patsubst %.proto,$(BUILD)/gen/%.pb-c.c,$(PROTO_SRCS))
PROTO_GEN_H := $(patsubst %.proto,$(BUILD)/gen/%.pb-c.h,$(PROTO_SRCS))
PROTO_OBJS  := $(patsubst %.c,%.o,$(PROTO_GEN_C))
LIBEEP_PROTO_A := $(BUILD)/lib/libeep_proto.a
PROTOBUF_C_CFLAGS := $(shell pkg-config --cflags libprotobuf-c 2>/dev/null)
PROTOBUF_C_LIBS   := $(or $(shell pkg-config --libs libprotobuf-c 2>/dev/null),-lprotobuf-c)

# One protoc-c run writes both files (a grouped pattern rule).  The generated headers of every
# proto exist before any generated file compiles, because one may import another.
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: %.proto
	@mkdir -p $(BUILD)/gen
	$(PROTOC_C) --proto_path=. --c_out=$(BUILD)/gen $<

$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c $(BUILD)/flags.stamp | $(PROTO_GEN_H)
	$(CC) $(CPPFLAGS) $(PROTOBUF_C_CFLAGS) $(CFLAGS) -Wno-unused-parameter -c $< -o $@

$(LIBEEP_PROTO_A): $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

.PRECIOUS: $(PROTO_GEN_C) $(PROTO_GEN_H)
