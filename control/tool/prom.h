/*
 * prom.h - reading Prometheus text pages (exposition format 0.0.4), for the tools that scrape
 * metrics (eepctl top reads eepd's page and every rank's).
 *
 * A page is parsed once into samples {name, raw label text, value}; lookups then match a name and
 * at most one label.  Pages come from other processes over the network: every line is bounded
 * (a name over 127 bytes, labels over 255, a bad label set or a bad number make the line
 * skipped, never the page), and the parser reads no byte past the text's NUL.
 */
#ifndef EEP_CONTROL_PROM_H
#define EEP_CONTROL_PROM_H

#include <stddef.h>

#include "eep/status.h"

#define EEP_PROM_NAME_MAX   128
#define EEP_PROM_LABELS_MAX 256

typedef struct {
    char   name[EEP_PROM_NAME_MAX];
    char   labels[EEP_PROM_LABELS_MAX]; /* between the braces, as written; "" when none */
    double value;
} eep_prom_sample_t;

typedef struct {
    eep_prom_sample_t *samples;
    size_t             n, cap;
} eep_prom_page_t;

/**
 * Parse one line of a page.
 * @param [in]  line      the line, without its newline.
 * @param [out] sample_p  filled when the line is a sample.
 * @return 1 for a sample, 0 for a comment or a blank line, -1 for a malformed line.
 */
int eep_prom_parse_line(const char *line, eep_prom_sample_t *sample_p);

/**
 * The value of label @p key in @p labels (the raw text of eep_prom_sample_t.labels), unescaped.
 * @return 0 with @p buf filled; -1 when absent, malformed, or longer than @p len - 1.
 */
int eep_prom_label(const char *labels, const char *key, char *buf, size_t len);

/**
 * Parse every sample line of @p text (malformed lines are skipped) into @p page_p.
 * @return EEP_OK, EEP_ERR_INVALID_ARG for NULL arguments, EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_prom_page_parse(const char *text, eep_prom_page_t *page_p);

/** Free the samples of @p page (NULL is a no-op). */
void eep_prom_page_cleanup(eep_prom_page_t *page);

/**
 * The first sample named @p name whose label @p key is @p value (@p key NULL: any labels).
 * @return the sample, or NULL.
 */
const eep_prom_sample_t *eep_prom_find(const eep_prom_page_t *page, const char *name,
                                       const char *key, const char *value);

/**
 * Sum of every sample named @p name whose label @p key is @p value (@p key NULL: all of them).
 * @return the sum (0 when none).
 */
double eep_prom_sum(const eep_prom_page_t *page, const char *name, const char *key,
                    const char *value);

/**
 * The @p q quantile (0..1) of histogram @p name from its cumulative NAME_bucket{le=...} samples,
 * interpolated inside the bucket as Prometheus's histogram_quantile() does (the first bucket from
 * 0; a quantile in the +Inf bucket gives the highest finite bound).
 * @return the quantile, or a negative number when the histogram is absent or empty.
 */
double eep_prom_quantile(const eep_prom_page_t *page, const char *name, double q);

#endif
