/*
 * config.c - knob parsing, the config file, and the unknown-variable check.
 *
 * This is the only file that reads the environment.  Values are parsed by type into the module's
 * struct at the knob's offset; a bad value is an error naming the knob, never a silent default.
 */
#include "util/config.h"

#include <ctype.h>
#include <pthread.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

extern char **environ;

const char *eep_config_system_env(const char *name)
{
    return getenv(name);
}

int eep_config_system_env_default(const char *name, const char *value)
{
    if (getenv(name) != NULL) {
        return 0;
    }
    return setenv(name, value, 0) == 0 ? 1 : -1;
}

static int eep_config_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = { "1", "y", "yes", "true", "on" };
    static const char *const no[]  = { "0", "n", "no", "false", "off" };
    size_t                   i;

    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int eep_config_parse_int(const char *s, int64_t *out)
{
    char     *end;
    long long v;

    errno = 0;
    v     = strtoll(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

static int eep_config_parse_size(const char *s, uint64_t *out)
{
    char              *end;
    unsigned long long v;
    unsigned           shift = 0;

    if (*s == '-') {
        return -1;
    }
    errno = 0;
    v     = strtoull(s, &end, 0);
    if (errno != 0 || end == s) {
        return -1;
    }
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        return -1;
    }
    if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end != '\0' || (shift != 0 && v > (UINT64_MAX >> shift))) {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* Parse @p value into the field of @p knob; returns EEP_ERR_INVALID_ARG with a message. */
static eep_status_t eep_config_parse(const eep_knob_t *knob, const char *value, const char *origin,
                                     void *cfg)
{
    char   *field = (char *)cfg + knob->offset;
    int64_t i64;
    char   *end;
    double  d;

    switch (knob->type) {
    case EEP_KNOB_BOOL:
        if (eep_config_parse_bool(value, (int *)field) == 0) {
            return EEP_OK;
        }
        eep_error(EEP_SUBSYS_CONFIG,
                  "%s '%s' (from %s) is not a boolean (1/0, yes/no, true/false, "
                  "on/off)",
                  knob->name, value, origin);
        return EEP_ERR_INVALID_ARG;
    case EEP_KNOB_INT:
        if (eep_config_parse_int(value, &i64) != 0) {
            eep_error(EEP_SUBSYS_CONFIG, "%s '%s' (from %s) is not an integer", knob->name, value,
                      origin);
            return EEP_ERR_INVALID_ARG;
        }
        if (knob->min != knob->max && (i64 < knob->min || i64 > knob->max)) {
            eep_error(EEP_SUBSYS_CONFIG,
                      "%s %" PRId64 " (from %s) is outside [%" PRId64 ", %" PRId64 "]", knob->name,
                      i64, origin, knob->min, knob->max);
            return EEP_ERR_INVALID_ARG;
        }
        *(int64_t *)field = i64;
        return EEP_OK;
    case EEP_KNOB_SIZE:
        if (eep_config_parse_size(value, (uint64_t *)field) == 0) {
            return EEP_OK;
        }
        eep_error(EEP_SUBSYS_CONFIG,
                  "%s '%s' (from %s) is not a size (bytes, with an optional K, "
                  "M or G suffix)",
                  knob->name, value, origin);
        return EEP_ERR_INVALID_ARG;
    case EEP_KNOB_DOUBLE:
        errno = 0;
        d     = strtod(value, &end);
        if (errno == 0 && end != value && *end == '\0') {
            *(double *)field = d;
            return EEP_OK;
        }
        eep_error(EEP_SUBSYS_CONFIG, "%s '%s' (from %s) is not a number", knob->name, value,
                  origin);
        return EEP_ERR_INVALID_ARG;
    case EEP_KNOB_STRING:
        if (strlen(value) >= EEP_KNOB_STRING_MAX) {
            eep_error(EEP_SUBSYS_CONFIG, "%s (from %s) is longer than %d characters", knob->name,
                      origin, EEP_KNOB_STRING_MAX - 1);
            return EEP_ERR_INVALID_ARG;
        }
        memcpy(field, value, strlen(value) + 1);
        return EEP_OK;
    }
    return EEP_ERR_INTERNAL;
}

/*
 * The config file: lines "NAME=value", '#' comments and blank lines ignored, later lines win (as
 * in a shell).  It is read once per eep_config_load() (objects are created rarely, so no cache
 * that would need invalidating) into a buffer of its lines.
 */
typedef struct {
    char  *text; /* the whole file, each line NUL-terminated in place */
    size_t len;
} eep_config_file_t;

static void eep_config_file_read(const char *path, eep_config_file_t *file)
{
    FILE  *f;
    long   size;
    size_t i;

    file->text = NULL;
    file->len  = 0;
    if (path == NULL || path[0] == '\0') {
        return;
    }
    f = fopen(path, "r");
    if (f == NULL) {
        eep_warn_once(EEP_SUBSYS_CONFIG, "cannot read EEP_CONFIG_FILE %s: %m", path);
        return;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        file->text = malloc((size_t)size + 1);
        if (file->text != NULL) {
            file->len             = fread(file->text, 1, (size_t)size, f);
            file->text[file->len] = '\0';
            for (i = 0; i < file->len; i++) {
                if (file->text[i] == '\n' || file->text[i] == '\r') {
                    file->text[i] = '\0';
                }
            }
        }
    }
    fclose(f);
}

/* @return the value of the last "NAME=" line for @p name, or NULL. */
static const char *eep_config_file_lookup(const eep_config_file_t *file, const char *name)
{
    size_t      name_len = strlen(name);
    const char *found    = NULL;
    size_t      i        = 0;

    while (i < file->len) {
        const char *line = file->text + i;
        size_t      n    = strlen(line);

        while (isspace((unsigned char)*line)) {
            line++;
        }
        if (strncmp(line, name, name_len) == 0 && line[name_len] == '=') {
            found = line + name_len + 1;
        }
        i += n + 1;
    }
    return found;
}

static eep_status_t eep_config_load_knob(const eep_knob_t *knob, const eep_config_file_t *file,
                                         const char *file_name, void *cfg)
{
    const char *env = getenv(knob->name);
    const char *value;

    if (env != NULL) {
        return eep_config_parse(knob, env, "environment", cfg);
    }
    value = eep_config_file_lookup(file, knob->name);
    if (value != NULL) {
        return eep_config_parse(knob, value, file_name, cfg);
    }
    return eep_config_parse(knob, knob->default_value, "default", cfg);
}

eep_status_t eep_config_load(const eep_knob_table_t *table, void *cfg_p)
{
    const char       *file_name = getenv("EEP_CONFIG_FILE");
    eep_config_file_t file;
    eep_status_t      status = EEP_OK;
    size_t            i;

    if (table == NULL || cfg_p == NULL) {
        eep_error(EEP_SUBSYS_CONFIG, "eep_config_load: %s is NULL",
                  table == NULL ? "table" : "cfg_p");
        return EEP_ERR_INVALID_ARG;
    }
    memset(cfg_p, 0, table->struct_size);
    eep_config_file_read(file_name, &file);
    for (i = 0; i < table->count && status == EEP_OK; i++) {
        status = eep_config_load_knob(&table->knobs[i], &file, file_name, cfg_p);
    }
    free(file.text);
    return status;
}

eep_status_t eep_config_set(const eep_knob_table_t *table, void *cfg, const char *name,
                            const char *value, int at_startup)
{
    size_t i;

    if (table == NULL || cfg == NULL || name == NULL || value == NULL) {
        eep_error(EEP_SUBSYS_CONFIG, "eep_config_set: NULL argument");
        return EEP_ERR_INVALID_ARG;
    }
    for (i = 0; i < table->count; i++) {
        const eep_knob_t *knob = &table->knobs[i];

        if (strcmp(knob->name, name) != 0) {
            continue;
        }
        if (!at_startup && !(knob->flags & EEP_KNOB_RUNTIME)) {
            eep_error(EEP_SUBSYS_CONFIG, "%s can only be set at startup", name);
            return EEP_ERR_BUSY;
        }
        return eep_config_parse(knob, value, "eep_config_set", cfg);
    }
    eep_error(EEP_SUBSYS_CONFIG, "module %s has no knob %s", table->module, name);
    return EEP_ERR_NOT_FOUND;
}

void eep_config_format(const eep_knob_t *knob, const void *cfg, char *buf, size_t len)
{
    const char *field = (const char *)cfg + knob->offset;

    switch (knob->type) {
    case EEP_KNOB_BOOL:
        snprintf(buf, len, "%s", *(const int *)field ? "yes" : "no");
        break;
    case EEP_KNOB_INT:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)field);
        break;
    case EEP_KNOB_SIZE:
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
        break;
    case EEP_KNOB_DOUBLE:
        snprintf(buf, len, "%g", *(const double *)field);
        break;
    case EEP_KNOB_STRING:
        snprintf(buf, len, "%s", field);
        break;
    }
}

/*
 * The registered tables.  Constructors register them before main() (or at dlopen of a library
 * holding some), so the list only grows; readers take the lock too, as a late dlopen may add one
 * while a thread prints.
 */
#define EEP_CONFIG_TABLES_MAX 32

static pthread_mutex_t         eep_config_tables_lock = PTHREAD_MUTEX_INITIALIZER;
static const eep_knob_table_t *eep_config_table_list[EEP_CONFIG_TABLES_MAX];
static size_t                  eep_config_table_count;

/* Every knob name of the tree, from the *_knobs.c files (generated: util/gen_knob_names.sh). */
extern const char *const eep_config_knob_names[];

static const eep_knob_t *eep_config_table_find(const eep_knob_table_t *table, const char *name,
                                               size_t name_len)
{
    size_t i;

    for (i = 0; i < table->count; i++) {
        const char *knob = table->knobs[i].name;

        if (strlen(knob) == name_len && strncmp(knob, name, name_len) == 0) {
            return &table->knobs[i];
        }
    }
    return NULL;
}

eep_status_t eep_config_register(const eep_knob_table_t *table)
{
    eep_status_t status = EEP_OK;
    size_t       t, i;

    pthread_mutex_lock(&eep_config_tables_lock);
    for (t = 0; t < eep_config_table_count; t++) {
        if (eep_config_table_list[t] == table) {
            goto out_unlock;
        }
    }
    for (t = 0; t < eep_config_table_count; t++) {
        for (i = 0; i < table->count; i++) {
            const char *name = table->knobs[i].name;

            if (eep_config_table_find(eep_config_table_list[t], name, strlen(name)) != NULL) {
                eep_error(EEP_SUBSYS_CONFIG, "knob %s of module %s is declared by module %s too",
                          name, table->module, eep_config_table_list[t]->module);
                status = EEP_ERR_EXISTS;
                goto out_unlock;
            }
        }
    }
    if (eep_config_table_count == EEP_CONFIG_TABLES_MAX) {
        eep_error(EEP_SUBSYS_CONFIG, "knob table of module %s: more than %d tables", table->module,
                  EEP_CONFIG_TABLES_MAX);
        status = EEP_ERR_NO_RESOURCE;
        goto out_unlock;
    }
    eep_config_table_list[eep_config_table_count++] = table;
out_unlock:
    pthread_mutex_unlock(&eep_config_tables_lock);
    return status;
}

const eep_knob_table_t *const *eep_config_tables(size_t *count_p)
{
    pthread_mutex_lock(&eep_config_tables_lock);
    *count_p = eep_config_table_count;
    pthread_mutex_unlock(&eep_config_tables_lock);
    return eep_config_table_list;
}

int eep_config_known_name(const char *name, size_t name_len)
{
    size_t i;

    for (i = 0; eep_config_knob_names[i] != NULL; i++) {
        if (strlen(eep_config_knob_names[i]) == name_len &&
            strncmp(eep_config_knob_names[i], name, name_len) == 0) {
            return 1;
        }
    }
    return 0;
}

eep_status_t eep_config_print(FILE *out)
{
    const eep_knob_table_t *const *tables;
    char                           value[EEP_KNOB_STRING_MAX];
    size_t                         count, t, i;
    void                          *cfg;
    eep_status_t                   status;

    tables = eep_config_tables(&count);
    for (t = 0; t < count; t++) {
        cfg = calloc(1, tables[t]->struct_size);
        if (cfg == NULL) {
            return EEP_ERR_NO_MEMORY;
        }
        status = eep_config_load(tables[t], cfg);
        fprintf(out, "# module %s%s\n", tables[t]->module,
                status == EEP_OK ? "" : " (a value failed to parse: showing what loaded)");
        for (i = 0; i < tables[t]->count; i++) {
            const eep_knob_t *knob = &tables[t]->knobs[i];

            eep_config_format(knob, cfg, value, sizeof(value));
            fprintf(out, "#   %s\n#   default: '%s'%s\n%s=%s\n\n", knob->doc, knob->default_value,
                    (knob->flags & EEP_KNOB_RUNTIME) ? ", can change at run time" : "", knob->name,
                    value);
        }
        free(cfg);
    }
    return EEP_OK;
}

int eep_config_check_env(void)
{
    char **env;
    int    unknown = 0;

    for (env = environ; env != NULL && *env != NULL; env++) {
        const char *eq = strchr(*env, '=');

        if (strncmp(*env, "EEP_", 4) != 0 || eq == NULL) {
            continue;
        }
        if (!eep_config_known_name(*env, (size_t)(eq - *env))) {
            eep_warn(EEP_SUBSYS_CONFIG,
                     "unknown environment variable %.*s (no such knob; see "
                     "eep-info --config)",
                     (int)(eq - *env), *env);
            unknown++;
        }
    }
    return unknown;
}

static void eep_config_check_env_cb(void)
{
    eep_config_check_env();
}

void eep_config_check_env_once(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, eep_config_check_env_cb);
}
