/*
 * prom.c - a bounded reader of Prometheus text pages (control/tool/prom.h).
 *
 * One pass per line, no allocation but the page's sample array: a line is a name, an optional
 * {label="value",...} set (quotes and \\ \" \n escapes honoured, copied raw), a value (strtod:
 * NaN, +Inf and -Inf included) and an optional integer timestamp; anything else makes the line
 * malformed and it is skipped.
 */
#include "control/tool/prom.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int eep_prom_name_start(char c)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':';
}

static int eep_prom_name_char(char c)
{
    return eep_prom_name_start(c) || isdigit((unsigned char)c);
}

/*
 * Walk one label set starting after '{' and ending at @p close ('}' in a line, NUL in a sample's
 * copied labels).  With @p key set, copy that label's unescaped value into @p buf.  @return a
 * pointer to @p close, or NULL when malformed (or when the wanted value does not fit: *found_p
 * then stays 0).
 */
static const char *eep_prom_walk_labels(const char *p, char close, const char *key, char *buf,
                                        size_t len, int *found_p)
{
    for (;;) {
        const char *k = p;
        size_t      klen, o = 0;
        int         want;

        while (*p == ' ') {
            p++;
        }
        if (*p == close) {
            return p;
        }
        k = p;
        if (!(isalpha((unsigned char)*p) || *p == '_')) {
            return NULL;
        }
        while (isalnum((unsigned char)*p) || *p == '_') {
            p++;
        }
        klen = (size_t)(p - k);
        want = key != NULL && strlen(key) == klen && memcmp(k, key, klen) == 0;
        if (*p++ != '=' || *p++ != '"') {
            return NULL;
        }
        for (; *p != '"'; p++) {
            char c = *p;

            if (c == '\0' || c == '\n') {
                return NULL;
            }
            if (c == '\\') {
                c = *++p;
                if (c == 'n') {
                    c = '\n';
                } else if (c != '\\' && c != '"') {
                    return NULL;
                }
            }
            if (want) {
                if (o + 1 >= len) {
                    return NULL;
                }
                buf[o++] = c;
            }
        }
        if (want) {
            buf[o]   = '\0';
            *found_p = 1;
        }
        p++;
        while (*p == ' ') {
            p++;
        }
        if (*p == ',') {
            p++;
        } else if (*p != close) {
            return NULL;
        }
    }
}

int eep_prom_parse_line(const char *line, eep_prom_sample_t *sample_p)
{
    const char *p = line, *name, *end;
    char       *num_end;
    size_t      n;
    double      v;
    int         found = 0;

    while (*p == ' ' || *p == '\t') {
        p++;
    }
    if (*p == '\0' || *p == '#' || *p == '\r') {
        return 0;
    }
    name = p;
    if (!eep_prom_name_start(*p)) {
        return -1;
    }
    while (eep_prom_name_char(*p)) {
        p++;
    }
    n = (size_t)(p - name);
    if (n >= sizeof(sample_p->name)) {
        return -1;
    }
    memcpy(sample_p->name, name, n);
    sample_p->name[n]   = '\0';
    sample_p->labels[0] = '\0';
    if (*p == '{') {
        end = eep_prom_walk_labels(p + 1, '}', NULL, NULL, 0, &found);
        if (end == NULL || (size_t)(end - p - 1) >= sizeof(sample_p->labels)) {
            return -1;
        }
        memcpy(sample_p->labels, p + 1, (size_t)(end - p - 1));
        sample_p->labels[end - p - 1] = '\0';
        p                             = end + 1;
    }
    if (*p != ' ' && *p != '\t') {
        return -1;
    }
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    v = strtod(p, &num_end);
    if (num_end == p) {
        return -1;
    }
    p = num_end;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    if (*p == '-') {
        p++;
    }
    while (isdigit((unsigned char)*p)) { /* the optional timestamp (ms) */
        p++;
    }
    while (*p == ' ' || *p == '\t' || *p == '\r') {
        p++;
    }
    if (*p != '\0') {
        return -1;
    }
    sample_p->value = v;
    return 1;
}

int eep_prom_label(const char *labels, const char *key, char *buf, size_t len)
{
    int found = 0;

    if (labels == NULL || key == NULL || buf == NULL || len == 0) {
        return -1;
    }
    if (eep_prom_walk_labels(labels, '\0', key, buf, len, &found) == NULL || !found) {
        return -1;
    }
    return 0;
}

eep_status_t eep_prom_page_parse(const char *text, eep_prom_page_t *page_p)
{
    const char *p = text;

    if (text == NULL || page_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    memset(page_p, 0, sizeof(*page_p));
    while (*p != '\0') {
        const char       *nl = strchr(p, '\n');
        size_t            n  = nl != NULL ? (size_t)(nl - p) : strlen(p);
        char              line[EEP_PROM_NAME_MAX + EEP_PROM_LABELS_MAX + 128];
        eep_prom_sample_t s;

        if (n < sizeof(line)) { /* a longer line cannot be a sample we keep */
            memcpy(line, p, n);
            line[n] = '\0';
            if (eep_prom_parse_line(line, &s) == 1) {
                if (page_p->n == page_p->cap) {
                    size_t             cap = page_p->cap ? page_p->cap * 2 : 64;
                    eep_prom_sample_t *ns  = realloc(page_p->samples, cap * sizeof(*ns));

                    if (ns == NULL) {
                        eep_prom_page_cleanup(page_p);
                        return EEP_ERR_NO_MEMORY;
                    }
                    page_p->samples = ns;
                    page_p->cap     = cap;
                }
                page_p->samples[page_p->n++] = s;
            }
        }
        p += n + (nl != NULL);
    }
    return EEP_OK;
}

void eep_prom_page_cleanup(eep_prom_page_t *page)
{
    if (page == NULL) {
        return;
    }
    free(page->samples);
    memset(page, 0, sizeof(*page));
}

static int eep_prom_match(const eep_prom_sample_t *s, const char *name, const char *key,
                          const char *value)
{
    char buf[EEP_PROM_LABELS_MAX];

    if (strcmp(s->name, name) != 0) {
        return 0;
    }
    return key == NULL ||
           (eep_prom_label(s->labels, key, buf, sizeof(buf)) == 0 && strcmp(buf, value) == 0);
}

const eep_prom_sample_t *eep_prom_find(const eep_prom_page_t *page, const char *name,
                                       const char *key, const char *value)
{
    size_t i;

    for (i = 0; page != NULL && name != NULL && i < page->n; i++) {
        if (eep_prom_match(&page->samples[i], name, key, value)) {
            return &page->samples[i];
        }
    }
    return NULL;
}

double eep_prom_sum(const eep_prom_page_t *page, const char *name, const char *key,
                    const char *value)
{
    double sum = 0;
    size_t i;

    for (i = 0; page != NULL && name != NULL && i < page->n; i++) {
        if (eep_prom_match(&page->samples[i], name, key, value) &&
            isfinite(page->samples[i].value)) {
            sum += page->samples[i].value;
        }
    }
    return sum;
}

typedef struct {
    double le, count;
} eep_prom_bucket_t;

static int eep_prom_bucket_cmp(const void *a, const void *b)
{
    double x = ((const eep_prom_bucket_t *)a)->le, y = ((const eep_prom_bucket_t *)b)->le;

    return x < y ? -1 : x > y;
}

double eep_prom_quantile(const eep_prom_page_t *page, const char *name, double q)
{
    char               bname[EEP_PROM_NAME_MAX + 8], le[64];
    eep_prom_bucket_t *b;
    size_t             i, n = 0;
    double             total, rank, lo = 0, below = 0, result = -1;

    if (page == NULL || name == NULL || q < 0 || q > 1 ||
        (size_t)snprintf(bname, sizeof(bname), "%s_bucket", name) >= sizeof(bname)) {
        return -1;
    }
    b = malloc((page->n + 1) * sizeof(*b));
    if (b == NULL) {
        return -1;
    }
    for (i = 0; i < page->n; i++) {
        char *end;

        if (strcmp(page->samples[i].name, bname) != 0 ||
            eep_prom_label(page->samples[i].labels, "le", le, sizeof(le)) != 0) {
            continue;
        }
        b[n].le = strtod(le, &end);
        if (end == le || *end != '\0' || isnan(b[n].le) || isnan(page->samples[i].value)) {
            continue;
        }
        b[n++].count = page->samples[i].value;
    }
    qsort(b, n, sizeof(*b), eep_prom_bucket_cmp);
    total = n > 0 ? b[n - 1].count : 0;
    if (n == 0 || !isinf(b[n - 1].le) || !(total > 0)) {
        free(b);
        return -1;
    }
    rank = q * total;
    for (i = 0; i < n; i++) {
        if (b[i].count >= rank && b[i].count > below) {
            if (isinf(b[i].le)) {
                result = i > 0 ? b[i - 1].le : 0; /* the highest finite bound */
            } else {
                result = lo + (b[i].le - lo) * (rank - below) / (b[i].count - below);
            }
            break;
        }
        lo    = b[i].le;
        below = b[i].count;
    }
    free(b);
    return result;
}
