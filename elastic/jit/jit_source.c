/*
 * jit_source.c - the instantiation unit generated from a spec, and its cache key.
 *
 * The key is a SHA-256 over labelled fields: key format, backend, compiler identity (never by
 * running the compiler), CUDA toolkit path and CUDA_VERSION, NCCL_VERSION_CODE, arch, every
 * compiler option, the in-memory headers, the generated unit, and every header the unit reaches.
 * Headers are found by our own scan of #include lines (both forms, recursively, against the same
 * search order the compiler uses; conditional includes are followed too, which can only add
 * inputs).  Design choice: headers that resolve inside the CUDA toolkit's include directory are
 * not read; they are covered by the toolkit path, CUDA_VERSION and the compiler identity (they
 * change only with the toolkit, and libcu++ alone is hundreds of files).  NCCL's headers are
 * always read, even when NCCL lives inside the toolkit folder (names starting "nccl").  Includes
 * that resolve nowhere on our path are system headers (libc under nvcc) and enter by name only.
 * Paths under the kernel source root enter relative to it, so a copy of the tree keys the same.
 */
#include "elastic/jit/jit_int.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define EEP_JIT_SCAN_MAX_DEPTH 64

const eep_jit_backend_ops_t *eep_jit_backend_ops(eep_jit_backend_t backend)
{
    switch (backend) {
    case EEP_JIT_BACKEND_NVRTC:
        return &eep_jit_nvrtc_ops;
    case EEP_JIT_BACKEND_NVCC:
        return &eep_jit_nvcc_ops;
    default:
        return NULL;
    }
}

/* ---- spec checks --------------------------------------------------------------------------- */

static int eep_jit_chars_ok(const char *s, const char *extra)
{
    for (; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || strchr(extra, *s) != NULL)) {
            return 0;
        }
    }
    return 1;
}

const char *eep_jit_spec_defines(const eep_jit_spec_t *spec)
{
    return spec->size >= offsetof(eep_jit_spec_t, defines) + sizeof(spec->defines) ? spec->defines
                                                                                   : NULL;
}

static eep_status_t eep_jit_spec_check(const eep_jit_t *jit, const eep_jit_spec_t *spec)
{
    char        path[PATH_MAX];
    struct stat st;

    if (spec->size < offsetof(eep_jit_spec_t, extra_flags) + sizeof(spec->extra_flags)) {
        eep_error(EEP_SUBSYS_JIT,
                  "spec size %zu is too small for an eep_jit_spec_t (set it to "
                  "sizeof(eep_jit_spec_t), %zu)",
                  spec->size, sizeof(eep_jit_spec_t));
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->header == NULL || spec->header[0] == '\0' || spec->header[0] == '/' ||
        strstr(spec->header, "..") != NULL || !eep_jit_chars_ok(spec->header, "/.-+")) {
        eep_error(EEP_SUBSYS_JIT,
                  "spec header '%s' must be a plain path relative to the kernel "
                  "source root",
                  spec->header != NULL ? spec->header : "(null)");
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->function == NULL || spec->function[0] == '\0' ||
        !eep_jit_chars_ok(spec->function, ":")) {
        eep_error(EEP_SUBSYS_JIT, "spec function '%s' is not a C++ (qualified) name",
                  spec->function != NULL ? spec->function : "(null)");
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->param_type == NULL || spec->param_type[0] == '\0' ||
        !eep_jit_chars_ok(spec->param_type, ":<>, ")) {
        eep_error(EEP_SUBSYS_JIT, "spec param_type '%s' is not a C++ type name",
                  spec->param_type != NULL ? spec->param_type : "(null)");
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->template_args != NULL && strpbrk(spec->template_args, ";{}#\"\\\n") != NULL) {
        eep_error(EEP_SUBSYS_JIT,
                  "spec template_args '%s' may not contain ; { } # \" \\ or a "
                  "newline",
                  spec->template_args);
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->extra_flags != NULL && strpbrk(spec->extra_flags, "\"'\\\n") != NULL) {
        eep_error(EEP_SUBSYS_JIT,
                  "spec extra_flags '%s' may not contain quotes, backslashes or "
                  "newlines",
                  spec->extra_flags);
        return EEP_ERR_INVALID_ARG;
    }
    if (spec->launch_bounds < 0 || spec->launch_bounds > 1024) {
        eep_error(EEP_SUBSYS_JIT, "spec launch_bounds %d is outside [0, 1024]",
                  spec->launch_bounds);
        return EEP_ERR_INVALID_ARG;
    }
    if ((int)spec->backend < EEP_JIT_BACKEND_AUTO || spec->backend > EEP_JIT_BACKEND_NVCC) {
        eep_error(EEP_SUBSYS_JIT, "spec backend %d is not an eep_jit_backend_t",
                  (int)spec->backend);
        return EEP_ERR_INVALID_ARG;
    }
    if (eep_jit_pathf(path, sizeof(path), "%s/%s", jit->source_root, spec->header) != 0 ||
        stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        eep_error(EEP_SUBSYS_JIT,
                  "spec header %s not found under the kernel source root %s (set "
                  "EEP_JIT_SOURCE_ROOT)",
                  spec->header, jit->source_root);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

static eep_status_t eep_jit_pick_backend(const eep_jit_t *jit, const eep_jit_spec_t *spec,
                                         eep_jit_backend_t *backend_p)
{
    if (spec->backend == EEP_JIT_BACKEND_NVRTC && spec->needs_gin) {
        eep_error(EEP_SUBSYS_JIT,
                  "%s needs GIN, which NVRTC cannot compile with NCCL %d's headers "
                  "(packed layouts are rejected); use the nvcc or auto backend",
                  spec->header, NCCL_VERSION_CODE);
        return EEP_ERR_UNSUPPORTED;
    }
    if (spec->backend != EEP_JIT_BACKEND_AUTO) {
        *backend_p = spec->backend;
    } else if (spec->needs_gin) {
        *backend_p = EEP_JIT_BACKEND_NVCC; /* whatever EEP_JIT_BACKEND says */
    } else {
        *backend_p = jit->backend != EEP_JIT_BACKEND_AUTO ? jit->backend : EEP_JIT_BACKEND_NVRTC;
    }
    return EEP_OK;
}

/* ---- unit ---------------------------------------------------------------------------------- */

static eep_status_t eep_jit_unit_options(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                         const eep_jit_backend_ops_t *ops, eep_jit_unit_t *unit)
{
    const char        *extra = spec->extra_flags != NULL ? spec->extra_flags : "";
    size_t             cap = 4 * PATH_MAX + strlen(extra) + 256, used = 0;
    const char *const *f;
    char              *buf, *tok, *save;
    int                i;

    for (f = ops->flags; f != NULL && *f != NULL; f++) {
        cap += strlen(*f) + 1;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    unit->option_buf = buf;
    unit->n_options  = 0;

#define EEP_JIT_ADD_OPTION(...)                                                                    \
    do {                                                                                           \
        unit->options[unit->n_options++] = buf + used;                                             \
        used += (size_t)snprintf(buf + used, cap - used, __VA_ARGS__) + 1;                         \
    } while (0)

    EEP_JIT_ADD_OPTION("-arch=%s", jit->arch);
    EEP_JIT_ADD_OPTION("-std=c++17");
    for (i = 0; i < unit->n_include_dirs; i++) {
        EEP_JIT_ADD_OPTION("-I%s", unit->include_dirs[i]);
    }
    for (f = ops->flags; f != NULL && *f != NULL; f++) {
        EEP_JIT_ADD_OPTION("%s", *f);
    }
    /* Extra flags last, so they can override; split on blanks into the same buffer. */
    tok = buf + used;
    snprintf(tok, cap - used, "%s", extra);
    used += strlen(extra) + 1;
    for (tok = strtok_r(tok, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) {
        if (unit->n_options >= EEP_JIT_MAX_OPTIONS) {
            eep_error(EEP_SUBSYS_JIT, "spec extra_flags has too many flags (at most %d in all)",
                      EEP_JIT_MAX_OPTIONS);
            return EEP_ERR_INVALID_ARG;
        }
        unit->options[unit->n_options++] = tok;
    }
#undef EEP_JIT_ADD_OPTION
    return EEP_OK;
}

/*
 * "#define NAME VALUE" lines for the spec's @p defines (NULL: none) into *lines_p (malloc),
 * checking each blank-separated token: NAME a C identifier, VALUE (after '=', optional) of
 * letters, digits and _ . + -.
 * @return EEP_OK; EEP_ERR_INVALID_ARG (logged) for a malformed token; EEP_ERR_NO_MEMORY.
 */
static eep_status_t eep_jit_define_lines(const char *defines, char **lines_p)
{
    /* a token of n characters becomes "#define " + n + "\n"; at most (len + 1) / 2 tokens */
    size_t len = defines != NULL ? strlen(defines) : 0, cap = len + 9 * ((len + 1) / 2) + 1;
    size_t used  = 0;
    char  *lines = malloc(cap), *copy = malloc(len + 1), *tok, *save = NULL;

    if (lines == NULL || copy == NULL) {
        free(lines);
        free(copy);
        return EEP_ERR_NO_MEMORY;
    }
    lines[0] = '\0';
    memcpy(copy, defines != NULL ? defines : "", len + 1);
    for (tok = strtok_r(copy, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');

        if (eq != NULL) {
            *eq = '\0';
        }
        if (tok[0] == '\0' || (tok[0] >= '0' && tok[0] <= '9') || !eep_jit_chars_ok(tok, "") ||
            (eq != NULL && (eq[1] == '\0' || !eep_jit_chars_ok(eq + 1, ".+-")))) {
            eep_error(EEP_SUBSYS_JIT,
                      "spec defines '%s' must be blank-separated NAME or "
                      "NAME=VALUE (NAME a C identifier, VALUE of letters, digits, _ . + -)",
                      defines);
            free(lines);
            free(copy);
            return EEP_ERR_INVALID_ARG;
        }
        used += (size_t)snprintf(lines + used, cap - used, "#define %s%s%s\n", tok,
                                 eq != NULL ? " " : "", eq != NULL ? eq + 1 : "");
    }
    free(copy);
    *lines_p = lines;
    return EEP_OK;
}

/* The entry's parameter is __grid_constant__ (sm_70+): the body takes it by reference, and a
   reference that reaches a non-inlined function (a fault report) otherwise makes every thread
   copy the whole struct to its stack at entry (368 bytes for the EP kernels: on one H200 the
   dispatch's blocks then began 1.4-4.4 us after the previous kernel ended, instead of at once). */
#define EEP_JIT_GRID_CONST_DEF                                                                     \
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700\n"                                         \
    "#define EEP_JIT_GRID_CONST __grid_constant__\n"                                               \
    "#else\n"                                                                                      \
    "#define EEP_JIT_GRID_CONST\n"                                                                 \
    "#endif\n"

eep_status_t eep_jit_unit_build(eep_jit_t *jit, const eep_jit_spec_t *spec, eep_jit_unit_t *unit_p)
{
    const eep_jit_backend_ops_t *ops;
    eep_jit_unit_t               unit;
    eep_status_t                 status;
    char                        *defines = NULL;
    const char                  *targs   = spec->template_args != NULL ? spec->template_args : "";
    size_t                       len;
    char                         bounds[64] = "";
    int                          n;

    status = eep_jit_spec_check(jit, spec);
    if (status != EEP_OK) {
        return status;
    }
    memset(&unit, 0, sizeof(unit));
    status = eep_jit_pick_backend(jit, spec, &unit.backend);
    if (status != EEP_OK) {
        return status;
    }
    ops                                      = eep_jit_backend_ops(unit.backend);
    unit.mem_headers                         = ops->mem_headers;
    unit.n_mem_headers                       = ops->n_mem_headers;
    unit.include_dirs[unit.n_include_dirs++] = jit->source_root;
    unit.include_dirs[unit.n_include_dirs++] = jit->nccl_include;
    unit.include_dirs[unit.n_include_dirs++] = jit->cuda_include;
    unit.include_dirs[unit.n_include_dirs++] = jit->cccl_include;
    status                                   = eep_jit_unit_options(jit, spec, ops, &unit);
    if (status != EEP_OK) {
        goto err_cleanup;
    }
    if (spec->launch_bounds > 0) {
        snprintf(bounds, sizeof(bounds), "__launch_bounds__(%d) ", spec->launch_bounds);
    }
    status = eep_jit_define_lines(eep_jit_spec_defines(spec), &defines);
    if (status != EEP_OK) {
        goto err_cleanup;
    }
    len = strlen(spec->header) + strlen(spec->function) + strlen(targs) +
          2 * strlen(spec->param_type) + strlen(defines) + sizeof(EEP_JIT_GRID_CONST_DEF) + 512;
    unit.source = malloc(len);
    if (unit.source == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_cleanup;
    }
    n = snprintf(
        unit.source, len,
        "/* generated by eep_jit (%s): %s%s%s%s(const %s &) */\n"
        "%s"
        "%s"
        "#include <%s>\n" EEP_JIT_GRID_CONST_DEF
        "extern \"C\" __global__ void %s" EEP_JIT_ENTRY_NAME "(const EEP_JIT_GRID_CONST %s p)\n"
        "{\n"
        "    %s%s%s%s(p);\n"
        "}\n",
        ops->name, spec->function, targs[0] != '\0' ? "<" : "", targs, targs[0] != '\0' ? ">" : "",
        spec->param_type, ops->unit_prologue != NULL ? ops->unit_prologue : "", defines,
        spec->header, bounds, spec->param_type, spec->function, targs[0] != '\0' ? "<" : "", targs,
        targs[0] != '\0' ? ">" : "");
    if (n < 0 || (size_t)n >= len) {
        status = EEP_ERR_INTERNAL;
        goto err_cleanup;
    }
    free(defines);
    *unit_p = unit;
    return EEP_OK;

err_cleanup:
    free(defines);
    eep_jit_unit_cleanup(&unit);
    return status;
}

void eep_jit_unit_cleanup(eep_jit_unit_t *unit)
{
    free(unit->source);
    free(unit->option_buf);
    unit->source     = NULL;
    unit->option_buf = NULL;
}

/* ---- key ----------------------------------------------------------------------------------- */

/* One labelled field: label, NUL, 8-byte length, bytes; unambiguous for any content. */
static void eep_jit_hash_field(eep_sha256_t *h, const char *label, const void *data, size_t len)
{
    uint64_t n = len;

    eep_sha256_update(h, label, strlen(label) + 1);
    eep_sha256_update(h, &n, sizeof(n));
    eep_sha256_update(h, data, len);
}

static void eep_jit_hash_str(eep_sha256_t *h, const char *label, const char *s)
{
    eep_jit_hash_field(h, label, s, strlen(s));
}

typedef struct {
    eep_jit_t            *jit;
    const eep_jit_unit_t *unit;
    eep_sha256_t         *hash;
    char                **seen;
    size_t                n_seen, cap_seen;
    int                   n_files;
} eep_jit_scan_t;

/* Lexically normalise an absolute path: collapse "//", "/./" and "dir/../". */
static void eep_jit_normalize(const char *in, char *out, size_t len)
{
    char   tmp[PATH_MAX];
    char  *parts[PATH_MAX / 2], *tok, *save;
    size_t n = 0, i, used = 0;

    snprintf(tmp, sizeof(tmp), "%s", in);
    for (tok = strtok_r(tmp, "/", &save); tok != NULL; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0) {
            continue;
        }
        if (strcmp(tok, "..") == 0) {
            n -= n > 0;
            continue;
        }
        parts[n++] = tok;
    }
    out[0] = '\0';
    for (i = 0; i < n && used < len; i++) {
        used += (size_t)snprintf(out + used, len - used, "/%s", parts[i]);
    }
    if (n == 0) {
        snprintf(out, len, "/");
    }
}

static int eep_jit_is_file(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static eep_status_t eep_jit_read_text(const char *path, char **text_p, size_t *len_p)
{
    struct stat st;
    char       *buf;
    ssize_t     got;
    size_t      done = 0;
    int         fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        eep_status_t status = eep_status_from_errno(errno, path);

        if (fd >= 0) {
            close(fd);
        }
        return status;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return EEP_ERR_NO_MEMORY;
    }
    while (done < (size_t)st.st_size) {
        got = read(fd, buf + done, (size_t)st.st_size - done);
        if (got <= 0) {
            break; /* shrank while reading: hash what is there */
        }
        done += (size_t)got;
    }
    close(fd);
    buf[done] = '\0';
    *text_p   = buf;
    *len_p    = done;
    return EEP_OK;
}

/*
 * Header memo: a process that computes keys again (every eep_jit_compile) reuses the text and
 * digest of a header while stat() reports the same device, inode, size, mtime and ctime.  As in
 * git's "racy" rule, a file modified within EEP_JIT_MEMO_RACY_S of being read is never memoised:
 * timestamps are only as fine as the kernel's clock tick, so a second same-size edit inside one
 * tick would otherwise go unseen.  A fresh process (and a fresh eep_jit_t) always reads.
 */
static int eep_jit_memo_match(const eep_jit_memo_t *m, const char *path, const struct stat *st)
{
    return m->dev == st->st_dev && m->ino == st->st_ino && m->size == st->st_size &&
           m->mtime.tv_sec == st->st_mtim.tv_sec && m->mtime.tv_nsec == st->st_mtim.tv_nsec &&
           m->ctime.tv_sec == st->st_ctim.tv_sec && m->ctime.tv_nsec == st->st_ctim.tv_nsec &&
           strcmp(m->path, path) == 0;
}

static void eep_jit_memo_store(eep_jit_t *jit, const char *path, const struct stat *st,
                               const char *text, size_t len, const uint8_t *digest)
{
    eep_jit_memo_t *m         = NULL, *grown;
    char           *copy_text = malloc(len + 1), *copy_path = strdup(path);
    size_t          i;

    if (copy_text == NULL || copy_path == NULL) {
        free(copy_text);
        free(copy_path);
        return; /* the memo is an optimisation; without memory it is skipped */
    }
    memcpy(copy_text, text, len + 1);
    pthread_mutex_lock(&jit->memo_lock);
    for (i = 0; i < jit->n_memo && m == NULL; i++) {
        if (strcmp(jit->memo[i].path, path) == 0) {
            m = &jit->memo[i];
            free(m->path);
            free(m->text);
        }
    }
    if (m == NULL && jit->n_memo == jit->cap_memo) {
        grown = realloc(jit->memo, (jit->cap_memo * 2 + 64) * sizeof(*grown));
        if (grown != NULL) {
            jit->memo     = grown;
            jit->cap_memo = jit->cap_memo * 2 + 64;
        }
    }
    if (m == NULL && jit->n_memo < jit->cap_memo) {
        m = &jit->memo[jit->n_memo++];
    }
    if (m == NULL) {
        free(copy_text);
        free(copy_path);
    } else {
        m->path  = copy_path;
        m->dev   = st->st_dev;
        m->ino   = st->st_ino;
        m->size  = st->st_size;
        m->mtime = st->st_mtim;
        m->ctime = st->st_ctim;
        m->text  = copy_text;
        m->len   = len;
        memcpy(m->digest, digest, EEP_SHA256_BYTES);
    }
    pthread_mutex_unlock(&jit->memo_lock);
}

void eep_jit_memo_cleanup(eep_jit_t *jit)
{
    size_t i;

    for (i = 0; i < jit->n_memo; i++) {
        free(jit->memo[i].path);
        free(jit->memo[i].text);
    }
    free(jit->memo);
    jit->memo   = NULL;
    jit->n_memo = jit->cap_memo = 0;
}

/* Text (malloc'd, NUL terminated) and digest of a header, from the memo or the file. */
static eep_status_t eep_jit_header_read(eep_jit_t *jit, const char *path, char **text_p,
                                        size_t *len_p, uint8_t digest_p[EEP_SHA256_BYTES])
{
    struct stat     before, after;
    struct timespec now;
    eep_status_t    status;
    size_t          i;
    char           *text = NULL;

    if (stat(path, &before) == 0) {
        pthread_mutex_lock(&jit->memo_lock);
        for (i = 0; i < jit->n_memo; i++) {
            if (eep_jit_memo_match(&jit->memo[i], path, &before)) {
                text = malloc(jit->memo[i].len + 1);
                if (text != NULL) {
                    memcpy(text, jit->memo[i].text, jit->memo[i].len + 1);
                    memcpy(digest_p, jit->memo[i].digest, EEP_SHA256_BYTES);
                    *len_p = jit->memo[i].len;
                }
                break;
            }
        }
        pthread_mutex_unlock(&jit->memo_lock);
        if (text != NULL) {
            *text_p = text;
            return EEP_OK;
        }
    }
    status = eep_jit_read_text(path, &text, len_p);
    if (status != EEP_OK) {
        return status;
    }
    eep_sha256(text, *len_p, digest_p);
    clock_gettime(CLOCK_REALTIME, &now);
    if (stat(path, &after) == 0 &&
        memcmp(&before.st_mtim, &after.st_mtim, sizeof(after.st_mtim)) == 0 &&
        before.st_size == after.st_size && before.st_ino == after.st_ino &&
        after.st_mtim.tv_sec + jit->memo_racy_s < now.tv_sec &&
        after.st_ctim.tv_sec + jit->memo_racy_s < now.tv_sec && (size_t)after.st_size == *len_p) {
        eep_jit_memo_store(jit, path, &after, text, *len_p, digest_p);
    }
    *text_p = text;
    return EEP_OK;
}

static int eep_jit_scan_seen(eep_jit_scan_t *scan, const char *path)
{
    size_t i;
    char **grown;

    for (i = 0; i < scan->n_seen; i++) {
        if (strcmp(scan->seen[i], path) == 0) {
            return 1;
        }
    }
    if (scan->n_seen == scan->cap_seen) {
        scan->cap_seen = scan->cap_seen * 2 + 32;
        grown          = realloc(scan->seen, scan->cap_seen * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        scan->seen = grown;
    }
    scan->seen[scan->n_seen] = strdup(path);
    return scan->seen[scan->n_seen++] == NULL ? -1 : 0;
}

static eep_status_t eep_jit_scan_text(eep_jit_scan_t *scan, const char *text, const char *cur_dir,
                                      int depth);

/* Resolve one #include and hash what it names. */
static eep_status_t eep_jit_scan_include(eep_jit_scan_t *scan, const char *name, int quoted,
                                         const char *cur_dir, int depth)
{
    const eep_jit_t *jit = scan->jit;
    char             cand[PATH_MAX], path[PATH_MAX], label[PATH_MAX + 16], *text = NULL;
    uint8_t          digest[EEP_SHA256_BYTES];
    size_t           i, len = 0, rlen, clen = strlen(jit->cuda_include);
    eep_status_t     status;
    int              found = 0, seen;

    if (quoted && cur_dir != NULL) {
        found = eep_jit_pathf(cand, sizeof(cand), "%s/%s", cur_dir, name) == 0 &&
                eep_jit_is_file(cand);
    }
    for (i = 0; !found && i < scan->unit->n_mem_headers; i++) {
        if (strcmp(scan->unit->mem_headers[i].name, name) == 0) {
            /* Its content is already in the key; follow what it includes. */
            eep_jit_pathf(label, sizeof(label), "mem:%s", name);
            seen = eep_jit_scan_seen(scan, label);
            if (seen != 0) {
                return seen < 0 ? EEP_ERR_NO_MEMORY : EEP_OK;
            }
            eep_jit_hash_str(scan->hash, "include-mem", name);
            return eep_jit_scan_text(scan, scan->unit->mem_headers[i].content, NULL, depth + 1);
        }
    }
    for (i = 0; !found && i < (size_t)scan->unit->n_include_dirs; i++) {
        found = eep_jit_pathf(cand, sizeof(cand), "%s/%s", scan->unit->include_dirs[i], name) ==
                    0 &&
                eep_jit_is_file(cand);
    }
    if (!found) {
        eep_jit_hash_str(scan->hash, "include-system", name);
        return EEP_OK;
    }
    eep_jit_normalize(cand, path, sizeof(path));
    seen = eep_jit_scan_seen(scan, path);
    if (seen != 0) {
        return seen < 0 ? EEP_ERR_NO_MEMORY : EEP_OK;
    }
    if (strncmp(path, jit->cuda_include, clen) == 0 && path[clen] == '/' &&
        strncmp(path + clen + 1, "nccl", 4) != 0) {
        eep_jit_hash_str(scan->hash, "include-toolkit", path + clen + 1);
        return EEP_OK;
    }
    rlen = strlen(jit->source_root);
    if (strncmp(path, jit->source_root, rlen) == 0 && path[rlen] == '/') {
        snprintf(label, sizeof(label), "<root>%s", path + rlen);
    } else {
        eep_jit_pathf(label, sizeof(label), "%s", path);
    }
    status = eep_jit_header_read(scan->jit, path, &text, &len, digest);
    if (status != EEP_OK) {
        return status;
    }
    scan->n_files++;
    eep_jit_hash_str(scan->hash, "include-file", label);
    eep_jit_hash_field(scan->hash, "content", digest, sizeof(digest));
    *strrchr(path, '/') = '\0';
    status              = eep_jit_scan_text(scan, text, path, depth + 1);
    free(text);
    return status;
}

static eep_status_t eep_jit_scan_text(eep_jit_scan_t *scan, const char *text, const char *cur_dir,
                                      int depth)
{
    char         name[PATH_MAX], dir[PATH_MAX];
    const char  *p = text, *end;
    eep_status_t status;
    int          quoted;

    if (depth > EEP_JIT_SCAN_MAX_DEPTH) {
        eep_error(EEP_SUBSYS_JIT, "#include nesting deeper than %d (a cycle without guards?)",
                  EEP_JIT_SCAN_MAX_DEPTH);
        return EEP_ERR_INVALID_ARG;
    }
    if (cur_dir != NULL) {
        snprintf(dir, sizeof(dir), "%s", cur_dir); /* the caller's buffer is reused below */
        cur_dir = dir;
    }
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        if (*p == '#') {
            p++;
            while (*p == ' ' || *p == '\t') {
                p++;
            }
            if (strncmp(p, "include", 7) == 0) {
                p += 7;
                while (*p == ' ' || *p == '\t') {
                    p++;
                }
                if (*p == '"' || *p == '<') {
                    quoted = *p == '"';
                    end    = strchr(p + 1, quoted ? '"' : '>');
                    if (end != NULL && end - p - 1 > 0 && (size_t)(end - p - 1) < sizeof(name) &&
                        memchr(p + 1, '\n', (size_t)(end - p - 1)) == NULL) {
                        memcpy(name, p + 1, (size_t)(end - p - 1));
                        name[end - p - 1] = '\0';
                        status = eep_jit_scan_include(scan, name, quoted, cur_dir, depth);
                        if (status != EEP_OK) {
                            return status;
                        }
                    }
                }
            }
        }
        end = strchr(p, '\n');
        if (end == NULL) {
            break;
        }
        p = end + 1;
    }
    return EEP_OK;
}

eep_status_t eep_jit_unit_key(eep_jit_t *jit, eep_jit_unit_t *unit)
{
    const eep_jit_backend_ops_t *ops = eep_jit_backend_ops(unit->backend);
    eep_jit_scan_t               scan;
    eep_sha256_t                 hash;
    uint8_t                      digest[EEP_SHA256_BYTES];
    eep_status_t                 status;
    char                         num[32], opt[PATH_MAX + 8];
    size_t                       i, rlen = strlen(jit->source_root);
    double                       start = eep_clock_ms();

    eep_sha256_init(&hash);
    eep_jit_hash_str(&hash, "format", "eep-jit-key-1");
    eep_jit_hash_str(&hash, "backend", ops->name);
    status = ops->identity(jit, &hash);
    if (status != EEP_OK) {
        return status;
    }
    eep_jit_hash_str(&hash, "cuda-home", jit->cuda_home);
    snprintf(num, sizeof(num), "%d", CUDA_VERSION);
    eep_jit_hash_str(&hash, "cuda-version", num);
    snprintf(num, sizeof(num), "%d", NCCL_VERSION_CODE);
    eep_jit_hash_str(&hash, "nccl-version", num);
    eep_jit_hash_str(&hash, "arch", jit->arch);
    for (i = 0; i < (size_t)unit->n_options; i++) {
        /* The source root's location does not shape the cubin; its content does (below). */
        if (strncmp(unit->options[i], "-I", 2) == 0 &&
            strncmp(unit->options[i] + 2, jit->source_root, rlen) == 0 &&
            unit->options[i][2 + rlen] == '\0') {
            snprintf(opt, sizeof(opt), "-I<root>");
        } else {
            snprintf(opt, sizeof(opt), "%s", unit->options[i]);
        }
        eep_jit_hash_str(&hash, "option", opt);
    }
    for (i = 0; i < unit->n_mem_headers; i++) {
        eep_jit_hash_str(&hash, "mem-header", unit->mem_headers[i].name);
        eep_jit_hash_str(&hash, "mem-content", unit->mem_headers[i].content);
    }
    eep_jit_hash_str(&hash, "unit", unit->source);

    memset(&scan, 0, sizeof(scan));
    scan.jit  = jit;
    scan.unit = unit;
    scan.hash = &hash;
    status    = eep_jit_scan_text(&scan, unit->source, NULL, 0);
    for (i = 0; i < scan.n_seen; i++) {
        free(scan.seen[i]);
    }
    free(scan.seen);
    if (status != EEP_OK) {
        return status;
    }
    eep_sha256_final(&hash, digest);
    eep_sha256_hex(digest, unit->key);
    snprintf(unit->name, sizeof(unit->name), "eep_jit_%.16s.cu", unit->key);
    eep_debug(EEP_SUBSYS_JIT, "key %.16s: %d headers read in %.2f ms", unit->key, scan.n_files,
              eep_clock_ms() - start);
    return EEP_OK;
}
