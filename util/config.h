/*
 * config.h - knobs: one table per module, the only place the environment is read.
 *
 * A module declares a plain struct for its settings and a const table of rows {name, default,
 * doc, type, offset, flags}.  eep_config_load() fills the struct with, for each knob, the value of
 * the environment variable, else the value in the file named by EEP_CONFIG_FILE, else the
 * default.  A module's table registers itself when its object is loaded (EEP_KNOB_TABLE), so
 * this lowest layer names no module; `eep-info --config` prints every table linked into it.  The
 * unknown-variable warning of eep_config_check_env() checks against the names of every knob in
 * the tree, linked or not (a list generated at build time from the *_knobs.c files), so a
 * variable meant for another process of the job is never reported.
 */
#ifndef EEP_CONFIG_H
#define EEP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EEP_KNOB_STRING_MAX 1024

typedef enum {
    EEP_KNOB_BOOL,   /* int: 0/1; accepts 1/0, y/n, yes/no, true/false, on/off */
    EEP_KNOB_INT,    /* int64_t, range-checked against min/max */
    EEP_KNOB_SIZE,   /* uint64_t bytes; accepts K, M, G suffixes (powers of 1024) */
    EEP_KNOB_DOUBLE, /* double */
    EEP_KNOB_STRING, /* char[EEP_KNOB_STRING_MAX] */
} eep_knob_type_t;

enum {
    EEP_KNOB_STARTUP = 0,      /* read once when the owning object is created */
    EEP_KNOB_RUNTIME = 1 << 0, /* may be changed later through eep_config_set() */
};

typedef struct {
    const char     *name;          /* full variable name, "EEP_TIMEOUT_MS" */
    const char     *default_value; /* as a string, parsed like a user value */
    const char     *doc;
    eep_knob_type_t type;
    size_t          offset; /* of the field in the module's struct */
    unsigned        flags;
    int64_t         min, max; /* EEP_KNOB_INT only; min == max means unbounded */
} eep_knob_t;

typedef struct {
    const char       *module;
    const eep_knob_t *knobs;
    size_t            count;
    size_t            struct_size;
} eep_knob_table_t;

/*
 * One row of a module's table: the knob @p _name fills @p _field of the module's settings struct
 * @p _struct.  @p _flags is EEP_KNOB_STARTUP or EEP_KNOB_RUNTIME; @p _min/@p _max bound an
 * EEP_KNOB_INT (equal: unbounded).
 */
#define EEP_KNOB_ROW(_struct, _name, _def, _type, _field, _flags, _min, _max, _doc)                \
    {                                                                                              \
        _name, _def, _doc, _type, offsetof(_struct, _field), _flags, _min, _max                    \
    }

/*
 * The table trailer: defines the table @p _table of module @p _module over the rows @p _rows
 * (settings struct @p _struct) and registers it when the object is loaded (a constructor), so a
 * table is known to every program that links its module.
 */
#define EEP_KNOB_TABLE(_table, _module, _rows, _struct)                                            \
    const eep_knob_table_t _table = {                                                              \
        .module      = _module,                                                                    \
        .knobs       = _rows,                                                                      \
        .count       = sizeof(_rows) / sizeof((_rows)[0]),                                         \
        .struct_size = sizeof(_struct),                                                            \
    };                                                                                             \
    __attribute__((constructor)) static void _table##_register(void)                               \
    {                                                                                              \
        eep_config_register(&_table);                                                              \
    }

/**
 * Register @p table (EEP_KNOB_TABLE calls it; a table registered twice is kept once).  A knob
 * name that an already registered table declares too is logged as an error and the later table
 * is refused: every name has one owner.
 * @return EEP_OK, EEP_ERR_EXISTS for a name declared twice, EEP_ERR_NO_RESOURCE when full.
 */
eep_status_t eep_config_register(const eep_knob_table_t *table);

/**
 * Fill @p cfg_p (a struct of @p table->struct_size bytes) from env, config file and defaults.
 * @return EEP_OK, or EEP_ERR_INVALID_ARG with an error naming the knob and the bad value.
 */
eep_status_t eep_config_load(const eep_knob_table_t *table, void *cfg_p);

/**
 * Change one knob of an already loaded struct.  Startup knobs are refused (EEP_ERR_BUSY) unless
 * @p at_startup is set; unknown names give EEP_ERR_NOT_FOUND; bad values EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_config_set(const eep_knob_table_t *table, void *cfg, const char *name,
                            const char *value, int at_startup);

/** Format the value of @p knob held in @p cfg into @p buf. */
void eep_config_format(const eep_knob_t *knob, const void *cfg, char *buf, size_t len);

/** @return every registered table (in registration order), and their number in @p count_p. */
const eep_knob_table_t *const *eep_config_tables(size_t *count_p);

/** Print every knob of every table: name, value, default, doc. */
eep_status_t eep_config_print(FILE *out);

/**
 * Warn once about each EEP_* environment variable that matches no knob.
 * @return the number of unknown variables.
 */
int eep_config_check_env(void);

/** @return whether @p name (@p name_len bytes) is a knob of the tree (the generated list). */
int eep_config_known_name(const char *name, size_t name_len);

/** eep_config_check_env() once per process: library entry points (runtime, agent) call it. */
void eep_config_check_env_once(void);

/**
 * Read a variable that is not ours but shapes our defaults (HOME, XDG_CACHE_HOME, PATH):
 * kept here so that no other file reads the environment.  @return NULL when unset.
 */
const char *eep_config_system_env(const char *name);

/**
 * Give a variable that is not ours (one another library reads, e.g. NCCL's) @p value when the
 * environment does not set it; call before that library reads it, never while other threads may
 * read the environment.  @return 1 if it was set here, 0 if the environment had it, -1 on error.
 */
int eep_config_system_env_default(const char *name, const char *value);

#ifdef __cplusplus
}
#endif

#endif /* EEP_CONFIG_H */
