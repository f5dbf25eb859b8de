# ElasticEP top-level Makefile: one non-recursive build; each folder lists its sources in module.mk.
#
#   make            libeep (shared + static), libeep_agent, eepd, eepctl, eep-info
#   make test       installs what is missing, builds and runs every test that needs no GPU
#   make asan|ubsan the same tests under AddressSanitizer / UndefinedBehaviorSanitizer
#   make gpu-check  GPU tests, one process per visible GPU (GPU machine)
#   make bench      benchmarks against NCCL, written to bench/RESULTS.md (GPU machine)
#   make run        local etcd + 3 eepd + checked MoE ranks (one per GPU, 4 on one GPU) with a
#                   live status line; FAULTS=1|FILE injects faults (control plane alone w/o GPU)
#
# Knobs (override on the command line): CUDA_HOME, NCCL_HOME, DEBUG, SANITIZER, WERROR, BUILD.

CUDA_HOME ?= /usr/local/cuda
# NCCL: an explicit NCCL_HOME wins; else the Python environment's NCCL wheel if it has headers
# (the GPU machine, see shared/DEVICE.md); else the CUDA toolkit's folder.
NCCL_WHEEL := $(shell python3 -c 'import nvidia.nccl as m, os; p=list(m.__path__)[0]; print(p if os.path.exists(p+"/include/nccl.h") else "")' 2>/dev/null)
NCCL_HOME ?= $(if $(NCCL_WHEEL),$(NCCL_WHEEL),$(CUDA_HOME))
DEBUG     ?= 0
SANITIZER ?=
WERROR    ?= 0
BUILD     ?= build$(if $(SANITIZER),-$(SANITIZER))

CC    ?= gcc
CXX   ?= g++
NVCC  ?= $(CUDA_HOME)/bin/nvcc

NCCL_LIBDIR := $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so.2 $(NCCL_HOME)/lib/libnccl.so.2))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(NCCL_LIBDIR)))

CPPFLAGS += -I. -Iinclude -I$(BUILD)/gen
CUDA_CPPFLAGS := -isystem $(NCCL_HOME)/include -isystem $(CUDA_HOME)/include
WARN     := -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror)
OPT      := $(if $(filter 1,$(DEBUG)),-O0 -g3,-O2 -g -DNDEBUG)
SAN      := $(if $(SANITIZER),-fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all)
CFLAGS   += -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) -Wstrict-prototypes $(OPT) $(SAN) -MMD -MP
CXXFLAGS += -std=c++17 -D_GNU_SOURCE -fPIC -pthread $(WARN) $(OPT) $(SAN) -MMD -MP
LDFLAGS  += -pthread $(SAN)
comma := ,
NCCL_LDFLAGS := $(if $(NCCL_LIBDIR),-L$(NCCL_LIBDIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) -l:libnccl.so.2

# Filled by the module.mk files.
UTIL_SRCS  :=
LIBEEP_SRCS :=
AGENT_SRCS :=
TOOLS      :=
UNIT_TESTS :=
CLEAN_EXTRA :=

# The version (include/eep/version.h): shared libraries are lib*.so.$(EEP_VERSION) with the soname
# lib*.so.$(EEP_SOVERSION).
EEP_VERSION   := $(shell sed -n 's/^\#define EEP_VERSION_STRING *"\(.*\)"/\1/p' include/eep/version.h)
EEP_SOVERSION := $(firstword $(subst ., ,$(EEP_VERSION)))

# Output names, defined before the module.mk files use them in rules.
# The data-plane library: CUDA (through dlopen), NCCL and libc only.  $(LIBEEP_SO) is a link to
# the real file, libeep.so.$(EEP_VERSION), through libeep.so.$(EEP_SOVERSION).
LIBEEP_SO := $(BUILD)/lib/libeep.so
LIBEEP_A  := $(BUILD)/lib/libeep.a
# The base every binary links: status, log, knobs, hashing.  No CUDA, no NCCL.
LIBUTIL_A := $(BUILD)/lib/libeep_util.a

.PHONY: all test asan ubsan gpu-check bench run clean deps-build deps-test deps-run check-cuda format format-check
all:

# Keep intermediate objects (test objects are otherwise deleted after linking).
.SECONDARY:

include util/module.mk
include elastic/module.mk
include barrier/module.mk
include kernels/module.mk
include control/module.mk
include proto/module.mk
include tools/module.mk
include tests/module.mk
include tests/deploy/module.mk
include tests/install/module.mk
include bench/module.mk
include gin/module.mk
include tests/gin/module.mk

obj = $(patsubst %.c,$(BUILD)/%.o,$(patsubst %.cc,$(BUILD)/%.o,$(1)))

UTIL_OBJS   := $(call obj,$(UTIL_SRCS)) $(UTIL_GEN_OBJS)
LIBEEP_OBJS := $(call obj,$(LIBEEP_SRCS))


all: check-cuda $(LIBEEP_SO) $(LIBEEP_A) $(TOOLS)

check-cuda:
	@test -x $(NVCC) || { echo "error: no CUDA toolkit at CUDA_HOME=$(CUDA_HOME) (nvcc missing); install CUDA 13 or set CUDA_HOME." >&2; exit 1; }
	@test -f $(NCCL_HOME)/include/nccl.h || { echo "error: no NCCL headers under NCCL_HOME=$(NCCL_HOME)/include; install NCCL 2.28.9 or set NCCL_HOME." >&2; exit 1; }

# Archives are made anew (rm first), so an object whose source moved away leaves with it.
$(LIBUTIL_A): $(UTIL_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(LIBEEP_SO): $(LIBEEP_OBJS) $(UTIL_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) -shared -Wl,-soname,libeep.so.$(EEP_SOVERSION) -o $@.$(EEP_VERSION) $^ $(LDFLAGS) \
	    $(NCCL_LDFLAGS) -ldl
	ln -sfn libeep.so.$(EEP_VERSION) $@.$(EEP_SOVERSION)
	ln -sfn libeep.so.$(EEP_SOVERSION) $@

$(LIBEEP_A): $(LIBEEP_OBJS) $(UTIL_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

# A flag change forces a rebuild: every object depends on a stamp holding the flags.
FLAGS_STAMP := $(BUILD)/flags.stamp
FLAGS_NOW   := $(CC) $(CXX) $(CPPFLAGS) $(CUDA_CPPFLAGS) $(CFLAGS) $(CXXFLAGS) $(LDFLAGS)
$(shell mkdir -p $(BUILD); echo '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP))

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CUDA_CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CUDA_CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# Dependencies: apt-get only what is missing, quietly; one clear sentence when it cannot.
deps-build:
	@scripts/deps.sh build
deps-test:
	@scripts/deps.sh test
deps-run:
	@scripts/deps.sh run

# The build of make test runs a job per core unless make was given -j itself (its jobserver then).
NPROC ?= $(shell nproc 2>/dev/null || echo 2)
test: deps-test
	@$(MAKE) --no-print-directory $(if $(findstring -j,$(MAKEFLAGS)),,-j$(NPROC)) all unit-tests
	@BUILD=$(BUILD) SANITIZER=$(SANITIZER) tests/run.sh $(UNIT_TEST_BINS) $(SCRIPT_TESTS)

asan:
	@$(MAKE) --no-print-directory SANITIZER=address test
ubsan:
	@$(MAKE) --no-print-directory SANITIZER=undefined test

# The one format (.clang-format, clang-format 14): make format rewrites the tree, format-check
# (also a test of make test: tests/repo/test_format.sh) names the files that differ.
format:
	@git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format-14 -i --style=file
format-check:
	@tests/repo/test_format.sh

clean:
	rm -rf build build-address build-undefined build-thread $(CLEAN_EXTRA)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# make run: local etcd + 3 eepd replicas + eep-rank --steps moe, one per visible GPU (4 on one
# GPU, through the GIN test plugin), RUN_SECONDS long (default 180) with a live status line, then
# a summary and a timeline PNG; FAULTS=1 (a schedule seeded by SEED) or FAULTS=path/schedule.json
# (docs/fault-schedule.md) injects faults.  Without a GPU: the control plane alone.
# EEP_RUN_ARGS passes more launcher flags, e.g. make run EEP_RUN_ARGS="--agents 3".
RUN_SECONDS ?= 180
FAULTS ?=
SEED ?= 1
run: deps-run
	@$(MAKE) --no-print-directory all
	@BUILD=$(abspath $(BUILD)) deploy/launch.sh --seconds $(RUN_SECONDS) --seed $(SEED) \
	    $(if $(FAULTS),--faults $(FAULTS)) $(EEP_RUN_ARGS)

# make install PREFIX=/usr/local, make uninstall: deploy/install.mk.
include deploy/install.mk

# make gpu-elastic: the elastic GPU check on the one-GPU cluster (scripts/gpu-elastic.sh: 4 ranks,
# SIGKILL/SIGSTOP of a rank mid-kernel over rounds, newcomers; detection, interruption and grow
# times; GPU memory and fds flat).  Output in build/gpu-elastic/ (or $OUT).  Flags through
# EEP_GPU_ELASTIC_ARGS, e.g. make gpu-elastic EEP_GPU_ELASTIC_ARGS="--rounds 5 --steps moe".
.PHONY: gpu-elastic
gpu-elastic:
	@scripts/gpu-elastic.sh $(EEP_GPU_ELASTIC_ARGS)

