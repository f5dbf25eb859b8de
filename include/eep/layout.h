/*
 * eep/layout.h - memory layouts shared by the host (C11) and the device (nvcc and NVRTC).
 *
 * Every struct here is read on one side and written on the other, so its size and offsets are
 * pinned by static asserts that run in both builds.  NVRTC has no libc headers, so this header
 * includes none: it uses int, unsigned int and unsigned long long, whose widths (32, 32, 64) are
 * the same on x86-64/aarch64 Linux hosts and on the GPU, and asserts them.
 */
#ifndef EEP_LAYOUT_H
#define EEP_LAYOUT_H

#if defined(__cplusplus)
#define EEP_LAYOUT_ASSERT(_cond, _msg) static_assert(_cond, _msg)
#else
#define EEP_LAYOUT_ASSERT(_cond, _msg) _Static_assert(_cond, _msg)
#endif
/* Offsets: NVRTC has no __builtin_offsetof (and no <stddef.h>), so there only sizes are checked;
   the host build and the nvcc device build check offsets too. */
#if defined(__CUDACC_RTC__)
#define EEP_LAYOUT_OFFSET(_type, _field, _off) EEP_LAYOUT_ASSERT(1, "")
#else
#define EEP_LAYOUT_OFFSET(_type, _field, _off)                                                     \
    EEP_LAYOUT_ASSERT(__builtin_offsetof(_type, _field) == (_off), #_type "." #_field " offset")
#endif

#define EEP_LAYOUT_VERSION 1

/* ------------------------------------------------------------------------------------------ */
/* Fault page: pinned host memory mapped into the device.  Kernels raise the abort flag and     */
/* append fault records; the host reads them with eep_poll().                                  */

#define EEP_FAULT_MAGIC       0x45455046u /* "EEPF" */
#define EEP_FAULT_MAX_RECORDS 16

/* Where a device wait gave up (eep_fault_record_t.phase). */
#define EEP_PHASE_NONE        0
#define EEP_PHASE_BARRIER_LSA 1 /* scale-up (NVLink, LSA stores) barrier */
#define EEP_PHASE_BARRIER_GIN 2 /* scale-out (GIN signals, rail team) barrier */
#define EEP_PHASE_EP_DISPATCH 3 /* dispatch: waiting for a peer's counts or data */
#define EEP_PHASE_EP_COMBINE  4 /* combine: waiting for a peer's partials */
#define EEP_PHASE_EP_BAD_EXPERT                                                                    \
    5 /* dispatch: bad expert id; peer -1, expected = token,
                                       observed = the id (as unsigned 64-bit) */

/*
 * Wait accounting: a runtime's u64 [2][EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS] in device memory
 * (EEP_WAIT_STAT_WORDS): the first half the ns waited on each peer (world rank) by phase, where a
 * bounded wait that had to spin adds the part of its %globaltimer interval not already counted
 * by an overlapping wait; the second half the latest end of a counted wait, the watermark that
 * makes that so (kernels/common/wait.cuh).  The host reads the first half between calls
 * (eep_runtime_stats).
 */
#define EEP_WAIT_STAT_BARRIER         0 /* barrier arrivals (LSA and GIN) */
#define EEP_WAIT_STAT_DISPATCH_COUNTS 1 /* dispatch: a peer's count slot */
#define EEP_WAIT_STAT_DISPATCH_DATA   2 /* dispatch: a peer's records (tags, lines, signals) */
#define EEP_WAIT_STAT_COMBINE         3 /* combine: a peer's partials or handshake */
#define EEP_WAIT_STAT_PHASES          4
#define EEP_WAIT_STAT_WORDS           (2 * EEP_WAIT_STAT_PHASES * EEP_MAX_RANKS)

/* Why the abort flag is up (eep_fault_page_t.abort_flag; 0 is "not raised"). */
#define EEP_ABORT_NONE    0u
#define EEP_ABORT_TIMEOUT 1u /* a device wait expired; see the records */
#define EEP_ABORT_HOST    2u /* the host asked every kernel to leave (eep_runtime_abort) */
#define EEP_ABORT_FAULT   3u /* a kernel found bad input (see the records): EEP_ERR_DEVICE_FAULT */

typedef struct eep_fault_record {
    unsigned int       valid;     /* written last (1) once the other fields are visible */
    int                phase;     /* EEP_PHASE_* */
    int                rank;      /* world rank that recorded it */
    int                peer;      /* world rank suspected of not arriving, -1 unknown */
    unsigned long long expected;  /* value waited for */
    unsigned long long observed;  /* value seen when the deadline passed */
    unsigned long long time_ns;   /* %globaltimer when it gave up */
    unsigned long long waited_ns; /* how long it had waited */
} eep_fault_record_t;

typedef struct eep_fault_page {
    volatile unsigned int abort_flag; /* EEP_ABORT_*; device and host raise it, host clears it */
    unsigned int          magic;      /* EEP_FAULT_MAGIC */
    unsigned int          version;    /* EEP_LAYOUT_VERSION */
    unsigned int          nrecords;   /* records claimed (atomically); may exceed the array */
    unsigned int          pad[12];
    eep_fault_record_t    records[EEP_FAULT_MAX_RECORDS];
} eep_fault_page_t;

EEP_LAYOUT_ASSERT(sizeof(int) == 4 && sizeof(unsigned long long) == 8, "type widths");
EEP_LAYOUT_ASSERT(sizeof(eep_fault_record_t) == 48, "eep_fault_record_t layout");
EEP_LAYOUT_OFFSET(eep_fault_record_t, expected, 16);
EEP_LAYOUT_OFFSET(eep_fault_record_t, waited_ns, 40);
EEP_LAYOUT_OFFSET(eep_fault_page_t, records, 64);
EEP_LAYOUT_ASSERT(sizeof(eep_fault_page_t) == 64 + 48 * EEP_FAULT_MAX_RECORDS, "fault page size");

/* ------------------------------------------------------------------------------------------ */
/* Workspace: the first bytes of the symmetric window.  Offsets are computed by the host       */
/* (eep_workspace_layout) and handed to kernels; these are the fixed limits and alignments.    */

#define EEP_MAX_LSA_RANKS 128 /* NVLink domain size the scale-up barrier supports */
#define EEP_MAX_RANKS     1024
#define EEP_WS_ALIGN      128  /* every region starts on its own cache line */
#define EEP_WS_DATA_ALIGN 4096 /* the data area after the workspace */
#define EEP_WS_COUNTERS   64   /* u64 counters reserved for kernels (monotonic) */

/*
 * The devcomm is NCCL's ncclDevComm (200 bytes, 8-byte aligned in 2.28.9), carried by the C side
 * as an opaque blob; barrier/ and kernels/ reinterpret it and assert the size in the device build.
 */
#define EEP_DEVCOMM_BYTES 200
typedef struct eep_devcomm_blob {
    unsigned long long words[EEP_DEVCOMM_BYTES / 8];
} eep_devcomm_blob_t;
EEP_LAYOUT_ASSERT(sizeof(eep_devcomm_blob_t) == EEP_DEVCOMM_BYTES, "devcomm blob");

#endif /* EEP_LAYOUT_H */
