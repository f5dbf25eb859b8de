# elastic/: the host runtime of the data plane, and the core services every binary shares.
UTIL_SRCS += elastic/status.c elastic/log.c elastic/config.c elastic/config_registry.c \
             elastic/core_knobs.c
LIBEEP_SRCS += elastic/nccl_util.c
