# gin/: our NCCL network + GIN plugin (a test transport for N ranks on one GPU; README.md).
# One shared library NCCL dlopens (NCCL_NET_PLUGIN=<abs path>): libc, pthreads and libcuda.so.1
# through dlopen only; CUDA's headers for the driver's types, no NCCL header, no libeep.  Every
# symbol but ncclNetPlugin_v11 and ncclGinPlugin_v11 is hidden.
GIN_PLUGIN_SRCS := gin/gin_log.c gin/gin_cuda.c gin/gin_share.c gin/gin_sock.c gin/gin_net.c \
                   gin/gin_mesh.c gin/gin_reg.c gin/gin_put.c gin/gin_plugin.c
GIN_PLUGIN_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(GIN_PLUGIN_SRCS))
GIN_PLUGIN_SO   := $(BUILD)/lib/libnccl-net-eep-gin.so

$(GIN_PLUGIN_OBJS): CFLAGS += -fvisibility=hidden

$(GIN_PLUGIN_SO): $(GIN_PLUGIN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ $(LDFLAGS) -ldl -Wl,--no-undefined

all: $(GIN_PLUGIN_SO)
.PHONY: gin-plugin
gin-plugin: $(GIN_PLUGIN_SO)
