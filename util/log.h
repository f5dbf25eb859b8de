/*
 * log.h - leveled, per-subsystem logging with the identity on every line.
 *
 * Every line starts "host:pid:tid [rank] LEVEL subsys:" so that the logs of eight ranks and a
 * controller can be merged and still read.  The level and subsystem test runs before any
 * formatting, errno is preserved across a call, and EEP_LOG_LEVEL_TRACE is compiled out of
 * release builds (NDEBUG).  Configuration comes from the core knob table (EEP_LOG_LEVEL,
 * EEP_LOG_SUBSYS, EEP_LOG_FILE); nothing here reads the environment.
 */
#ifndef EEP_LOG_H
#define EEP_LOG_H

#include <stdarg.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EEP_LOG_LEVEL_NONE = 0,
    EEP_LOG_LEVEL_ERROR,
    EEP_LOG_LEVEL_WARN,
    EEP_LOG_LEVEL_INFO,
    EEP_LOG_LEVEL_DEBUG,
    EEP_LOG_LEVEL_TRACE,
} eep_log_level_t;

/* Subsystems; EEP_LOG_SUBSYS takes their names, comma separated, or "all". */
typedef enum {
    EEP_SUBSYS_CORE = 0,
    EEP_SUBSYS_CONFIG,
    EEP_SUBSYS_JIT,
    EEP_SUBSYS_RUNTIME,
    EEP_SUBSYS_BARRIER,
    EEP_SUBSYS_KERNEL,
    EEP_SUBSYS_BOOTSTRAP,
    EEP_SUBSYS_ETCD,
    EEP_SUBSYS_AGENT,
    EEP_SUBSYS_EEPD,
    EEP_SUBSYS_RPC,
    EEP_SUBSYS_TOOL,
    EEP_SUBSYS_TEST,
    EEP_SUBSYS_COUNT
} eep_log_subsys_t;

/* A hook sees every line that passes the filters (tests assert on expected errors with it). */
typedef void (*eep_log_hook_func_t)(eep_log_level_t level, eep_log_subsys_t subsys,
                                    const char *message, void *arg);

/** @return non-zero when a message at @p level for @p subsys would be written. */
int eep_log_enabled(eep_log_level_t level, eep_log_subsys_t subsys);

/** Format and write one line; use the eep_error()... macros rather than this. */
void eep_log_write(eep_log_level_t level, eep_log_subsys_t subsys, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/** Set the rank shown on every line (-1: unknown, shown as "-"). */
void eep_log_set_rank(int rank);

/** Install (or, with NULL, remove) the hook; the previous one is replaced. */
void eep_log_set_hook(eep_log_hook_func_t hook, void *arg);

/** Override the level read from EEP_LOG_LEVEL (tests, tools with -v). */
void eep_log_set_level(eep_log_level_t level);

/** @return the level name ("warn"), or NULL; and parse one ("warn" -> EEP_LOG_LEVEL_WARN). */
const char *eep_log_level_name(eep_log_level_t level);
int         eep_log_level_parse(const char *name, eep_log_level_t *level_p);

/** @return the subsystem's name ("jit"). */
const char *eep_log_subsys_name(eep_log_subsys_t subsys);

#define eep_log(_level, _subsys, ...)                                                              \
    do {                                                                                           \
        if ((_level) == EEP_LOG_LEVEL_ERROR || eep_log_enabled((_level), (_subsys))) {             \
            eep_log_write((_level), (_subsys), __FILE__, __LINE__, __VA_ARGS__);                   \
        }                                                                                          \
    } while (0)

#define eep_error(_subsys, ...) eep_log(EEP_LOG_LEVEL_ERROR, _subsys, __VA_ARGS__)
#define eep_warn(_subsys, ...)  eep_log(EEP_LOG_LEVEL_WARN, _subsys, __VA_ARGS__)
#define eep_info(_subsys, ...)  eep_log(EEP_LOG_LEVEL_INFO, _subsys, __VA_ARGS__)
#define eep_debug(_subsys, ...) eep_log(EEP_LOG_LEVEL_DEBUG, _subsys, __VA_ARGS__)
#ifdef NDEBUG
#define eep_trace(_subsys, ...)                                                                    \
    do {                                                                                           \
    } while (0)
#else
#define eep_trace(_subsys, ...) eep_log(EEP_LOG_LEVEL_TRACE, _subsys, __VA_ARGS__)
#endif

/* Once per call site, for progress loops. */
#define eep_warn_once(_subsys, ...)                                                                \
    do {                                                                                           \
        static int _eep_once;                                                                      \
        if (!__atomic_exchange_n(&_eep_once, 1, __ATOMIC_RELAXED)) {                               \
            eep_warn(_subsys, __VA_ARGS__);                                                        \
        }                                                                                          \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* EEP_LOG_H */
