# util/: libeep_util, the ground floor every binary links (status, log, clock, knobs, sha256).
# No CUDA, no NCCL, nothing above it (tests/repo/test_layering.sh).
UTIL_SRCS += util/status.c util/log.c util/clock.c util/config.c util/config_registry.c \
             util/core_knobs.c util/sha256.c
