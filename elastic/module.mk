# elastic/: the host runtime of the data plane, and the core services every binary shares.
UTIL_SRCS += elastic/status.c elastic/log.c elastic/config.c elastic/config_registry.c \
             elastic/core_knobs.c
LIBEEP_SRCS += elastic/nccl_util.c
# dispatch/combine host side (ep_*): knobs in the util base (the registry lists every table).
UTIL_SRCS += elastic/ep_knobs.c
LIBEEP_SRCS += elastic/ep_layout.c elastic/ep_args.c elastic/ep_handle.c elastic/ep.c
# runtime (runtime*.c, runtime_nccl.cc) and the standalone bootstrap (bootstrap*.c): knobs in the
# util base.
UTIL_SRCS += elastic/runtime_knobs.c
LIBEEP_SRCS += elastic/bootstrap.c elastic/bootstrap_file.c elastic/bootstrap_tcp.c
