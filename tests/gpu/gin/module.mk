# tests/gpu/gin/: the GIN plugin's GPU test (N ranks on one GPU, scripts/one-gpu-cluster.sh).  A C
# program (test_gin_gpu.c) and its kernels (gin_kernels.cu, nvcc against NCCL 2.28.9's device
# headers, sm_90); CUDA's runtime linked statically, NCCL from NCCL_HOME with an rpath.
GIN_GPU_TEST     := $(BUILD)/tests/gpu/gin/test_gin_gpu
GIN_GPU_KERNELS  := $(BUILD)/tests/gpu/gin/gin_kernels.o

$(GIN_GPU_KERNELS): tests/gpu/gin/gin_kernels.cu tests/gpu/gin/gin_kernels.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=sm_90 -std=c++17 -I. -isystem $(NCCL_HOME)/include \
	    -isystem $(CUDA_HOME)/include -Xcompiler -fPIC -c $< -o $@

$(GIN_GPU_TEST): $(BUILD)/tests/gpu/gin/test_gin_gpu.o $(GIN_GPU_KERNELS)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl $(NCCL_LDFLAGS)

.PHONY: gin-gpu-test gpu-gin
gin-gpu-test: check-cuda $(GIN_PLUGIN_SO) $(GIN_GPU_TEST)

# make gpu-gin: the GPU machine's round for the plugin (scripts/gin-round.sh): CPU tests, the GIN
# test at N = 2, 4, 8 with MPS and N = 2 without, the runtime/barrier test at N = 2, 4, 8 (two
# device calls: GIN_ROUND_PARTS="cpu gin", then GIN_ROUND_PARTS=runtime); under
# $OUT (else $(BUILD)/gin-round) only summary.txt and one combined log per run.
gpu-gin: gin-gpu-test $(BUILD)/tests/gpu/test_one_gpu_runtime
	@BUILD=$(BUILD) scripts/gin-round.sh

# make gpu-hybrid: issue 23's round (hybrid dispatch/combine at N = 2, 4, 8 ranks on one GPU, the
# NCCL baseline over the same plugin, a rank killed or stopped mid-call): scripts/gin-round.sh's
# hybrid part, results in $OUT/summary.txt (else $(BUILD)/gin-round/).
.PHONY: gpu-hybrid
gpu-hybrid: gin-gpu-test $(BUILD)/tests/gpu/test_one_gpu_runtime $(BUILD)/bin/eep-bench \
            $(BUILD)/tests/gpu/test_ep $(BUILD)/tests/gpu/test_ep_hybrid
	@BUILD=$(BUILD) GIN_ROUND_PARTS=hybrid scripts/gin-round.sh
