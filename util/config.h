/*
 * config.h - knobs: one table per module, the only place the environment is read.
 *
 * A module declares a plain struct for its settings and a const table of rows {name, default,
 * doc, type, offset, flags}.  eep_config_load() fills the struct with, for each knob, the value of
 * the environment variable, else the value in the file named by EEP_CONFIG_FILE, else the
 * default.  Every table is listed once in config_registry.c so that `eep-info --config` prints all
 * of them and eep_config_check_env() can warn about EEP_* variables that match no knob.
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

/** @return every registered table, and their number in @p count_p. */
const eep_knob_table_t *const *eep_config_tables(size_t *count_p);

/** Print every knob of every table: name, value, default, doc. */
eep_status_t eep_config_print(FILE *out);

/**
 * Warn once about each EEP_* environment variable that matches no knob.
 * @return the number of unknown variables.
 */
int eep_config_check_env(void);

/** eep_config_check_env() once per process: library entry points (runtime, agent) call it. */
void eep_config_check_env_once(void);

/**
 * Read a variable that is not ours but shapes our defaults (HOME, XDG_CACHE_HOME, PATH):
 * kept here so that no other file reads the environment.  @return NULL when unset.
 */
const char *eep_config_system_env(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* EEP_CONFIG_H */
