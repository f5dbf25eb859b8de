# util/: libeep_util, the ground floor every binary links (status, log, clock, knobs, sha256).
# No CUDA, no NCCL, nothing above it (tests/repo/test_layering.sh).
UTIL_SRCS += util/status.c util/log.c util/clock.c util/config.c util/core_knobs.c util/sha256.c \
             util/version.c

# The names of every knob in the tree (the unknown-variable warning), generated from the tables;
# the build fails on a name declared twice.  Regenerated on every make (cheap; written only when
# it changes), so an added or renamed knob is never missed.
KNOB_NAME_SRCS := $(sort $(wildcard util/*_knobs.c elastic/*/*_knobs.c control/*/*_knobs.c gin/*.c))
KNOB_NAMES_C   := $(BUILD)/gen/knob_names.c
UTIL_GEN_OBJS  := $(BUILD)/gen/knob_names.o
.PHONY: FORCE
FORCE:
$(KNOB_NAMES_C): FORCE
	@mkdir -p $(dir $@)
	@util/gen_knob_names.sh $@ $(KNOB_NAME_SRCS)
$(UTIL_GEN_OBJS): $(KNOB_NAMES_C) $(BUILD)/flags.stamp
	$(CC) $(CFLAGS) -c $< -o $@
