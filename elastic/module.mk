# elastic/: the host runtime of the data plane, and the core services every binary shares.
UTIL_SRCS += elastic/status.c elastic/log.c elastic/clock.c elastic/config.c \
             elastic/config_registry.c elastic/core_knobs.c
LIBEEP_SRCS += elastic/nccl_util.c
# dispatch/combine host side (ep_*): knobs in the util base (the registry lists every table).
UTIL_SRCS += elastic/ep_knobs.c
LIBEEP_SRCS += elastic/ep_layout.c elastic/ep_args.c elastic/ep_handle.c elastic/ep.c
# runtime (runtime*.c, runtime_nccl.cc) and the standalone bootstrap (bootstrap*.c): knobs in the
# util base.
UTIL_SRCS += elastic/runtime_knobs.c
LIBEEP_SRCS += elastic/bootstrap.c elastic/bootstrap_file.c elastic/bootstrap_tcp.c
LIBEEP_SRCS += elastic/runtime.c elastic/runtime_nccl.cc elastic/runtime_barrier.c \
               elastic/runtime_layout.c elastic/wait_loop.c
# JIT (jit*.c) and the CUDA/NVRTC symbol table: knobs and hashing in the util base, the rest in
# libeep.  Build-time defaults baked in: the toolkit, the NCCL headers libeep was built with, and
# this checkout as the kernel source root, so tests and tools work from the build tree.
UTIL_SRCS += elastic/sha256.c elastic/jit_knobs.c
LIBEEP_SRCS += elastic/cuda_sym.c elastic/jit.c elastic/jit_source.c elastic/jit_cache.c \
               elastic/jit_nvrtc.c elastic/jit_nvcc.c elastic/jit_prefetch.c
$(BUILD)/elastic/jit_knobs.o: CPPFLAGS += -DEEP_JIT_DEFAULT_NVCC='"$(NVCC)"' \
                                          -DEEP_JIT_DEFAULT_SOURCE_ROOT='"$(CURDIR)"'
$(BUILD)/elastic/jit.o: CPPFLAGS += -DEEP_JIT_CUDA_HOME='"$(CUDA_HOME)"' \
                                    -DEEP_JIT_NCCL_INCLUDE='"$(NCCL_HOME)/include"'
$(BUILD)/elastic/cuda_sym.o: CPPFLAGS += -DEEP_CUDA_SYM_NVRTC_FILE='"$(CUDA_HOME)/lib64/libnvrtc.so.13"'
# JIT tests: the repository root (kernels/probe) and libeep.so (checked for not linking libcuda).
$(BUILD)/tests/unit/test_jit%.o: CPPFLAGS += -DEEP_TEST_SOURCE_ROOT='"$(CURDIR)"'
$(BUILD)/tests/unit/test_cuda_sym.o: CPPFLAGS += -DEEP_TEST_LIBEEP_SO='"$(abspath $(LIBEEP_SO))"'
$(BUILD)/tests/unit/test_cuda_sym: | $(LIBEEP_SO)
