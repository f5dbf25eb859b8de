/*
 * tool.h - what every control-plane tool shares (eepctl, eep-agent): one JSON string emitter and
 * strict parsing of numeric flags.
 *
 * The emitter writes RFC 8259 strings whatever the bytes: quotes, backslashes and control bytes
 * are escaped, valid UTF-8 passes through, and a byte that starts no valid UTF-8 sequence becomes
 * U+FFFD, so a line is always valid JSON (ids and reasons come from etcd, which anyone may write).
 * A numeric flag is a whole decimal number within its bounds, or the tool exits 2 naming it.
 */
#ifndef EEP_CONTROL_TOOL_H
#define EEP_CONTROL_TOOL_H

#include <stdint.h>
#include <stdio.h>

#include "eep/status.h"

/**
 * Write @p s as one JSON string (with its quotes) to @p out.
 * @param [in] out  stream.
 * @param [in] s    NUL-terminated bytes; NULL is written as "".
 */
void eep_tool_json_str(FILE *out, const char *s);

/**
 * Parse @p text as a signed decimal in [@p min, @p max]: optional sign, digits, nothing else.
 * @param [in]  prog    the tool's name, for the message ("eepctl").
 * @param [in]  flag    the flag's name, for the message ("--ttl").
 * @param [in]  text    the argument.
 * @param [out] value_p written only on success.
 * @return EEP_OK, or EEP_ERR_INVALID_ARG after one line on stderr naming @p flag and the bounds.
 */
eep_status_t eep_tool_parse_i64(const char *prog, const char *flag, const char *text, int64_t min,
                                int64_t max, int64_t *value_p);

#endif
