# elastic/: libeep, the host side of the data plane, in four rooms (README.md has the floor plan):
# gpu/ (CUDA driver, NVRTC, NCCL behind one door), jit/, runtime/, ep/.
LIBEEP_SRCS += elastic/gpu/cuda_sym.c elastic/gpu/nccl_util.c elastic/gpu/nccl_gin_leak.cc \
               elastic/gpu/gpu_share.c
LIBEEP_SRCS += elastic/jit/jit.c elastic/jit/jit_source.c elastic/jit/jit_cache.c \
               elastic/jit/jit_nvrtc.c elastic/jit/jit_nvcc.c elastic/jit/jit_prefetch.c
LIBEEP_SRCS += elastic/runtime/runtime.c elastic/runtime/runtime_nccl.cc \
               elastic/runtime/runtime_barrier.c elastic/runtime/runtime_layout.c \
               elastic/runtime/wait_loop.c elastic/runtime/bootstrap.c \
               elastic/runtime/bootstrap_file.c elastic/runtime/bootstrap_tcp.c \
               elastic/runtime/placement.c elastic/runtime/runtime_view.c \
               elastic/runtime/runtime_membership.c elastic/runtime/runtime_stats.c
LIBEEP_SRCS += elastic/ep/ep.c elastic/ep/ep_state.c elastic/ep/ep_args.c elastic/ep/ep_handle.c \
               elastic/ep/ep_layout.c elastic/ep/ep_sm_model.c elastic/ep/ep_kernels.c \
               elastic/ep/ep_mode.c elastic/ep/ep_solo.c
# Each room's knob table registers itself (util/config.h, EEP_KNOB_TABLE).
LIBEEP_SRCS += elastic/jit/jit_knobs.c elastic/runtime/runtime_knobs.c elastic/ep/ep_knobs.c
# Build-time defaults baked in: the toolkit, the NCCL headers libeep was built with, and this
# checkout as the kernel source root, so tests and tools work from the build tree.
$(BUILD)/elastic/jit/jit_knobs.o: CPPFLAGS += -DEEP_JIT_DEFAULT_NVCC='"$(NVCC)"' \
                                              -DEEP_JIT_DEFAULT_SOURCE_ROOT='"$(CURDIR)"'
$(BUILD)/elastic/jit/jit.o: CPPFLAGS += -DEEP_JIT_CUDA_HOME='"$(CUDA_HOME)"' \
                                        -DEEP_JIT_NCCL_INCLUDE='"$(NCCL_HOME)/include"' \
                                        -DEEP_JIT_DEFAULT_SOURCE_ROOT='"$(CURDIR)"'
$(BUILD)/elastic/gpu/cuda_sym.o: CPPFLAGS += \
    -DEEP_CUDA_SYM_NVRTC_FILE='"$(CUDA_HOME)/lib64/libnvrtc.so.13"'
