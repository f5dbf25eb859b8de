/* gin/gin_int.h - what the plugin's files share: the log, the CUDA driver table (dlopen'ed at
 * init, so the plugin loads and its host-memory paths run where no driver is installed), the
 * socket helpers, and the objects of the GIN side (a communicator of one GIN context, its peers,
 * registrations and requests).  Internal to gin/: nothing here is seen by NCCL but the two tables
 * of nccl_plugin_abi.h. */
#ifndef EEP_GIN_INT_H
#define EEP_GIN_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda.h>

#include "gin/nccl_plugin_abi.h"

/* ---- log (gin_log.c): through the logger NCCL passed to init, else stderr ---- */
void eep_gin_log_set(eep_nccl_logger_t logger);
void eep_gin_log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define EEP_GIN_WARN(...)  eep_gin_log(EEP_NCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define EEP_GIN_INFO(...)  eep_gin_log(EEP_NCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define EEP_GIN_TRACE(...) eep_gin_log(EEP_NCCL_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

/* The properties both tables share (one virtual device 0 on the CPU, NCCL's size limits); each
 * table's getProperties adds its name, guid, pointer support, receives and device type. */
eep_nccl_result_t eep_gin_props_common(int dev, eep_nccl_net_props_t *props);

/* Every wait of the plugin ends after this many ms (EEP_GIN_TIMEOUT_MS, default 60000). */
int64_t eep_gin_timeout_ms(void);
int64_t eep_gin_now_ms(void);
/* EEP_GIN_TRACE set: one info line per signal sent and applied (diagnosis; NCCL_DEBUG=INFO). */
int eep_gin_tracing(void);
/* EEP_GIN_CUDA_CONTEXT: 1 (default, "own") or 0 ("caller"): see eep_gin_cuda_work_context. */
int eep_gin_own_context(void);
/* A trace line stamped with CLOCK_MONOTONIC ms (one clock for every process of the machine). */
#define EEP_GIN_TRACEF(fmt, ...)                                                                   \
    do {                                                                                           \
        if (eep_gin_tracing()) {                                                                   \
            EEP_GIN_INFO("[%lld ms] " fmt, (long long)eep_gin_now_ms(), __VA_ARGS__);              \
        }                                                                                          \
    } while (0)
/* A random 64-bit value drawn once per process: names and identities across processes (forked
 * processes share addresses, so a pointer never identifies anything across processes). */
uint64_t eep_gin_process_nonce(void);

/* ---- the CUDA driver (gin_cuda.c) ---- */
/* X(name): every driver function the plugin calls.  The names go through cuda.h's macros, so
 * cuMemGetAddressRange resolves to cuMemGetAddressRange_v2 and so on, as a linked call would. */
#define EEP_GIN_CUDA_FUNCS(X)                                                                      \
    X(cuInit)                                                                                      \
    X(cuGetErrorString)                                                                            \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetDevice)                                                                              \
    X(cuCtxCreate)                                                                                 \
    X(cuCtxPushCurrent)                                                                            \
    X(cuCtxPopCurrent)                                                                             \
    X(cuThreadExchangeStreamCaptureMode)                                                           \
    X(cuDeviceGet)                                                                                 \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuPointerGetAttribute)                                                                       \
    X(cuMemGetAddressRange)                                                                        \
    X(cuMemRetainAllocationHandle)                                                                 \
    X(cuMemGetAllocationPropertiesFromHandle)                                                      \
    X(cuMemExportToShareableHandle)                                                                \
    X(cuMemImportFromShareableHandle)                                                              \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuMemAddressReserve)                                                                         \
    X(cuMemAddressFree)                                                                            \
    X(cuMemMap)                                                                                    \
    X(cuMemUnmap)                                                                                  \
    X(cuMemSetAccess)                                                                              \
    X(cuMemRelease)                                                                                \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy)                                                                              \
    X(cuEventRecord)                                                                               \
    X(cuEventQuery)                                                                                \
    X(cuMemcpyAsync)                                                                               \
    X(cuMemcpyDtoHAsync)                                                                           \
    X(cuMemcpyHtoDAsync)                                                                           \
    X(cuStreamWriteValue64)

#define EEP_GIN_CUDA_PTR(_name) __typeof__(&_name) _name;
typedef struct {
    int loaded; /* 1: every function resolved and cuInit succeeded */
    EEP_GIN_CUDA_FUNCS(EEP_GIN_CUDA_PTR)
} eep_gin_cuda_t;
#undef EEP_GIN_CUDA_PTR

extern eep_gin_cuda_t eep_gin_cu;
/* Loads libcuda.so.1 once; 0 when the driver is there, -1 (logged once) when not. */
int eep_gin_cuda_load(void);
/* The context of the plugin's own GPU work for a comm whose caller's context is @p caller on
 * device @p dev: the process's own context of that device (made once, kept), or @p caller when
 * EEP_GIN_CUDA_CONTEXT=caller or the own one cannot be made.  NULL without CUDA. */
CUcontext eep_gin_cuda_work_context(CUcontext caller, int dev);
/* One call into the plugin: @p coll_comm's work context pushed (the caller's stays below it), and
 * the thread's stream-capture mode relaxed, so that our stream waits never invalidate a CUDA
 * graph another thread of the process is capturing in global mode (torch.cuda.graph's default;
 * measured: a signal's cuStreamSynchronize during a capture ended it with error 900). */
typedef struct {
    int                 pushed, moded;
    CUstreamCaptureMode mode; /* the thread's own, restored by eep_gin_cuda_leave */
} eep_gin_cuda_scope_t;
void eep_gin_cuda_enter(void *coll_comm, eep_gin_cuda_scope_t *scope);
void eep_gin_cuda_leave(const eep_gin_cuda_scope_t *scope);
/* Logs a failed driver call with its name and message; returns 0 for CUDA_SUCCESS, else -1. */
int eep_gin_cuda_check(CUresult res, const char *call, const char *file, int line);
#define EEP_GIN_CU(_call) eep_gin_cuda_check(eep_gin_cu._call, #_call, __FILE__, __LINE__)

/* Process-wide tables of exported and imported CUDA allocations (gin_share.c). */
typedef struct eep_gin_export eep_gin_export_t;
typedef struct eep_gin_import eep_gin_import_t;
/* The allocation holding [ptr, ptr+size): an identity stable while any registration of it
 * lives, its size, ptr's offset in it, and a fresh POSIX fd (-1 when it cannot be exported, as
 * NCCL's signal buffer); the caller closes the fd. */
int  eep_gin_export_get(void *ptr, size_t size, eep_gin_export_t **exp_p, uint64_t *alloc_id_p,
                        uint64_t *alloc_size_p, uint64_t *offset_p, int *fd_p);
void eep_gin_export_put(eep_gin_export_t *exp);
/* Maps a peer's allocation (nonce, alloc_id) once per process; fd is consumed (closed). */
int eep_gin_import_get(uint64_t nonce, uint64_t alloc_id, uint64_t alloc_size, int fd, int cuda_dev,
                       eep_gin_import_t **imp_p, char **mapped_p);
void eep_gin_import_put(eep_gin_import_t *imp);
/* What the process-wide tables hold now: our exported allocations, peers' mapped ones (and their
   bytes); logged when a comm closes, so a view whose memory stays mapped shows (diagnosis). */
void eep_gin_share_census(int *exports_p, int *imports_p, size_t *import_bytes_p);

/* ---- sockets (gin_sock.c): abstract-namespace Unix stream sockets ---- */
typedef struct {
    uint32_t magic;
    uint32_t len; /* bytes of name used, the leading NUL included */
    char     name[108];
} eep_gin_addr_t;
_Static_assert(sizeof(eep_gin_addr_t) <= EEP_NCCL_NET_HANDLE_MAXSIZE, "a handle holds an address");
#define EEP_GIN_ADDR_MAGIC 0x65657067u /* "eepg" */

/* A listening socket under a new unique name (kind, pid, counter, nonce); non-blocking. */
int eep_gin_sock_listen(const char *kind, eep_gin_addr_t *addr, int *fd_p);
/* Non-blocking connect: 0 connected (*fd_p), 1 try again later (listener's backlog full), -1. */
int eep_gin_sock_connect(const eep_gin_addr_t *addr, int *fd_p);
/* Non-blocking accept: 0 accepted (*fd_p), 1 nothing yet, -1 error. */
int eep_gin_sock_accept(int lfd, int *fd_p);
/* Whole messages with a deadline (ms, eep_gin_now_ms clock); fd passing with SCM_RIGHTS.
 * Return 0, or -1 (logged) on error, peer closed or deadline passed. */
int eep_gin_sock_send_all(int fd, const void *buf, size_t len, int pass_fd, int64_t deadline);
int eep_gin_sock_recv_all(int fd, void *buf, size_t len, int *got_fd_p, int64_t deadline);
/* Non-blocking pieces: bytes moved (>= 0), or -1 when the peer closed or the socket failed. */
ssize_t eep_gin_sock_send_some(int fd, const void *buf, size_t len);
ssize_t eep_gin_sock_recv_some(int fd, void *buf, size_t len);

/* ---- the GIN side ---- */
/* What travels on a (context, peer) signal socket, in order: puts into memory that was not mapped
 * (host memory; CUDA memory that cannot be exported) and signal records. */
enum { EEP_GIN_WIRE_PUT = 1, EEP_GIN_WIRE_SIGNAL = 2 };
typedef struct {
    uint32_t kind;      /* EEP_GIN_WIRE_* */
    uint32_t op;        /* signal: EEP_NCCL_SIGNAL_OP_INC / _ADD */
    uint32_t reg_index; /* the target's registration */
    uint32_t reg_gen;
    uint64_t offset; /* into that registration */
    uint64_t arg;    /* put: payload bytes that follow; signal: the value to add */
} eep_gin_wire_t;
_Static_assert(sizeof(eep_gin_wire_t) == 32, "wire record");

typedef struct eep_gin_comm eep_gin_comm_t;

typedef struct {
    uint32_t          index, gen; /* the peer's registration of the same memory */
    int               type;       /* EEP_NCCL_PTR_HOST / _CUDA at the peer */
    uint64_t          size;
    char             *mapped; /* the peer's memory mapped here, or NULL: through the socket */
    eep_gin_import_t *imp;
} eep_gin_reg_peer_t;

/* One registration; the pointer is both the mhandle and the ginHandle NCCL gets. */
typedef struct eep_gin_reg {
    uint32_t            magic;
    eep_gin_comm_t     *comm;
    char               *base;
    size_t              size;
    int                 type;
    uint32_t            index, gen;
    eep_gin_export_t   *exp;
    eep_gin_reg_peer_t *peer; /* [nranks] */
} eep_gin_reg_t;
#define EEP_GIN_REG_MAGIC 0x72656721u

enum { EEP_GIN_REQ_FREE = 0, EEP_GIN_REQ_ISSUED, EEP_GIN_REQ_DONE, EEP_GIN_REQ_FAILED };

/* A put, put + signal, or bare signal to one peer.  Requests of a (context, peer) complete in
 * issue order: a signal leaves only after every earlier put to that peer has landed. */
typedef struct eep_gin_req {
    int             state;
    uint32_t        peer;
    eep_gin_comm_t *comm;
    int             copy_pending; /* a CUDA copy recorded on event */
    CUevent         event;
    /* socket part: [put header, payload] then [signal record] */
    int            has_put_wire, has_signal;
    eep_gin_wire_t put_hdr, sig_hdr;
    const char    *payload;
    char          *stage; /* owned copy of the payload (CUDA source, inline value) */
    size_t         sent;
    uint64_t       inline_val;
    /* self: applied here instead of sent */
    char *self_dst;
    int   self_dst_host;
} eep_gin_req_t;

/* Receive state of one peer's incoming signal socket. */
typedef struct {
    eep_gin_wire_t hdr;
    size_t         hdr_got;
    char          *dst;   /* where the payload goes, NULL: dropped */
    char          *stage; /* payload staged for an H2D copy */
    int            dst_cuda;
    size_t         got;
} eep_gin_rx_t;

typedef struct {
    int            ctl_fd, sig_fd; /* -1 for self */
    int            dead;
    eep_gin_req_t *ring; /* [EEP_GIN_RING] */
    uint64_t       head, prog, tail;
    CUstream       stream; /* copies to this peer, in order */
    eep_gin_rx_t   rx;
} eep_gin_peer_t;

#define EEP_GIN_MAX_RECVS 8
#define EEP_GIN_RING      (2 * EEP_NCCL_NET_MAX_REQUESTS * EEP_GIN_MAX_RECVS)

struct eep_gin_comm {
    uint32_t        magic;
    int             nranks, rank;
    eep_gin_peer_t *peers;
    pthread_mutex_t lock; /* the registration table and all progress */
    eep_gin_reg_t **regs;
    uint32_t        nregs, next_gen;
    int             broken_peer; /* first dead peer, -1 while all live */
    CUcontext       cuctx;       /* the caller's (NCCL's device), found at connect */
    int             cudev;
    CUcontext       workctx;      /* where our streams, events and copies live (gin_cuda.c) */
    CUstream        apply_stream; /* this process's writes of its own memory (signals, staged) */
    int             stray_inline_seen; /* NCCL 2.28.9's inline-offset bug met (logged once) */
};
#define EEP_GIN_COMM_MAGIC 0x67636f6du

/* gin_mesh.c */
eep_nccl_result_t eep_gin_listen(void *ctx, int dev, void *handle, void **listen_comm);
eep_nccl_result_t eep_gin_close_listen(void *listen_comm);
eep_nccl_result_t eep_gin_connect(void *ctx, void *handles[], int nranks, int rank,
                                  void *listen_comm, void **coll_comm);
eep_nccl_result_t eep_gin_close_coll(void *coll_comm);
/* Marks a peer dead (its socket closed) and logs it once: its requests complete as dropped. */
void eep_gin_peer_lost(eep_gin_comm_t *comm, int peer, const char *why);
/* Exported (the one symbol beyond the two tables): (comm, peer) losses seen by this process. */
uint64_t eep_gin_peers_lost(void);
/* Makes the comm's work context current in the calling thread (already so inside an entry point,
 * which pushes it); 0, or -1 without CUDA. */
int eep_gin_comm_bind_cuda(eep_gin_comm_t *comm);

/* gin_reg.c */
eep_nccl_result_t eep_gin_reg_mr_sym(void *coll_comm, void *data, size_t size, int type,
                                     uint64_t mr_flags, void **mhandle, void **gin_handle);
eep_nccl_result_t eep_gin_dereg_mr_sym(void *coll_comm, void *mhandle);
/* The live registration (index, gen) of comm, or NULL; comm->lock held. */
eep_gin_reg_t *eep_gin_reg_find(eep_gin_comm_t *comm, uint32_t index, uint32_t gen);
void           eep_gin_reg_free(eep_gin_reg_t *reg);

/* gin_put.c */
eep_nccl_result_t eep_gin_iput(void *coll_comm, uint64_t src_off, void *src_mhandle, size_t size,
                               uint64_t dst_off, void *dst_mhandle, uint32_t rank, void **request);
eep_nccl_result_t eep_gin_iput_signal(void *coll_comm, uint64_t src_off, void *src_mhandle,
                                      size_t size, uint64_t dst_off, void *dst_mhandle,
                                      uint32_t rank, uint64_t signal_off, void *signal_mhandle,
                                      uint64_t signal_value, uint32_t signal_op, void **request);
eep_nccl_result_t eep_gin_test(void *coll_comm, void *request, int *done);
eep_nccl_result_t eep_gin_progress(void *coll_comm);
/* Frees the requests' CUDA events and staging of one peer (close). */
void eep_gin_peer_drop_requests(eep_gin_comm_t *comm, eep_gin_peer_t *peer);

#endif
