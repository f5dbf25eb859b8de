/*
 * tool.c - the JSON string emitter and the numeric flag parser of the control tools (tool.h).
 *
 * One emitter for every tool: before it, eep-agent printed ids and reasons raw, so a quote or a
 * newline in a view written to etcd by anyone made its output invalid JSON.
 */
#include "control/tool/tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

/* Length of the valid UTF-8 sequence at @p s (1-4), or 0 if none starts there. */
static int eep_tool_utf8_len(const unsigned char *s)
{
    int      n, i;
    uint32_t cp;

    if (s[0] < 0x80) {
        return 1;
    } else if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2, cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3, cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4, cp = s[0] & 0x07;
    } else {
        return 0;
    }
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0; /* also stops at the NUL */
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF are not UTF-8. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }
    return n;
}

void eep_tool_json_str(FILE *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s != NULL ? s : "");

    fputc('"', out);
    while (*p != '\0') {
        int n;

        if (*p == '"' || *p == '\\') {
            fputc('\\', out);
            fputc(*p++, out);
        } else if (*p == '\n') {
            fputs("\\n", out), p++;
        } else if (*p == '\t') {
            fputs("\\t", out), p++;
        } else if (*p == '\r') {
            fputs("\\r", out), p++;
        } else if (*p < 0x20) {
            fprintf(out, "\\u%04x", *p++);
        } else if ((n = eep_tool_utf8_len(p)) > 0) {
            fwrite(p, 1, (size_t)n, out);
            p += n;
        } else {
            fputs("\\ufffd", out), p++;
        }
    }
    fputc('"', out);
}

eep_status_t eep_tool_parse_i64(const char *prog, const char *flag, const char *text, int64_t min,
                                int64_t max, int64_t *value_p)
{
    const char *p = text;
    char       *end;
    long long   v;

    if (p != NULL && (*p == '+' || *p == '-')) {
        p++;
    }
    if (p == NULL || !isdigit((unsigned char)*p)) {
        goto bad;
    }
    errno = 0;
    v     = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) {
        goto bad;
    }
    *value_p = (int64_t)v;
    return EEP_OK;

bad:
    fprintf(stderr, "%s: %s needs a whole number in [%lld, %lld], not '%s'\n", prog, flag,
            (long long)min, (long long)max, text != NULL ? text : "");
    return EEP_ERR_INVALID_ARG;
}
