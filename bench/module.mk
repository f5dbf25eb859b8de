# bench/: eep-bench, one driver (eep_bench.c) and one file per benchmark (eep_bench_<name>*.c).
#
#   make bench            every benchmark on this machine's GPUs; rows for bench/RESULTS.md
#   make bench-ep         dispatch/combine against the NCCL baseline (EEP_BENCH_NRANKS GPUs)
#   make bench-membw      per-SM copy rates (HBM, NVLink) behind the SM model
#
# eep-bench links the CPU reference of dispatch/combine (tests/common/ep_reference.c) to check every
# element it measures.
EEP_BENCH      := $(BUILD)/bin/eep-bench
EEP_BENCH_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard bench/eep_bench*.c)) \
                  $(BUILD)/tests/common/ep_reference.o
TOOLS += $(EEP_BENCH)

$(EEP_BENCH): $(EEP_BENCH_OBJS) $(LIBEEP_A)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) $(NCCL_LDFLAGS) -ldl

EEP_BENCH_NRANKS ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)
# a make variable only: the library warns about unknown EEP_* variables in its environment
unexport EEP_BENCH_NRANKS
EEP_BENCH_EP_ARGS ?=
.PHONY: bench-ep
bench: bench-ep
bench-ep: $(EEP_BENCH)
	@test "$(EEP_BENCH_NRANKS)" -ge 1 2>/dev/null || { echo "bench-ep: no GPU (set EEP_BENCH_NRANKS)"; exit 1; }
	@set -e; for args in \
	    "--dtype bf16 --hidden 7168 --topk 8" "--dtype fp8 --hidden 7168 --topk 8" \
	    "--dtype bf16 --hidden 4096 --topk 6" "--dtype bf16 --hidden 2048 --topk 1" \
	    "--dtype bf16 --hidden 7168 --topk 8 --gating hotspot" \
	    "--dtype bf16 --hidden 7168 --topk 8 --gating silent"; do \
	    $(EEP_BENCH) ep --nranks $(EEP_BENCH_NRANKS) --baseline nccl --experts 256 $$args \
	        $(EEP_BENCH_EP_ARGS); \
	done

# The issue-4 table: T 4096 (prefill) and 128 (decode), H 7168, K 8, 256 experts, bf16 and fp8
# dispatch, bf16 combine, each mode of ours beside the NCCL baseline in the same run.  Element
# checks of these shapes run in gpu-check (tests/gpu/test_ep_cases.sh); here --no-check keeps the
# CPU reference (about 20 s per run at T 4096) out of the device time.
EEP_BENCH_EP_MODES_ARGS ?= --no-check --iters 50
.PHONY: bench-ep-modes
bench: bench-ep-modes
bench-ep-modes: $(EEP_BENCH)
	@# one GPU: the one-rank table (a survivor after a shrink; every token local)
	@test "$(EEP_BENCH_NRANKS)" -ge 1 2>/dev/null \
	    || { echo "bench-ep-modes: no GPU (set EEP_BENCH_NRANKS)"; exit 1; }
	@set -e; for t in 4096 128; do for d in bf16 fp8; do for m in cpu-sync no-cpu-sync cached; do \
	    echo "T $$t $$d $$m"; \
	    $(EEP_BENCH) ep --nranks $(EEP_BENCH_NRANKS) --baseline nccl --experts 256 --hidden 7168 \
	        --topk 8 --tokens $$t --dtype $$d --mode $$m $(EEP_BENCH_EP_MODES_ARGS); \
	done; done; done
	@# decode without padding rows (alignment 1): the latency the 25 us goal is about; and at
	@# alignment 128 with padding rows left unwritten (skip_padding_x, inference)
	@set -e; for d in bf16 fp8; do for m in no-cpu-sync cached; do \
	    echo "T 128 $$d $$m align 1"; \
	    $(EEP_BENCH) ep --nranks $(EEP_BENCH_NRANKS) --baseline nccl --experts 256 --hidden 7168 \
	        --topk 8 --tokens 128 --align 1 --dtype $$d --mode $$m $(EEP_BENCH_EP_MODES_ARGS); \
	    echo "T 128 $$d $$m align 128 skip-padding-x"; \
	    $(EEP_BENCH) ep --nranks $(EEP_BENCH_NRANKS) --experts 256 --hidden 7168 --topk 8 \
	        --tokens 128 --skip-padding-x --dtype $$d --mode $$m $(EEP_BENCH_EP_MODES_ARGS); \
	done; done

# Issue 27's table: the same shapes at SM budgets 8, 16, 24, 32 and the whole device (0), both
# output layouts (expert-major, rank-major), each row with its floor (eep-bench prints the HBM rate it measured and the link rate it assumed).
EEP_BENCH_EP_BUDGETS ?= 8,16,24,32,0
.PHONY: bench-ep-budgets
bench: bench-ep-budgets
bench-ep-budgets: $(EEP_BENCH)
	@test "$(EEP_BENCH_NRANKS)" -ge 1 2>/dev/null \
	    || { echo "bench-ep-budgets: no GPU (set EEP_BENCH_NRANKS)"; exit 1; }
	@set -e; for l in expert rank; do for t in 4096 128; do for d in bf16 fp8; do \
	    for m in cpu-sync no-cpu-sync cached; do \
	    echo "T $$t $$d $$m layout $$l budgets $(EEP_BENCH_EP_BUDGETS)"; \
	    $(EEP_BENCH) ep --nranks $(EEP_BENCH_NRANKS) --baseline nccl --experts 256 --hidden 7168 \
	        --topk 8 --tokens $$t --dtype $$d --mode $$m --layout $$l \
	        --num-sms $(EEP_BENCH_EP_BUDGETS) $(EEP_BENCH_EP_MODES_ARGS); \
	done; done; done; done

# eep-bench barrier: barrier latency against NCCL, one process per GPU through tests/gpu/launch.sh.
.PHONY: bench-barrier
bench: bench-barrier
bench-barrier: check-cuda $(EEP_BENCH)
	@mkdir -p $(BUILD)/bench
	tests/gpu/launch.sh $(EEP_BENCH) barrier $(BUILD)/bench/barrier.md

# eep-membw: per-SM copy rates behind the SM model (bench/membw/membw.cu, a standalone nvcc
# program: it is not part of libeep).  `make bench-membw` builds and runs it on this machine.
EEP_MEMBW := $(BUILD)/bin/eep-membw
$(EEP_MEMBW): bench/membw/membw.cu bench/cuda_check.h
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -arch=sm_90 -o $@ $<

.PHONY: bench-membw
bench: bench-membw
bench-membw: check-cuda $(EEP_MEMBW)
	$(EEP_MEMBW) 14336 8192

# eep-copy-sm: whether a same-device copy (cuMemcpyDtoDAsync, the batch API's overlap hint, a
# graph's memcpy node) needs SMs, beside a kernel that fills every SM (bench/copysm/copy_sm.cu,
# a standalone nvcc program).  `make bench-copy-sm` builds and runs it on this machine.
EEP_COPY_SM := $(BUILD)/bin/eep-copy-sm
$(EEP_COPY_SM): bench/copysm/copy_sm.cu bench/cuda_check.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 -arch=sm_90 -o $@ $<

.PHONY: bench-copy-sm
bench: bench-copy-sm
bench-copy-sm: check-cuda $(EEP_COPY_SM)
	$(EEP_COPY_SM)
