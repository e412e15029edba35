/* ppscan: the static canary probe, a drop-in for canaries/detect.py.
 *
 * Same CLI (ROOT... [--max-file-bytes N] [--skip PATH]), same walk, same windows (1 MiB chunks,
 * 512-byte overlap, 16-byte backup), same hits (raw any case; standard and url-safe base64 at every
 * alignment, also across line breaks; hex in either case), same JSON lines and summary record.
 * A scan is told the run it looks for (--run RUN): a run's tokens are version-4 UUIDs whose first group is
 * the run id, so "RUN-" is the prefix every anchor is made of (canaries/detect.py, token_pattern).
 * Hyperscan finds the literal anchors (every encoding of the prefix); each candidate is then
 * verified and decoded exactly as detect.py does. It never follows a symlink, opens a fifo or a
 * device, writes a file, or enters /sys; of /proc it reads only <pid>/environ and cmdline.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <immintrin.h>
#include <errno.h>
#include <fcntl.h>
#include <bzlib.h>
#include <hs/hs.h>
#include <libdeflate.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MAX_TOKEN_CHARS 63
#define BASE64_WINDOW (4 * ((2 + MAX_TOKEN_CHARS + 1 + 2) / 3))
#define HEX_WINDOW (2 * (MAX_TOKEN_CHARS + 1))
#define OVERLAP 512
#define BACKUP 16
#define CHUNK_SIZE (1 << 20)
#define SUMMARY_PROBLEMS 200
#define DEFAULT_MAX_FILE_BYTES (8 << 20)

/* "<run>-", set from --run before build_anchors(). */
static char PREFIX[10];
/* In the order of their names, as detect.py sorts hits by (offset, encoding, token). */
enum { ENC_BASE32, ENC_BASE64, ENC_B64B64, ENC_BASE64URL, ENC_DNS, ENC_HEX, ENC_HEXSEP, ENC_HTML, ENC_JSON, ENC_PERCENT,
       ENC_QP, ENC_RAW, ENC_UTF16 };
static const char *ENC_NAMES[] = {"base32", "base64", "base64-base64", "base64url", "dns-labels", "hex", "hex-sep",
                                  "html-entity", "json-escape", "percent", "quoted-printable", "raw", "utf-16"};

typedef struct { char token[MAX_TOKEN_CHARS + 1]; int enc; uint64_t offset; } Hit;
typedef struct { Hit *v; size_t n, cap; } Hits;

static void hits_push(Hits *h, const uint8_t *tok, size_t len, int enc, uint64_t off) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->v = realloc(h->v, h->cap * sizeof(Hit));
        if (!h->v) { perror("ppscan"); exit(70); }
    }
    Hit *x = &h->v[h->n++];
    for (size_t i = 0; i < len; i++) x->token[i] = (char)((tok[i] >= 'A' && tok[i] <= 'Z') ? tok[i] + 32 : tok[i]);
    x->token[len] = 0;
    x->enc = enc;
    x->offset = off;
}

static int hit_cmp(const void *a, const void *b) {
    const Hit *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->enc != y->enc) return x->enc < y->enc ? -1 : 1;
    return strcmp(x->token, y->token);
}

/* ---- the token shape (RAW_PATTERN), ASCII case-insensitive ---- */
static inline int lc(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }
static inline int is_hex(int c) { c = lc(c); return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
static int hexval(int c) { return c <= '9' ? c - '0' : lc(c) - 'a' + 10; }
static inline int is_alnum_lc(int c) { c = lc(c); return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'); }

/* Length of the token matching at p (n bytes available), or 0; the byte after it is not looked at
 * unless check_next (token_pattern's lookahead): the prefix "<run>-", then 4-4-4-12 hex digits. */
static size_t match_token_at(const uint8_t *p, size_t n, int check_next) {
    static const int GROUPS[] = {4, 4, 4, 12};
    size_t i = 0;
    if (n < 9) return 0;
    for (; i < 9; i++) if (lc(p[i]) != PREFIX[i]) return 0;
    for (int g = 0; g < 4; g++) {
        if (g && (i >= n || p[i++] != '-')) return 0;
        for (int k = 0; k < GROUPS[g]; k++, i++) if (i >= n || !is_hex(p[i])) return 0;
    }
    if (check_next && i < n && is_hex(p[i])) return 0;
    return i;
}
static size_t match_token(const uint8_t *p, size_t n) { return match_token_at(p, n, 1); }

/* ---- anchors ---- */
enum { KIND_RAW, KIND_B64, KIND_HEX, KIND_ESC, KIND_DNS, KIND_UTF16, KIND_HEXSEP, KIND_B32, KIND_B64B64, KIND_MAGIC };
/* inner_alignment and inner_lead: of the base64 anchor a KIND_B64B64 anchor is the base64 of. */
typedef struct { char lit[32]; unsigned len; int kind, alignment, lead, inner_alignment, inner_lead; } Anchor;
static Anchor anchors[256];
static unsigned n_anchors;
static hs_database_t *db;
static hs_scratch_t *scratch;

/* The characters of the prefix, either case (for JSON escapes). */
static uint8_t PREFIX_CHAR[256];
/* The bytes find_escapes stops at (escape_at). */
static uint8_t ESCAPE_BYTE[256];

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static int8_t B64_VAL[256];

static void add_anchor2(const char *lit, unsigned len, int kind, int alignment, int lead, int inner_alignment, int inner_lead) {
    for (unsigned i = 0; i < n_anchors; i++)
        if (anchors[i].len == len && !memcmp(anchors[i].lit, lit, len) && anchors[i].kind == kind &&
            anchors[i].alignment == alignment && anchors[i].lead == lead && anchors[i].inner_alignment == inner_alignment &&
            anchors[i].inner_lead == inner_lead) return;
    if (n_anchors == sizeof anchors / sizeof *anchors) { fprintf(stderr, "ppscan: too many anchors\n"); exit(70); }
    Anchor *a = &anchors[n_anchors++];
    memcpy(a->lit, lit, len);
    a->lit[len] = 0;
    a->len = len; a->kind = kind; a->alignment = alignment; a->lead = lead;
    a->inner_alignment = inner_alignment; a->inner_lead = inner_lead;
}
static void add_anchor(const char *lit, unsigned len, int kind, int alignment, int lead) {
    add_anchor2(lit, len, kind, alignment, lead, 0, 0);
}

/* The stable middle of the base64 (standard alphabet) of `plain` placed `alignment` bytes into a group:
 * the characters that depend on it alone; *lead is where they start after their group. */
static unsigned b64_middle(const uint8_t *plain, size_t plen, int alignment, char *out, int *lead) {
    uint8_t buf[48] = {0};
    memcpy(buf + alignment, plain, plen);
    size_t total = alignment + plen + 2;
    char enc[80];
    size_t e = 0;
    for (size_t i = 0; i < total; i += 3) {
        uint32_t v = buf[i] << 16 | (i + 1 < total ? buf[i + 1] : 0) << 8 | (i + 2 < total ? buf[i + 2] : 0);
        enc[e++] = B64[v >> 18 & 63]; enc[e++] = B64[v >> 12 & 63]; enc[e++] = B64[v >> 6 & 63]; enc[e++] = B64[v & 63];
    }
    *lead = (8 * alignment + 5) / 6;
    int end = (int)(8 * (alignment + plen) / 6);
    memcpy(out, enc + *lead, (size_t)(end - *lead));
    return (unsigned)(end - *lead);
}

static const char B32[] = "abcdefghijklmnopqrstuvwxyz234567";
static int8_t B32_VAL[256];

/* Stream magics (detect.STREAM_MAGICS, BASE64_STREAM_ANCHORS): KIND_MAGIC anchors, alignment = format,
 * lead = 1 when base64-encoded. Their matches only say that a file is worth carving (see carve()). */
enum { FMT_BZ2, FMT_GZIP, FMT_XZ, FMT_ZLIB, FMT_ZSTD };
static const char *FMT_NAMES[] = {"bz2", "gzip", "xz", "zlib", "zstd"};
static const struct { int fmt; const char *magic; unsigned len; } MAGICS[] = {
    {FMT_GZIP, "\x1f\x8b\x08", 3}, {FMT_XZ, "\xfd" "7zXZ\0", 6}, {FMT_ZSTD, "\x28\xb5\x2f\xfd", 4}, {FMT_BZ2, "BZh", 3},
    {FMT_ZLIB, "\x78\x01", 2}, {FMT_ZLIB, "\x78\x5e", 2}, {FMT_ZLIB, "\x78\x9c", 2}, {FMT_ZLIB, "\x78\xda", 2},
};
static const struct { int fmt; const char *magic; unsigned len; } B64_MAGICS[] = {
    {FMT_GZIP, "H4sI", 4}, {FMT_XZ, "/Td6WFo", 7}, {FMT_XZ, "_Td6WFo", 7}, {FMT_ZSTD, "KLUv/", 5}, {FMT_ZSTD, "KLUv_", 5},
    {FMT_BZ2, "Qlpo", 4},
};

static void build_splits(void);
static void pick_find_wrapped(void);

static void build_anchors(void) {
    for (const char *c = "\\&=\x01\x5e\x9c\xda"; *c; c++) ESCAPE_BYTE[(uint8_t)*c] = 1;
    memset(B64_VAL, -1, sizeof B64_VAL);
    for (int i = 0; i < 64; i++) B64_VAL[(uint8_t)B64[i]] = (int8_t)i;
    B64_VAL['-'] = 62; B64_VAL['_'] = 63;
    add_anchor(PREFIX, 9, KIND_RAW, 0, 0);
    /* The prefix cut by dots, any number of them (a token cut into DNS labels): compiled as the
     * regex p\.*p\.*c...\.*- (see the pattern loop), its start found by walking back (dns_start). */
    add_anchor(PREFIX, 9, KIND_DNS, 0, 0);
    /* Beyond detect.py: any character of the prefix percent-encoded or as a JSON \u escape (the
     * latter found by find_json_escapes, not Hyperscan). */
    for (int i = 0; i < 9; i++) {
        for (int up = 0; up < 2; up++) {
            char c = up && PREFIX[i] >= 'a' && PREFIX[i] <= 'z' ? PREFIX[i] - 32 : PREFIX[i];
            char lit[16];
            snprintf(lit, sizeof lit, "%%%02x", (unsigned)(uint8_t)c);
            add_anchor(lit, 3, KIND_ESC, 0, 0);
            PREFIX_CHAR[(uint8_t)c] = 1;
        }
    }
    for (int up = 0; up < 2; up++) {
        char prefix[10];
        for (int i = 0; i < 9; i++) prefix[i] = up && PREFIX[i] >= 'a' ? PREFIX[i] - 32 : PREFIX[i];
        for (int alignment = 0; alignment < 3; alignment++) {
            uint8_t plain[16] = {0};
            size_t plen = alignment + 9 + 2;
            memcpy(plain + alignment, prefix, 9);
            char enc[32];
            size_t e = 0;
            for (size_t i = 0; i < plen; i += 3) {
                uint32_t v = plain[i] << 16 | (i + 1 < plen ? plain[i + 1] : 0) << 8 | (i + 2 < plen ? plain[i + 2] : 0);
                enc[e++] = B64[v >> 18 & 63]; enc[e++] = B64[v >> 12 & 63];
                enc[e++] = i + 1 < plen ? B64[v >> 6 & 63] : '=';
                enc[e++] = i + 2 < plen ? B64[v & 63] : '=';
            }
            int lead = (8 * alignment + 5) / 6;
            int end = 8 * (alignment + 9) / 6;
            char std[32], url[32];
            unsigned len = (unsigned)(end - lead);
            memcpy(std, enc + lead, len);
            memcpy(url, std, len);
            for (unsigned i = 0; i < len; i++) url[i] = url[i] == '+' ? '-' : url[i] == '/' ? '_' : url[i];
            add_anchor(std, len, KIND_B64, alignment, lead);
            add_anchor(url, len, KIND_B64, alignment, lead);
        }
        for (int hexup = 0; hexup < 2; hexup++) {
            char hex[19];
            const char *digits = hexup ? "0123456789ABCDEF" : "0123456789abcdef";
            for (int i = 0; i < 9; i++) { hex[2 * i] = digits[(uint8_t)prefix[i] >> 4]; hex[2 * i + 1] = digits[prefix[i] & 15]; }
            add_anchor(hex, 18, KIND_HEX, 0, 0);
        }
    }
    /* Beyond the prefix's first forms (issue 26), each as detect._more_tokens finds it. */
    memset(B32_VAL, -1, sizeof B32_VAL);
    for (int i = 0; i < 32; i++) { B32_VAL[(uint8_t)B32[i]] = (int8_t)i; if (i < 26) B32_VAL[(uint8_t)B32[i] - 32] = (int8_t)i; }
    {
        char lit[32];
        int len;
        for (int i = 0; i < 9; i++) { lit[2 * i] = PREFIX[i]; lit[2 * i + 1] = 0; }
        add_anchor(lit, 17, KIND_UTF16, 0, 0);
        static const char *SEPS[] = {":", "-", " ", ",", ", "};
        /* The hex of the prefix's first three bytes, lower- and upper-case prefix (detect._hex_sep_anchors). */
        for (int up = 0; up < 2; up++) {
            char X[3][3];
            for (int i = 0; i < 3; i++) {
                char c = up && PREFIX[i] >= 'a' && PREFIX[i] <= 'z' ? PREFIX[i] - 32 : PREFIX[i];
                snprintf(X[i], sizeof X[i], "%02x", (unsigned)(uint8_t)c);
            }
            const char *A = X[0], *B = X[1], *C = X[2];
            for (int k = 0; k < 5; k++) {
                len = snprintf(lit, sizeof lit, "%s%s%s%s%s", A, SEPS[k], B, SEPS[k], C);
                add_anchor(lit, (unsigned)len, KIND_HEXSEP, 0, 0);
            }
            len = snprintf(lit, sizeof lit, "\\x%s\\x%s\\x%s", A, B, C);
            add_anchor(lit, (unsigned)len, KIND_HEXSEP, 0, 0);
            for (int k = -1; k < 5; k++) {
                const char *sep = k < 0 ? "" : SEPS[k];
                len = snprintf(lit, sizeof lit, "0x%s%s0x%s%s0x%s", A, sep, B, sep, C);
                add_anchor(lit, (unsigned)len, KIND_HEXSEP, 0, 0);
            }
        }
        for (int up = 0; up < 2; up++) {
            uint8_t prefix[9];
            for (int i = 0; i < 9; i++) prefix[i] = (uint8_t)(up && PREFIX[i] >= 'a' ? PREFIX[i] - 32 : PREFIX[i]);
            for (int alignment = 0; alignment < 5; alignment++) {
                uint8_t buf[24] = {0};
                memcpy(buf + alignment, prefix, 9);
                size_t total = (size_t)alignment + 9 + 4, e = 0;
                char enc[48];
                for (size_t i = 0; i < total; i += 5) {
                    uint64_t v = 0;
                    for (int k = 0; k < 5; k++) v = v << 8 | buf[i + k];
                    for (int k = 7; k >= 0; k--) enc[e++] = B32[v >> (5 * k) & 31];
                }
                int lead = (8 * alignment + 4) / 5, end = 8 * (alignment + 9) / 5;
                add_anchor(enc + lead, (unsigned)(end - lead), KIND_B32, alignment, lead);
            }
        }
        /* Base64 of base64: every base64 anchor above, base64-encoded at each alignment. */
        unsigned n_first = n_anchors;
        for (unsigned i = 0; i < n_first; i++) {
            if (anchors[i].kind != KIND_B64) continue;
            for (int alignment = 0; alignment < 3; alignment++) {
                char mid[48];
                int lead;
                unsigned len = b64_middle((const uint8_t *)anchors[i].lit, anchors[i].len, alignment, mid, &lead);
                add_anchor2(mid, len, KIND_B64B64, alignment, lead, anchors[i].alignment, anchors[i].lead);
            }
        }
        /* HTML references, quoted-printable escapes and soft breaks, and zlib's two-byte headers are found
         * by find_escapes' byte search (fewer, longer literals keep Hyperscan on a faster engine). */
        for (size_t i = 0; i < sizeof MAGICS / sizeof *MAGICS; i++)
            if (MAGICS[i].fmt != FMT_ZLIB) add_anchor(MAGICS[i].magic, MAGICS[i].len, KIND_MAGIC, MAGICS[i].fmt, 0);
        for (size_t i = 0; i < sizeof B64_MAGICS / sizeof *B64_MAGICS; i++)
            add_anchor(B64_MAGICS[i].magic, B64_MAGICS[i].len, KIND_MAGIC, B64_MAGICS[i].fmt, 1);
    }
    build_splits();
    static char patterns[256][32 * 4 + 64];
    const char *exprs[256];
    unsigned flags[256], ids[256];
    for (unsigned i = 0; i < n_anchors; i++) {
        char *q = patterns[i];
        for (unsigned k = 0; k < anchors[i].len; k++) {
            char c = anchors[i].lit[k];
            q += sprintf(q, "\\x%02x", (uint8_t)c);
            if (anchors[i].kind == KIND_DNS && k + 1 < anchors[i].len) q += sprintf(q, "\\.*");
        }
        *q = 0;
        exprs[i] = patterns[i]; ids[i] = i;
        int k = anchors[i].kind;
        flags[i] = k == KIND_RAW || k == KIND_ESC || k == KIND_DNS || k == KIND_UTF16 || k == KIND_HEXSEP || k == KIND_B32 ? HS_FLAG_CASELESS : 0;
    }
    /* Compiled here, for the run given (~50 ms; the anchors are the run's, so no database can be built
     * ahead of time). */
    hs_compile_error_t *err = NULL;
    if (hs_compile_multi(exprs, flags, ids, n_anchors, HS_MODE_BLOCK, NULL, &db, &err) != HS_SUCCESS) {
        fprintf(stderr, "ppscan: hyperscan compile failed: %s\n", err ? err->message : "?");
        exit(70);
    }
    if (hs_alloc_scratch(db, &scratch) != HS_SUCCESS) { fprintf(stderr, "ppscan: hyperscan scratch failed\n"); exit(70); }
}

/* ---- verification of candidates ---- */
static int is_b64_char(uint8_t c) { return B64_VAL[c] >= 0; }

/* detect._decode_base64_at on the run starting at data[start]. With `joined`, line breaks inside the
 * run are skipped, as detect.py's second pass sees the window with its breaks taken out; the offset
 * is then the original position of the run's alignment-th character (detect._unjoin). */
static void verify_b64(const uint8_t *data, size_t n, size_t start, int alignment, Hits *out, int joined) {
    uint8_t chars[BASE64_WINDOW];
    size_t pos[BASE64_WINDOW];
    size_t len = 0;
    int url = 0;
    for (size_t i = start; i < n && len < BASE64_WINDOW; i++) {
        uint8_t c = data[i];
        if (joined && (c == '\n' || c == '\r')) continue;
        if (!is_b64_char(c)) break;
        if (c == '-' || c == '_') url = 1;
        pos[len] = i;
        chars[len++] = c;
    }
    size_t whole = len - len % 4, tail = len % 4;
    uint8_t plain[BASE64_WINDOW];
    size_t pn = 0;
    const uint8_t *c = chars;
    for (size_t i = 0; i < whole; i += 4) {
        uint32_t v = B64_VAL[c[i]] << 18 | B64_VAL[c[i + 1]] << 12 | B64_VAL[c[i + 2]] << 6 | B64_VAL[c[i + 3]];
        plain[pn++] = v >> 16; plain[pn++] = v >> 8 & 255; plain[pn++] = v & 255;
    }
    if (tail >= 2) {
        uint32_t v = B64_VAL[c[whole]] << 18 | B64_VAL[c[whole + 1]] << 12 | (tail == 3 ? B64_VAL[c[whole + 2]] << 6 : 0);
        plain[pn++] = v >> 16;
        if (tail == 3) plain[pn++] = v >> 8 & 255;
    }
    if ((size_t)alignment >= pn) return;
    size_t m = match_token(plain + alignment, pn - alignment);
    if (!m) return;
    hits_push(out, plain + alignment, m, url ? ENC_BASE64URL : ENC_BASE64, pos[alignment]);
}


static void verify_hex(const uint8_t *data, size_t n, size_t at, Hits *out) {
    size_t stop = at + HEX_WINDOW < n ? at + HEX_WINDOW : n, end = at;
    while (end < stop && is_hex(data[end])) end++;
    size_t digits = (end - at) / 2 * 2;
    uint8_t plain[HEX_WINDOW / 2];
    for (size_t i = 0; i < digits; i += 2) plain[i / 2] = (uint8_t)(hexval(data[at + i]) << 4 | hexval(data[at + i + 1]));
    size_t m = match_token(plain, digits / 2);
    if (m) hits_push(out, plain, m, ENC_HEX, at);
}

typedef struct { size_t *v; size_t n, cap; } Posv;
typedef struct { const uint8_t *data; size_t n; Hits *out; int has_breaks; Posv *esc; } ScanCtx;

static void posv_push(Posv *h, size_t x) {
    if (h->n == h->cap) { h->cap = h->cap ? h->cap * 2 : 256; h->v = realloc(h->v, h->cap * sizeof *h->v); if (!h->v) exit(70); }
    h->v[h->n++] = x;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* A token cut into DNS labels (not in detect.py): the dots taken out, at least one inside it. */
static void verify_dns(const uint8_t *data, size_t n, size_t s, Hits *out) {
    uint8_t plain[MAX_TOKEN_CHARS + 2];
    size_t pos[MAX_TOKEN_CHARS + 2];
    size_t len = 0, first_dot = SIZE_MAX;
    for (size_t i = s; i < n && len < sizeof plain; i++) {
        if (data[i] == '.') { if (first_dot == SIZE_MAX) first_dot = len; continue; }
        pos[len] = i;
        plain[len++] = data[i];
    }
    size_t m = match_token_at(plain, len, 0);
    if (!m || first_dot >= m) return;
    /* The token ends where a label ends, or where the next character is not a hex digit. */
    size_t after = pos[m - 1] + 1;
    if (after < n && data[after] != '.' && m < len && is_hex(plain[m])) return;
    hits_push(out, plain, m, ENC_DNS, s);
}

/* Escapes decoded in place (detect._escaped_tokens): percent-encoding, JSON \u00XX (ASCII), HTML
 * character references (&#N; and &#xH;, a non-ASCII one decoded as 0x80), quoted-printable =XX and its
 * soft line break (= then LF or CRLF, standing for nothing; it marks the character after it). A hit
 * needs an escape inside the token; its encoding is that of the first. */
static void verify_escaped(const uint8_t *data, size_t n, size_t s, Hits *out) {
    uint8_t plain[MAX_TOKEN_CHARS + 2];
    int kind[MAX_TOKEN_CHARS + 2];
    size_t len = 0, i = s;
    int soft = 0;
    /* A soft line break stands for nothing: a token never starts at one (it starts after it). */
    if (data[s] == '=' && s + 1 < n && (data[s + 1] == '\n' || data[s + 1] == '\r')) return;
    while (i < n && len < sizeof plain) {
        int k = ENC_RAW;
        uint8_t c = data[i];
        if (data[i] == '%' && i + 2 < n && is_hex(data[i + 1]) && is_hex(data[i + 2])) {
            c = (uint8_t)(hexval(data[i + 1]) << 4 | hexval(data[i + 2]));
            k = ENC_PERCENT;
            i += 3;
        } else if (data[i] == '\\' && i + 5 < n && (data[i + 1] | 0x20) == 'u' && data[i + 2] == '0' && data[i + 3] == '0' &&
                   is_hex(data[i + 4]) && is_hex(data[i + 5]) && hexval(data[i + 4]) < 8) {
            c = (uint8_t)(hexval(data[i + 4]) << 4 | hexval(data[i + 5]));
            k = ENC_JSON;
            i += 6;
        } else if (data[i] == '&' && i + 3 < n && data[i + 1] == '#') {
            int hx = data[i + 2] == 'x' || data[i + 2] == 'X';
            size_t j = i + 2 + (size_t)hx, stop = j + (hx ? 6 : 7);
            uint32_t v = 0;
            while (j < n && j < stop && (hx ? is_hex(data[j]) : (data[j] >= '0' && data[j] <= '9')))
                v = v * (hx ? 16 : 10) + (uint32_t)(hx ? hexval(data[j]) : data[j] - '0'), j++;
            if (j > i + 2 + (size_t)hx && j < n && data[j] == ';') {
                c = v < 128 ? (uint8_t)v : 0x80;
                k = ENC_HTML;
                i = j + 1;
            } else i++;
        } else if (data[i] == '=' && i + 2 < n && is_hex(data[i + 1]) && is_hex(data[i + 2])) {
            c = (uint8_t)(hexval(data[i + 1]) << 4 | hexval(data[i + 2]));
            k = ENC_QP;
            i += 3;
        } else if (data[i] == '=' && i + 1 < n && (data[i + 1] == '\n' || (data[i + 1] == '\r' && i + 2 < n && data[i + 2] == '\n'))) {
            i += data[i + 1] == '\n' ? 2 : 3;
            if (len) soft = 1;
            continue;
        } else i++;
        plain[len] = c;
        kind[len++] = soft ? ENC_QP : k;
        soft = 0;
    }
    size_t m = match_token(plain, len);
    if (!m) return;
    for (size_t k = 0; k < m; k++)
        if (kind[k] != ENC_RAW) { hits_push(out, plain, m, kind[k], s); return; }
}

/* UTF-16 either way round (detect._utf16_tokens): the prefix's first character at data[at]; the token ends where the next code
 * unit is not a hex digit. */
static void verify_utf16(const uint8_t *data, size_t n, size_t at, Hits *out) {
    uint8_t plain[MAX_TOKEN_CHARS + 1];
    size_t len = 0;
    for (size_t i = at; i < n && len < sizeof plain; i += 2) plain[len++] = data[i];
    size_t m = match_token_at(plain, len, 0);
    if (!m) return;
    size_t end = at + 2 * m;
    int le = !(end + 1 < n && data[end + 1] == 0 && is_hex(data[end]));
    int be = at > 0 && !(end < n && data[end - 1] == 0 && is_hex(data[end]));
    for (size_t k = 0; k < m; k++) {
        if (at + 2 * k + 1 < n && data[at + 2 * k + 1]) le = 0;
        if (be && data[at + 2 * k - 1]) be = 0;
    }
    if (le || be) hits_push(out, plain, m, ENC_UTF16, at);
}

/* Hex pairs with separators or a per-byte \x or 0x (detect._unhex_separated). */
static void verify_hexsep(const uint8_t *data, size_t n, size_t at, Hits *out) {
    uint8_t plain[MAX_TOKEN_CHARS + 1];
    size_t len = 0, i = at;
    while (len < sizeof plain && i < n) {
        size_t j = i;
        if (i + 1 < n && (data[i] == '\\' || data[i] == '0') && lc(data[i + 1]) == 'x') j = i + 2;
        if (j + 2 > n || !is_hex(data[j]) || !is_hex(data[j + 1])) break;
        plain[len++] = (uint8_t)(hexval(data[j]) << 4 | hexval(data[j + 1]));
        i = j + 2;
        if (i + 1 < n && data[i] == ',' && data[i + 1] == ' ') i += 2;
        else if (i < n && (data[i] == ':' || data[i] == '-' || data[i] == ' ' || data[i] == ',')) i++;
    }
    size_t m = match_token(plain, len);
    if (m) hits_push(out, plain, m, ENC_HEXSEP, at);
}

/* Base32, either case (detect._base32_tokens), decoded bit by bit from its group's start. */
#define BASE32_WINDOW (8 * ((4 + MAX_TOKEN_CHARS + 1 + 4) / 5))
static void verify_b32(const uint8_t *data, size_t n, size_t start, int alignment, Hits *out) {
    uint8_t plain[BASE32_WINDOW];
    size_t len = 0;
    unsigned bits = 0, value = 0;
    for (size_t i = start; i < n && i < start + BASE32_WINDOW && B32_VAL[data[i]] >= 0; i++) {
        value = (value << 5 | (unsigned)B32_VAL[data[i]]) & 0xffff;
        bits += 5;
        if (bits >= 8) { bits -= 8; plain[len++] = (uint8_t)(value >> bits & 255); }
    }
    if ((size_t)alignment >= len) return;
    size_t m = match_token(plain + alignment, len - alignment);
    if (m) hits_push(out, plain + alignment, m, ENC_BASE32, start + (size_t)(8 * alignment / 5));
}

/* The bytes of the base64 run (either alphabet, no line breaks) in data[start, stop) (detect._unbase64_run). */
static size_t unbase64_run(const uint8_t *data, size_t n, size_t start, size_t stop, uint8_t *plain) {
    size_t len = 0;
    while (start + len < n && start + len < stop && B64_VAL[data[start + len]] >= 0) len++;
    const uint8_t *c = data + start;
    size_t whole = len - len % 4, tail = len % 4, pn = 0;
    for (size_t i = 0; i < whole; i += 4) {
        uint32_t v = B64_VAL[c[i]] << 18 | B64_VAL[c[i + 1]] << 12 | B64_VAL[c[i + 2]] << 6 | B64_VAL[c[i + 3]];
        plain[pn++] = v >> 16; plain[pn++] = v >> 8 & 255; plain[pn++] = v & 255;
    }
    if (tail >= 2) {
        uint32_t v = B64_VAL[c[whole]] << 18 | B64_VAL[c[whole + 1]] << 12 | (tail == 3 ? B64_VAL[c[whole + 2]] << 6 : 0);
        plain[pn++] = v >> 16;
        if (tail == 3) plain[pn++] = v >> 8 & 255;
    }
    return pn;
}

static void verify_b64(const uint8_t *data, size_t n, size_t start, int alignment, Hits *out, int joined);

/* Base64 of base64 (detect._decode_nested_at): decode the outer run from its group (or the one before,
 * where the inner run may start), then the inner run as a base64 anchor would. */
#define NESTED_WINDOW (4 * ((3 + BASE64_WINDOW + 3 + 2 + 2) / 3) + 4)
static void verify_b64b64(const uint8_t *data, size_t n, size_t at, const Anchor *a, Hits *out) {
    if (at < (size_t)a->lead) return;
    size_t group = at - (size_t)a->lead;
    int earlier = group >= 4;
    for (size_t k = 1; earlier && k <= 4; k++) if (B64_VAL[data[group - k]] < 0) earlier = 0;
    size_t start = earlier ? group - 4 : group;
    uint8_t inner[NESTED_WINDOW];
    size_t len = unbase64_run(data, n, start, start + NESTED_WINDOW, inner);
    long inner_start = (long)a->alignment + (earlier ? 3 : 0) - a->inner_lead;
    if (inner_start < 0) return;
    Hits one = {0};
    verify_b64(inner, len, (size_t)inner_start, a->inner_alignment, &one, 0);
    if (one.n) hits_push(out, (const uint8_t *)one.v[0].token, strlen(one.v[0].token), ENC_B64B64, group);
    free(one.v);
}

/* Where a match of the dotted prefix regex ending at data[to] starts: walk back over it. */
static size_t dns_start(const uint8_t *data, size_t to) {
    size_t i = to - 1;  /* the '-' */
    for (int k = 7; k >= 0; k--) {
        i--;
        while (data[i] == '.') i--;
        (void)k;
    }
    return i;
}

static inline int is_break(uint8_t c) { return c == '\n' || c == '\r'; }

/* An occurrence of base64 anchor a whose first character is data[at] and whose last ends before
 * data[to] (line breaks may sit between its characters): verify it as detect.py's passes would.
 * The unwrapped pass sees it only if no break sits inside; the joined pass (which runs when the
 * window has a break anywhere) starts `lead` characters before it, not counting breaks. */
static void b64_occurrence(const ScanCtx *ctx, const Anchor *a, size_t at, size_t to) {
    const uint8_t *data = ctx->data;
    if (to - at == a->len && at >= (size_t)a->lead)
        verify_b64(data, ctx->n, at - a->lead, a->alignment, ctx->out, 0);
    if (!ctx->has_breaks) return;
    size_t start = at;
    for (size_t k = 0; k < (size_t)a->lead;) {
        if (start == 0) return;
        start--;
        if (!is_break(data[start])) k++;
    }
    verify_b64(data, ctx->n, start, a->alignment, ctx->out, 1);
}

/* Where the last find() saw a stream's magic (KIND_MAGIC anchors): the candidates carve() tries, so that
 * it never searches a buffer again (memmem for two-byte magics cost 6 times the whole scan). */
typedef struct { size_t at; int fmt, b64; } Cand;
typedef struct { Cand *v; size_t n, cap; } Cands;
static __thread Cands magic_found;
static void cands_push(Cands *c, size_t at, int fmt, int b64) {
    if (c->n == c->cap) { c->cap = c->cap ? c->cap * 2 : 16; c->v = realloc(c->v, c->cap * sizeof *c->v); if (!c->v) exit(70); }
    c->v[c->n++] = (Cand){at, fmt, b64};
}
static void cands_push_zlib(size_t at) { cands_push(&magic_found, at, FMT_ZLIB, 0); }

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *vctx) {
    (void)from; (void)flags;
    ScanCtx *ctx = vctx;
    const Anchor *a = &anchors[id];
    const uint8_t *data = ctx->data;
    size_t at = (size_t)to - a->len;
    if (a->kind == KIND_B64) { b64_occurrence(ctx, a, at, (size_t)to); return 0; }
    if (a->kind == KIND_ESC) { posv_push(ctx->esc, (size_t)to); return 0; }
    if (a->kind == KIND_DNS) { verify_dns(data, ctx->n, dns_start(data, (size_t)to), ctx->out); return 0; }
    if (a->kind == KIND_UTF16) { verify_utf16(data, ctx->n, at, ctx->out); return 0; }
    if (a->kind == KIND_HEXSEP) { verify_hexsep(data, ctx->n, at, ctx->out); return 0; }
    if (a->kind == KIND_B32) { if (at >= (size_t)a->lead) verify_b32(data, ctx->n, at - a->lead, a->alignment, ctx->out); return 0; }
    if (a->kind == KIND_B64B64) { verify_b64b64(data, ctx->n, at, a, ctx->out); return 0; }
    if (a->kind == KIND_MAGIC) { cands_push(&magic_found, at, a->alignment, a->lead); return 0; }
    if (a->kind == KIND_RAW) {
        posv_push(ctx->esc, (size_t)to);
        verify_dns(data, ctx->n, at, ctx->out);
        size_t m = match_token(data + at, ctx->n - at);
        if (m) hits_push(ctx->out, data + at, m, ENC_RAW, at);
    } else {
        verify_hex(data, ctx->n, at, ctx->out);
    }
    return 0;
}

/* JSON \u escapes of a prefix character ("\u0070", "\u002D"; the 'u' in either case, as the caseless
 * literals had it), found apart from Hyperscan: thirteen more literals there would push it onto an
 * engine half as fast, and one "\u00" literal would cost a callback at every escape of Latin-1 text
 * in JSON. Each is noted where its literal would have ended, for find() to look back from. */
/* What a backslash, '&', '=' or a zlib header's second byte at data[i] may start: a JSON \u00XX escape, an HTML
 * reference (&#N; or &#xH;) or a quoted-printable escape (=XX) of a prefix character (noted where it ends,
 * for find() to look back from), a soft line break after a prefix character (the same), or a zlib stream
 * (0x78 then 0x01, 0x5e, 0x9c or 0xda: a carving candidate). */
static void cands_push_zlib(size_t at);
static inline void escape_at(const uint8_t *data, size_t n, size_t i, Posv *esc) {
    const uint8_t *p = data + i;
    size_t left = n - i;
    switch (p[0]) {
    case '\\':
        if (left < 6 || (p[1] | 0x20) != 'u' || p[2] != '0' || p[3] != '0' || !is_hex(p[4]) || !is_hex(p[5])) return;
        if (PREFIX_CHAR[hexval(p[4]) << 4 | hexval(p[5])]) posv_push(esc, i + 6);
        return;
    case '&': {
        if (left < 4 || p[1] != '#') return;
        int hx = p[2] == 'x' || p[2] == 'X';
        size_t j = 2 + (size_t)hx, stop = j + (hx ? 6 : 7);
        uint32_t v = 0;
        while (j < left && j < stop && (hx ? is_hex(p[j]) : (p[j] >= '0' && p[j] <= '9')))
            v = v * (hx ? 16 : 10) + (uint32_t)(hx ? hexval(p[j]) : p[j] - '0'), j++;
        if (j > 2 + (size_t)hx && j < left && p[j] == ';' && v < 128 && PREFIX_CHAR[v]) posv_push(esc, i + j + 1);
        return;
    }
    case '=':
        if (left >= 3 && is_hex(p[1]) && is_hex(p[2])) { if (PREFIX_CHAR[hexval(p[1]) << 4 | hexval(p[2])]) posv_push(esc, i + 3); }
        else if (i > 0 && PREFIX_CHAR[data[i - 1]] && left >= 2 && (p[1] == '\n' || (p[1] == '\r' && left >= 3 && p[2] == '\n')))
            posv_push(esc, i + (p[1] == '\n' ? 2 : 3));
        return;
    default:
        if (i > 0 && data[i - 1] == 0x78) cands_push_zlib(i - 1);
        return;
    }
}

/* Every such byte, one at a time: the fallback where AVX2 is missing (and PPSCAN_ISA=sse2). */
static void find_json_escapes_memchr(const uint8_t *data, size_t n, Posv *esc) {
    for (size_t i = 0; i < n; i++) if (ESCAPE_BYTE[data[i]]) escape_at(data, n, i, esc);
}

/* The same with the bytes found 64 at a time and no call per byte: JSON has a backslash every few words
 * (memchr's call per backslash made such text scan at half the speed). */
__attribute__((target("avx2,bmi"))) static void find_json_escapes_avx2(const uint8_t *data, size_t n, Posv *esc) {
    const __m256i b0 = _mm256_set1_epi8('\\'), b1 = _mm256_set1_epi8('&'), b2 = _mm256_set1_epi8('='),
                  z0 = _mm256_set1_epi8(0x01), z1 = _mm256_set1_epi8(0x5e), z2 = _mm256_set1_epi8((char)0x9c),
                  z3 = _mm256_set1_epi8((char)0xda);
    size_t block = 0;
    for (; n - block >= 64; block += 64) {
        uint64_t bits = 0;
        for (int half = 0; half < 2; half++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(data + block + 32 * half));
            __m256i m = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(v, b0), _mm256_cmpeq_epi8(v, b1)),
                                        _mm256_or_si256(_mm256_cmpeq_epi8(v, b2), _mm256_cmpeq_epi8(v, z0)));
            m = _mm256_or_si256(m, _mm256_or_si256(_mm256_cmpeq_epi8(v, z1), _mm256_or_si256(_mm256_cmpeq_epi8(v, z2), _mm256_cmpeq_epi8(v, z3))));
            bits |= (uint64_t)(uint32_t)_mm256_movemask_epi8(m) << (32 * half);
        }
        for (; bits; bits &= bits - 1) escape_at(data, n, block + (size_t)__builtin_ctzll(bits), esc);
    }
    for (size_t i = block; i < n; i++) if (ESCAPE_BYTE[data[i]]) escape_at(data, n, i, esc);
}

static void (*find_json_escapes)(const uint8_t *data, size_t n, Posv *esc) = find_json_escapes_memchr;

/* ---- base64 anchors cut by line breaks ----
 * Hyperscan looks for the base64 anchors as plain literals (a pattern allowing breaks between every
 * two characters has no literal longer than one byte to start from, and cost a third of the whole
 * scan). An occurrence with breaks inside is found here instead: each run of breaks with a base64
 * character on either side is tried as the first break inside an anchor. SPLIT_PAIRS says which
 * (character before, character after) pairs an anchor has at some cut; a run whose neighbours are
 * no such pair (nearly all of them in text) costs a table look-up. */
/* Class tables for find_wrapped: bit h of BEFORE_LO[c & 15] says whether the ASCII character
 * (h << 4 | (c & 15)) stands just before a cut of some anchor, AFTER_LO just after one. */
static uint8_t BEFORE_LO[16], AFTER_LO[16];
static const uint8_t HI_BIT[16] = {1, 2, 4, 8, 16, 32, 64, 128};
/* For the VBMI variant: the characters before a cut are put in 8 groups (bit g of BEFORE_GROUPS[c]);
 * bit g of AFTER_GROUPS[c] says that c follows some character of group g at a cut. */
static uint8_t BEFORE_GROUPS[128], AFTER_GROUPS[128];

typedef struct { uint16_t pair; uint8_t anchor, cut; } Split;
static uint64_t SPLIT_PAIRS[65536 / 64];
static Split splits[128 * 32];
static unsigned n_splits;

static int split_cmp(const void *x, const void *y) {
    const Split *a = x, *b = y;
    if (a->pair != b->pair) return a->pair < b->pair ? -1 : 1;
    return a->anchor != b->anchor ? (a->anchor < b->anchor ? -1 : 1) : (a->cut > b->cut) - (a->cut < b->cut);
}

/* Put the characters that stand before a cut in 8 groups, greedily (most successors first, each in
 * the group that grows |before| x |after| least), so that few other pairs share a group. */
static void group_splits(void) {
    uint8_t follows[128][128] = {{0}}, group_after[8][128] = {{0}};
    int count[128] = {0}, members[8] = {0}, afters[8] = {0}, order[128], n_order = 0;
    for (unsigned s = 0; s < n_splits; s++) {
        unsigned before = splits[s].pair >> 8, after = splits[s].pair & 255;
        if (!follows[before][after]) { follows[before][after] = 1; count[before]++; }
    }
    for (int c = 0; c < 128; c++) if (count[c]) order[n_order++] = c;
    for (int i = 1; i < n_order; i++)
        for (int j = i; j > 0 && count[order[j]] > count[order[j - 1]]; j--) { int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t; }
    for (int i = 0; i < n_order; i++) {
        int c = order[i], best = 0, best_cost = INT_MAX;
        for (int g = 0; g < 8; g++) {
            int grown = afters[g];
            for (int a = 0; a < 128; a++) grown += follows[c][a] && !group_after[g][a];
            int cost = (members[g] + 1) * grown - members[g] * afters[g];
            if (cost < best_cost) { best_cost = cost; best = g; }
        }
        members[best]++;
        BEFORE_GROUPS[c] |= (uint8_t)(1 << best);
        for (int a = 0; a < 128; a++)
            if (follows[c][a] && !group_after[best][a]) { group_after[best][a] = 1; afters[best]++; AFTER_GROUPS[a] |= (uint8_t)(1 << best); }
    }
}

static void build_splits(void) {
    for (unsigned i = 0; i < n_anchors; i++) {
        if (anchors[i].kind != KIND_B64) continue;
        for (unsigned cut = 1; cut < anchors[i].len; cut++) {
            unsigned pair = (uint8_t)anchors[i].lit[cut - 1] << 8 | (uint8_t)anchors[i].lit[cut];
            SPLIT_PAIRS[pair >> 6] |= (uint64_t)1 << (pair & 63);
            splits[n_splits++] = (Split){(uint16_t)pair, (uint8_t)i, (uint8_t)cut};
            uint8_t before = (uint8_t)anchors[i].lit[cut - 1], after = (uint8_t)anchors[i].lit[cut];
            BEFORE_LO[before & 15] |= (uint8_t)(1 << (before >> 4));
            AFTER_LO[after & 15] |= (uint8_t)(1 << (after >> 4));
        }
    }
    qsort(splits, n_splits, sizeof *splits, split_cmp);
    group_splits();
    pick_find_wrapped();
}

/* The run of breaks data[b0..b1) with data[b0 - 1] and data[b1] not breaks: every anchor occurrence
 * whose first break inside is this run. */
static void wrapped_at(const ScanCtx *ctx, size_t b0, size_t b1, unsigned pair) {
    const uint8_t *data = ctx->data;
    size_t lo = 0, hi = n_splits;
    while (lo < hi) { size_t mid = (lo + hi) / 2; if (splits[mid].pair < pair) lo = mid + 1; else hi = mid; }
    for (size_t s = lo; s < n_splits && splits[s].pair == pair; s++) {
        const Anchor *a = &anchors[splits[s].anchor];
        size_t cut = splits[s].cut;
        if (b0 < cut || memcmp(data + b0 - cut, a->lit, cut)) continue;
        size_t i = b1, k = cut;
        while (k < a->len && i < ctx->n) {
            if (is_break(data[i])) { i++; continue; }
            if (data[i] != (uint8_t)a->lit[k]) break;
            i++; k++;
        }
        if (k == a->len) b64_occurrence(ctx, a, b0 - cut, i);
    }
}

/* The wrapped pass runs in two steps so that the vector loop makes no call (which would spill its
 * constants) and takes no branch per break (text has one a line, at no predictable place): each
 * 64-byte block becomes a mask of candidates whose positions are appended to a buffer, which
 * check_candidates() then goes through exactly. A candidate is the first break of a run whose
 * neighbours may be a pair of SPLIT_PAIRS, or whose run goes on (the pair is then looked up after
 * the run). How closely "may be" is tested depends on the instruction set: not at all (SSE2), each
 * neighbour in its class (AVX2, AVX-512BW; 28% of the breaks in text pass), or the two neighbours'
 * groups (AVX-512 VBMI; 4% pass). */
#define CANDIDATES 4096

/* Check the candidates at[0..k); 0 once a run of breaks reaches the end of the data. */
static int check_candidates(const ScanCtx *ctx, const uint32_t *at, size_t k) {
    const uint8_t *data = ctx->data;
    for (size_t c = 0; c < k; c++) {
        size_t i = at[c], b1 = i + 1;
        while (b1 < ctx->n && is_break(data[b1])) b1++;
        if (b1 >= ctx->n) return 0;
        unsigned pair = data[i - 1] << 8 | data[b1];
        if (SPLIT_PAIRS[pair >> 6] >> (pair & 63) & 1) wrapped_at(ctx, i, b1, pair);
    }
    return 1;
}

/* Append the positions of cand's bits (block + bit) to at[*k]. Nearly every block has at most one:
 * one is written unconditionally and only the others loop. */
__attribute__((always_inline)) static inline void append_candidates(uint64_t cand, uint32_t block, uint32_t *at, size_t *k) {
    at[*k] = block + (uint32_t)__builtin_ctzll(cand | (uint64_t)1 << 63);
    uint64_t rest = cand & (cand - 1);
    size_t more = *k + 1;
    while (rest) { at[more++] = block + (uint32_t)__builtin_ctzll(rest); rest &= rest - 1; }
    *k += (size_t)__builtin_popcountll(cand);
}

/* The candidates of a block from its breaks and class bits; the carries bring the last byte of the
 * block before (its successor, the next block's first byte, is not known: it is let through). */
__attribute__((always_inline)) static inline uint64_t class_candidates(uint64_t brk, uint64_t before, uint64_t after, uint64_t *carry_brk,
                                                                     uint64_t *carry_before) {
    uint64_t cand = brk & ~(brk << 1 | *carry_brk) & (before << 1 | *carry_before) & (after >> 1 | brk >> 1 | (uint64_t)1 << 63);
    *carry_brk = brk >> 63;
    *carry_before = before >> 63;
    return cand;
}

/* The loop every variant shares; its arguments set `cand` for the block at data[block]. */
#define WRAPPED_LOOP(...)                                                                           \
    uint32_t at[CANDIDATES + 64];                                                                   \
    size_t k = 0;                                                                                   \
    uint64_t carry_brk = 0, carry_before = 0;                                                       \
    (void)carry_brk; (void)carry_before;                                                            \
    for (size_t block = 0; block < ctx->n; block += 64) {                                           \
        uint64_t cand;                                                                              \
        __VA_ARGS__;                                                                                \
        append_candidates(cand, (uint32_t)block, at, &k);                                           \
        if (k >= CANDIDATES) { if (!check_candidates(ctx, at, k)) return; k = 0; }                  \
    }                                                                                               \
    check_candidates(ctx, at, k);

/* Breaks only, 16 bytes at a time (every x86-64 has SSE2): every first break of a run is a candidate. */
static void find_wrapped_sse2(const ScanCtx *ctx) {
    const __m128i nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    const uint8_t *data = ctx->data;
    WRAPPED_LOOP(
        uint64_t brk = 0;
        if (ctx->n - block >= 64) {
            for (int q = 0; q < 4; q++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(data + block + 16 * q));
                brk |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, cr))) << (16 * q);
            }
        } else {
            for (size_t i = block; i < ctx->n; i++) if (is_break(data[i])) brk |= (uint64_t)1 << (i - block);
        }
        cand = class_candidates(brk, ~(uint64_t)0, ~(uint64_t)0, &carry_brk, &carry_before))
}

/* Class membership by two nibble look-ups (pshufb), 32 bytes at a time. */
typedef struct { __m256i low, zero, nl, cr, before_lo, after_lo, hi_bit; } Avx2Consts;

__attribute__((target("avx2,popcnt,bmi"), always_inline)) static inline void masks_avx2(const Avx2Consts *c, const uint8_t *p, uint32_t *brk,
                                                                                      uint32_t *before, uint32_t *after) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    __m256i hi = _mm256_shuffle_epi8(c->hi_bit, _mm256_and_si256(_mm256_srli_epi16(v, 4), c->low));
    __m256i lo = _mm256_and_si256(v, c->low);
    *brk = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(v, c->nl), _mm256_cmpeq_epi8(v, c->cr)));
    *before = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(c->before_lo, lo), hi), c->zero));
    *after = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(c->after_lo, lo), hi), c->zero));
}

__attribute__((target("avx2,popcnt,bmi"))) static void find_wrapped_avx2(const ScanCtx *ctx) {
    const Avx2Consts c = {
        _mm256_set1_epi8(15), _mm256_setzero_si256(), _mm256_set1_epi8('\n'), _mm256_set1_epi8('\r'),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)BEFORE_LO)),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)AFTER_LO)),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)HI_BIT)),
    };
    const uint8_t *data = ctx->data;
    uint8_t tail[64];
    WRAPPED_LOOP(
        const uint8_t *p = data + block;
        if (ctx->n - block < 64) { memset(tail, 0, sizeof tail); memcpy(tail, p, ctx->n - block); p = tail; }
        uint32_t b0, b1, f0, f1, a0, a1;
        masks_avx2(&c, p, &b0, &f0, &a0);
        masks_avx2(&c, p + 32, &b1, &f1, &a1);
        cand = class_candidates((uint64_t)b1 << 32 | b0, (uint64_t)f1 << 32 | f0, (uint64_t)a1 << 32 | a0, &carry_brk, &carry_before))
}

/* The same, 64 bytes at a time into mask registers (bytes past the end load as zero). */
__attribute__((target("avx512bw,popcnt,bmi"))) static void find_wrapped_avx512bw(const ScanCtx *ctx) {
    const __m512i nl = _mm512_set1_epi8('\n'), cr = _mm512_set1_epi8('\r'), low = _mm512_set1_epi8(15);
    const __m512i before_lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)BEFORE_LO));
    const __m512i after_lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)AFTER_LO));
    const __m512i hi_bit = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)HI_BIT));
    const uint8_t *data = ctx->data;
    WRAPPED_LOOP(
        size_t len = ctx->n - block;
        __m512i v = _mm512_maskz_loadu_epi8(len >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << len) - 1, data + block);
        __m512i hi = _mm512_shuffle_epi8(hi_bit, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        __m512i lo = _mm512_and_si512(v, low);
        cand = class_candidates(_mm512_cmpeq_epi8_mask(v, nl) | _mm512_cmpeq_epi8_mask(v, cr),
                                _mm512_test_epi8_mask(_mm512_shuffle_epi8(before_lo, lo), hi),
                                _mm512_test_epi8_mask(_mm512_shuffle_epi8(after_lo, lo), hi), &carry_brk, &carry_before))
}

/* With VBMI a byte indexes a 128-entry table in one instruction (vpermi2b): each byte's predecessor
 * and successor (loaded one byte off; masked loads touch nothing outside the data) get their group
 * bits, and a break whose two neighbours share a group is a candidate. Bytes >= 128 alias in the
 * tables: a few more candidates, which the exact check drops. */
__attribute__((target("avx512bw,avx512vbmi,popcnt,bmi"))) static void find_wrapped_vbmi(const ScanCtx *ctx) {
    const __m512i nl = _mm512_set1_epi8('\n'), cr = _mm512_set1_epi8('\r');
    const __m512i before_lo = _mm512_loadu_si512(BEFORE_GROUPS), before_hi = _mm512_loadu_si512(BEFORE_GROUPS + 64);
    const __m512i after_lo = _mm512_loadu_si512(AFTER_GROUPS), after_hi = _mm512_loadu_si512(AFTER_GROUPS + 64);
    const uint8_t *data = ctx->data;
    const size_t n = ctx->n;
    WRAPPED_LOOP(
        __m512i v, prev, next;
        if (block && n - block > 64) {
            /* Every block but the first and the last: plain loads. */
            v = _mm512_loadu_si512(data + block);
            prev = _mm512_loadu_si512(data + block - 1);
            next = _mm512_loadu_si512(data + block + 1);
        } else {
            size_t len = n - block;
            __mmask64 in = len >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << len) - 1;
            v = _mm512_maskz_loadu_epi8(in, data + block);
            /* The first block's first byte has no predecessor: its lane is masked off, never read. */
            prev = _mm512_maskz_loadu_epi8(block ? in : in & ~(__mmask64)1, (const void *)((uintptr_t)data + block - 1));
            next = _mm512_maskz_loadu_epi8(in >> 1 | (len > 64 ? (__mmask64)1 << 63 : 0), data + block + 1);
        }
        uint64_t brk = _mm512_cmpeq_epi8_mask(v, nl) | _mm512_cmpeq_epi8_mask(v, cr);
        uint64_t share = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(before_lo, prev, before_hi),
                                               _mm512_permutex2var_epi8(after_lo, next, after_hi));
        /* A break after a break is not the first of its run (nor is the data's first byte); one
         * before a break passes (its pair is looked up after the run), as does the last byte's (its
         * successor is in the next block). */
        uint64_t brk_prev = brk << 1 | carry_brk | (block ? 0 : 1);
        carry_brk = brk >> 63;
        cand = brk & ~brk_prev & (share | brk >> 1 | (uint64_t)1 << 63))
}

static void (*find_wrapped)(const ScanCtx *ctx) = find_wrapped_sse2;

static void pick_find_wrapped(void) {
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2"), bw = __builtin_cpu_supports("avx512bw");
    int vbmi = bw && __builtin_cpu_supports("avx512vbmi");
    /* PPSCAN_ISA picks a narrower variant (tests run each; they must find the same). */
    const char *isa = getenv("PPSCAN_ISA");
    if (isa && !strcmp(isa, "sse2")) avx2 = bw = vbmi = 0;
    if (isa && !strcmp(isa, "avx2")) bw = vbmi = 0;
    if (isa && !strcmp(isa, "avx512bw")) vbmi = 0;
    find_wrapped = vbmi ? find_wrapped_vbmi : bw ? find_wrapped_avx512bw : avx2 ? find_wrapped_avx2 : find_wrapped_sse2;
    find_json_escapes = avx2 ? find_json_escapes_avx2 : find_json_escapes_memchr;
}

/* detect.find: every hit in data, sorted by (offset, encoding, token), duplicates dropped. */
static void find(const uint8_t *data, size_t n, Hits *out, hs_scratch_t *scr) {
    static __thread Posv esc;
    out->n = 0;
    esc.n = 0;
    magic_found.n = 0;
    ScanCtx ctx = {data, n, out, memchr(data, '\n', n) || memchr(data, '\r', n), &esc};
    if (n > UINT_MAX) { fprintf(stderr, "ppscan: window too large\n"); exit(70); }
    if (hs_scan(db, (const char *)data, (unsigned)n, 0, scr, on_match, &ctx) != HS_SUCCESS) {
        fprintf(stderr, "ppscan: hyperscan scan failed\n");
        exit(70);
    }
    if (ctx.has_breaks) find_wrapped(&ctx);
    find_json_escapes(data, n, &esc);
    if (esc.n) {
        /* A token with an escaped prefix character starts at most 9 escapes (54 bytes) before it. Every start
         * is tried, one inside an escape too: "id=0123abcd%2D..." holds a token at the "0" that "=01" would eat
         * (detect._escaped_tokens looks from inside escapes the same way). */
        qsort(esc.v, esc.n, sizeof *esc.v, cmp_size);
        size_t tried_to = 0;
        for (size_t i = 0; i < esc.n; i++) {
            size_t lo = esc.v[i] > 80 ? esc.v[i] - 80 : 0;
            if (lo < tried_to) lo = tried_to;
            for (size_t s = lo; s < esc.v[i]; s++)
                if (lc(data[s]) == PREFIX[0] || data[s] == '%' || data[s] == '\\' || data[s] == '&' || data[s] == '=') verify_escaped(data, n, s, out);
            if (esc.v[i] > tried_to) tried_to = esc.v[i];
        }
    }
    if (out->n > 1) {
        qsort(out->v, out->n, sizeof(Hit), hit_cmp);
        size_t k = 1;
        for (size_t i = 1; i < out->n; i++)
            if (hit_cmp(&out->v[i], &out->v[k - 1])) out->v[k++] = out->v[i];
        out->n = k;
    }
}

/* ---- output ---- */
static char *outbuf;
static size_t outlen, outcap;

static void put(const char *s, size_t n) {
    if (outlen + n > outcap) {
        outcap = (outlen + n) * 2 + 4096;
        outbuf = realloc(outbuf, outcap);
        if (!outbuf) { perror("ppscan"); exit(70); }
    }
    memcpy(outbuf + outlen, s, n);
    outlen += n;
}
static void puts_(const char *s) { put(s, strlen(s)); }
static void flush_out(void) {
    size_t done = 0;
    while (done < outlen) {
        ssize_t w = write(1, outbuf + done, outlen - done);
        if (w < 0) { if (errno == EINTR) continue; exit(74); }
        done += (size_t)w;
    }
    outlen = 0;
}

/* JSON string as Python's json.dumps (ensure_ascii) writes a str decoded with surrogateescape. */
static void put_u(unsigned u) { char b[8]; snprintf(b, sizeof b, "\\u%04x", u); put(b, 6); }
static void put_json_str(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    put("\"", 1);
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        if (c < 0x80) {
            switch (c) {
            case '"': put("\\\"", 2); break;
            case '\\': put("\\\\", 2); break;
            case '\n': put("\\n", 2); break;
            case '\r': put("\\r", 2); break;
            case '\t': put("\\t", 2); break;
            case '\b': put("\\b", 2); break;
            case '\f': put("\\f", 2); break;
            default: if (c < 0x20 || c == 0x7f) put_u(c); else put((const char *)&c, 1);
            }
            i++;
            continue;
        }
        unsigned cp = 0, need = 0, min = 0;
        if (c >= 0xc2 && c <= 0xdf) { cp = c & 0x1f; need = 1; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { cp = c & 0x0f; need = 2; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { cp = c & 0x07; need = 3; min = 0x10000; }
        int ok = need > 0 && i + need < n + 1 && i + need <= n - 0;
        if (ok && i + need >= n + 1) ok = 0;
        for (unsigned k = 1; ok && k <= need; k++) {
            if (i + k >= n || (p[i + k] & 0xc0) != 0x80) ok = 0; else cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if (ok && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) ok = 0;
        if (!ok) { put_u(0xdc00 + c); i++; continue; }
        if (cp >= 0x10000) { cp -= 0x10000; put_u(0xd800 + (cp >> 10)); put_u(0xdc00 + (cp & 0x3ff)); }
        else put_u(cp);
        i += need + 1;
    }
    put("\"", 1);
}

/* ---- completeness ---- */
/* The walk records, in order, what it found in names and link targets, what it noted, and which
 * files to read; worker threads read the files; the record is then replayed in walk order, so the
 * output is what one thread would print. */
static uint64_t n_files, n_bytes, n_truncated;
static char **problems;
static size_t n_problems, cap_problems;
static uint64_t max_file_bytes = DEFAULT_MAX_FILE_BYTES;

enum { EV_NOTE, EV_FOUND, EV_FILE };
typedef struct {
    int kind;
    char *text; /* EV_NOTE: the problem; EV_FOUND: where; EV_FILE: the path */
    Hit hit;
    Hits file_hits;
    int open_err, not_regular, read_err, truncated;
    uint64_t bytes;
    /* What was inside the file's compressed streams and archive members. */
    Hits inner;
    char **inner_where, **inner_notes;
    size_t n_inner_where, n_inner_notes;
    uint64_t inner_truncated;
} Event;
static Event *events;
static size_t n_events, cap_events;

static Event *event_push(int kind, char *text) {
    if (n_events == cap_events) {
        cap_events = cap_events ? cap_events * 2 : 1024;
        events = realloc(events, cap_events * sizeof *events);
        if (!events) { perror("ppscan"); exit(70); }
    }
    Event *e = &events[n_events++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->text = text;
    return e;
}

static void problem_push(char *s) {
    if (n_problems == cap_problems) { cap_problems = cap_problems ? cap_problems * 2 : 64; problems = realloc(problems, cap_problems * sizeof *problems); }
    problems[n_problems++] = s;
}

static char *problem_text(const char *path, const char *reason) {
    size_t len = strlen(path) + 2 + strlen(reason) + 1;
    char *s = malloc(len);
    if (!s) { perror("ppscan"); exit(70); }
    snprintf(s, len, "%s: %s", path, reason);
    return s;
}

static void note(const char *path, const char *reason) { event_push(EV_NOTE, problem_text(path, reason)); }

static const struct { int code; const char *name; } ERRNAMES[] = {
    {EPERM, "EPERM"}, {ENOENT, "ENOENT"}, {ESRCH, "ESRCH"}, {EINTR, "EINTR"}, {EIO, "EIO"}, {ENXIO, "ENXIO"},
    {E2BIG, "E2BIG"}, {EBADF, "EBADF"}, {EAGAIN, "EAGAIN"}, {ENOMEM, "ENOMEM"}, {EACCES, "EACCES"}, {EFAULT, "EFAULT"},
    {EBUSY, "EBUSY"}, {EEXIST, "EEXIST"}, {EXDEV, "EXDEV"}, {ENODEV, "ENODEV"}, {ENOTDIR, "ENOTDIR"}, {EISDIR, "EISDIR"},
    {EINVAL, "EINVAL"}, {ENFILE, "ENFILE"}, {EMFILE, "EMFILE"}, {ETXTBSY, "ETXTBSY"}, {EFBIG, "EFBIG"},
    {ENOSPC, "ENOSPC"}, {ESPIPE, "ESPIPE"}, {EROFS, "EROFS"}, {ENAMETOOLONG, "ENAMETOOLONG"}, {ELOOP, "ELOOP"},
    {EOVERFLOW, "EOVERFLOW"}, {ENOTSUP, "ENOTSUP"}, {ESTALE, "ESTALE"}, {ENOTCONN, "ENOTCONN"}, {ENOLINK, "ENOLINK"},
    {ENOMEDIUM, "ENOMEDIUM"},
};

/* detect._reason */
static char *errno_text(const char *path, int err) {
    const char *code = NULL;
    for (size_t i = 0; i < sizeof ERRNAMES / sizeof *ERRNAMES; i++) if (ERRNAMES[i].code == err) { code = ERRNAMES[i].name; break; }
    const char *text = err == ENOENT ? "vanished before it could be read"
                     : err == ESRCH ? "the process exited before it could be read"
                     : (err == EACCES || err == EPERM) ? "permission denied" : strerror(err);
    char buf[512];
    if (code) snprintf(buf, sizeof buf, "%s [%s]", text, code); else snprintf(buf, sizeof buf, "%s", text);
    return problem_text(path, buf);
}
static void note_errno(const char *path, int err) { event_push(EV_NOTE, errno_text(path, err)); }

/* ---- hits of the whole scan ---- */
typedef struct { Hit hit; const char *where; } Found;
static Found *found;
static size_t n_found, cap_found;
static void found_add(const Hit *h, const char *where) {
    if (n_found == cap_found) { cap_found = cap_found ? cap_found * 2 : 64; found = realloc(found, cap_found * sizeof *found); if (!found) exit(70); }
    found[n_found].hit = *h;
    found[n_found].where = where;
    n_found++;
}

static Hits name_hits;

static void scan_bytes_named(const uint8_t *data, size_t n, const char *where, const char *suffix) {
    find(data, n, &name_hits, scratch);
    for (size_t i = 0; i < name_hits.n; i++) {
        size_t len = strlen(where) + strlen(suffix) + 1;
        char *w = malloc(len);
        snprintf(w, len, "%s%s", where, suffix);
        event_push(EV_FOUND, w)->hit = name_hits.v[i];
    }
}

/* A worker thread's own scratch and buffers. The decompression buffers are kept from file to file
 * (one per nesting depth; see out_take): allocating them afresh cost a page fault every 4 KiB. */
#define MAX_DEPTH 4
#define KEEP_BUFFER_MAX ((size_t)64 << 20)
typedef struct { uint8_t *p; size_t cap; } Spare;
typedef struct {
    hs_scratch_t *scratch;
    Hits window;
    uint8_t *buf;
    size_t cap;
    Spare spare[MAX_DEPTH + 2], packed;
    struct libdeflate_decompressor *deflate;
    /* The current file's carving (carve()): candidates tried, bytes decoded, whether a bound stopped it. */
    uint64_t carve_attempts, carve_decoded;
    int carve_stopped;
    uint64_t buf_from;  /* the file offset of buf[0] */
    size_t held;        /* bytes of the file in buf */
    Cands file_cands;  /* the magics the windows of the current file held, at file offsets */
    const uint8_t *mapped;  /* the current file, mapped whole (scan_mapped), or NULL */
    size_t mapped_n;
} Worker;

/* One window of a file (at file offset base): its hits and the stream magics it holds, those in
 * [reported_to, horizon) only (the overlap with the next window is reported there). */
static void report_window(Worker *w, Event *ev, const uint8_t *window, size_t wlen, uint64_t base, uint64_t reported_to,
                          uint64_t horizon) {
    find(window, wlen, &w->window, w->scratch);
    for (size_t i = 0; i < w->window.n; i++) {
        uint64_t off = base + w->window.v[i].offset;
        if (reported_to <= off && off < horizon) {
            Hit *h = &w->window.v[i];
            hits_push(&ev->file_hits, (const uint8_t *)h->token, strlen(h->token), h->enc, off);
        }
    }
    for (size_t i = 0; i < magic_found.n; i++) {
        uint64_t off = base + magic_found.v[i].at;
        if (reported_to <= off && off < horizon) cands_push(&w->file_cands, (size_t)off, magic_found.v[i].fmt, magic_found.v[i].b64);
    }
}

/* detect._scan_reader over a descriptor into ev; returns 0, or the errno that stopped it. */
/* The windows are slices of w->buf, which keeps the whole file while it fits in KEEP_BUFFER_MAX (w->held
 * bytes from file offset w->buf_from = 0), so that carving it afterwards reads nothing twice; past that,
 * what every later window leaves behind is dropped. */
static int scan_fd(Worker *w, int fd, Event *ev) {
    size_t carry = 0;
    uint64_t base = 0, reported_to = 0, total = 0;
    w->buf_from = 0;
    w->held = 0;
    for (;;) {
        size_t want;
        ssize_t got;
        if (total >= max_file_bytes) {
            uint8_t one;
            do got = read(fd, &one, 1); while (got < 0 && errno == EINTR);
            if (got < 0) return errno;
            ev->bytes += (uint64_t)got;
            ev->truncated = got > 0;
            got = 0;
        } else {
            want = CHUNK_SIZE;
            if (max_file_bytes - total < want) want = (size_t)(max_file_bytes - total);
            size_t skip = (size_t)(base - w->buf_from);
            if (w->cap < skip + carry + want) {
                size_t grown = w->cap * 2 > skip + carry + want ? w->cap * 2 : skip + carry + want;
                w->cap = grown; w->buf = realloc(w->buf, w->cap); if (!w->buf) exit(70);
            }
            do got = read(fd, w->buf + skip + carry, want); while (got < 0 && errno == EINTR);
            if (got < 0) return errno;
            ev->bytes += (uint64_t)got;
        }
        total += (uint64_t)got;
        int at_end = got == 0;
        size_t wlen = carry + (size_t)got;
        uint64_t end = base + wlen;
        uint64_t horizon = at_end ? end : (end >= OVERLAP ? end - OVERLAP : 0);
        const uint8_t *window = w->buf + (size_t)(base - w->buf_from);
        w->held = (size_t)(base - w->buf_from) + wlen;
        if (horizon > reported_to) {
            report_window(w, ev, window, wlen, base, reported_to, horizon);
            reported_to = horizon;
        }
        if (at_end) return 0;
        uint64_t keep_from = reported_to >= BACKUP && reported_to - BACKUP > base ? reported_to - BACKUP : base;
        size_t drop = (size_t)(keep_from - base);
        if (w->held + CHUNK_SIZE > KEEP_BUFFER_MAX) {
            memmove(w->buf, window + drop, wlen - drop);
            w->buf_from = keep_from;
        }
        carry = wlen - drop;
        base = keep_from;
    }
}

/* scan_fd's windows over a file mapped whole (read_event: a regular file of MMAP_MIN bytes or more that fits
 * the bounds): the same windows, hits and magic candidates, with no copy out of the page cache (the copy
 * was a third of the probe's time). The mapping is the whole file for carving too (w->mapped). */
#define MMAP_MIN ((size_t)256 << 10)
static void scan_mapped(Worker *w, const uint8_t *map, size_t size, Event *ev) {
    size_t carry = 0, pos = 0;
    uint64_t base = 0, reported_to = 0;
    for (;;) {
        size_t got = size - pos < CHUNK_SIZE ? size - pos : CHUNK_SIZE;
        pos += got;
        ev->bytes += (uint64_t)got;
        int at_end = got == 0;
        size_t wlen = carry + got;
        uint64_t end = base + wlen;
        uint64_t horizon = at_end ? end : (end >= OVERLAP ? end - OVERLAP : 0);
        const uint8_t *window = map + base;
        if (horizon > reported_to) {
            report_window(w, ev, window, wlen, base, reported_to, horizon);
            reported_to = horizon;
        }
        if (at_end) return;
        uint64_t keep_from = reported_to >= BACKUP && reported_to - BACKUP > base ? reported_to - BACKUP : base;
        carry = wlen - (size_t)(keep_from - base);
        base = keep_from;
    }
}

/* A mapped file that shrinks while it is read faults (SIGBUS) past its new end: the thread that was reading it
 * jumps back to read_event, which reports the file as not read whole. */
static __thread sigjmp_buf *bus_env;
static void on_sigbus(int sig) {
    if (bus_env) siglongjmp(*bus_env, 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- compressed streams and archive members (beyond detect.py) ---- */
#define MAX_DEPTH_TEXT "5"  /* streams and members inside a file: depth 0 to MAX_DEPTH */

static void *xrealloc(void *p, size_t n) { p = realloc(p, n); if (!p) { perror("ppscan"); exit(70); } return p; }

static char *label(const char *where, const char *kind, const char *name, size_t name_len) {
    size_t len = strlen(where) + strlen(kind) + name_len + 8;
    char *s = xrealloc(NULL, len);
    if (name) snprintf(s, len, "%s (%s %.*s)", where, kind, (int)name_len, name);
    else snprintf(s, len, "%s (%s)", where, kind);
    return s;
}

static void inner_note(Event *ev, char *text) {
    ev->inner_notes = xrealloc(ev->inner_notes, (ev->n_inner_notes + 1) * sizeof *ev->inner_notes);
    ev->inner_notes[ev->n_inner_notes++] = text;
}

/* Decompressed bytes, at most max_file_bytes (*cut says there was more); NULL if nothing came out. */
typedef struct { uint8_t *p; size_t n, cap; int cut; uint64_t limit; } Out;
static int out_room(Out *o) {
    if (o->n >= o->limit) { o->cut = 1; return 0; }
    if (o->cap - o->n < 65536) { o->cap = o->cap ? o->cap * 2 : 1 << 20; o->p = xrealloc(o->p, o->cap); }
    return 1;
}
static size_t out_avail(Out *o) { size_t room = o->cap - o->n; uint64_t left = o->limit - o->n; return left < room ? (size_t)left : room; }

static void inflate_all(const uint8_t *data, size_t n, int bits, Out *o, size_t *used) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, bits) != Z_OK) return;
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)(n > UINT_MAX ? UINT_MAX : n);
    for (;;) {
        if (!out_room(o)) break;
        z.next_out = o->p + o->n;
        z.avail_out = (uInt)out_avail(o);
        size_t before = z.avail_out;
        int rc = inflate(&z, Z_NO_FLUSH);
        o->n += before - z.avail_out;
        if (rc == Z_STREAM_END) {
            /* gzip files may hold several members one after another. */
            if (bits > 15 && z.avail_in > 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) { inflateReset(&z); continue; }
            break;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) break;
        if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
        if (rc == Z_BUF_ERROR && z.avail_out != 0) break;
    }
    if (used) *used = (size_t)(z.next_in - data);
    inflateEnd(&z);
}

/* gzip through libdeflate (3.5 times zlib's speed on text) when its result is surely what
 * inflate_all would give: every member whole and valid (libdeflate checks the CRC and length too),
 * all of them together below max_file_bytes (else zlib's loop notes the cut, or stops mid-member),
 * no header CRC (zlib checks it, libdeflate skips it), no reserved flag and method 8 (zlib refuses
 * those). Anything else returns 0 with o emptied, and the caller inflates with zlib from the start. */
static int gunzip_whole(Worker *w, const uint8_t *data, size_t n, Out *o) {
    if (o->limit > KEEP_BUFFER_MAX || o->limit < 2) return 0;
    size_t limit = (size_t)o->limit, at = 0;
    if (!w->deflate && !(w->deflate = libdeflate_alloc_decompressor())) return 0;
    if (o->cap < limit) { free(o->p); o->p = xrealloc(NULL, limit); o->cap = limit; }
    o->n = 0;
    do {
        size_t used, got;
        if (n - at < 18 || data[at + 2] != 8 || (data[at + 3] & 0xe2) || o->n + 1 >= limit ||
            libdeflate_gzip_decompress_ex(w->deflate, data + at, n - at, o->p + o->n, limit - 1 - o->n, &used, &got) != LIBDEFLATE_SUCCESS) {
            o->n = 0;
            return 0;
        }
        o->n += got;
        at += used;
    } while (n - at > 2 && data[at] == 0x1f && data[at + 1] == 0x8b);  /* inflate_all's test for another member */
    return 1;
}

static void unxz(const uint8_t *data, size_t n, Out *o) {
    lzma_stream z = LZMA_STREAM_INIT;
    if (lzma_stream_decoder(&z, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) return;
    z.next_in = data;
    z.avail_in = n;
    lzma_action action = LZMA_RUN;
    for (;;) {
        if (!out_room(o)) break;
        z.next_out = o->p + o->n;
        z.avail_out = out_avail(o);
        size_t before = z.avail_out;
        if (z.avail_in == 0) action = LZMA_FINISH;
        lzma_ret rc = lzma_code(&z, action);
        o->n += before - z.avail_out;
        if (rc != LZMA_OK) break;
    }
    lzma_end(&z);
}

static void unbz2(const uint8_t *data, size_t n, Out *o) {
    bz_stream z;
    memset(&z, 0, sizeof z);
    if (BZ2_bzDecompressInit(&z, 0, 0) != BZ_OK) return;
    z.next_in = (char *)data;
    z.avail_in = (unsigned)(n > UINT_MAX ? UINT_MAX : n);
    for (;;) {
        if (!out_room(o)) break;
        z.next_out = (char *)(o->p + o->n);
        z.avail_out = (unsigned)out_avail(o);
        unsigned before = z.avail_out;
        int rc = BZ2_bzDecompress(&z);
        o->n += before - z.avail_out;
        if (rc != BZ_OK || (z.avail_in == 0 && z.avail_out != 0)) break;
    }
    BZ2_bzDecompressEnd(&z);
}

static void unzstd(const uint8_t *data, size_t n, Out *o) {
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z) return;
    ZSTD_initDStream(z);
    ZSTD_inBuffer in = {data, n, 0};
    for (;;) {
        if (!out_room(o)) break;
        ZSTD_outBuffer out = {o->p + o->n, out_avail(o), 0};
        size_t rc = ZSTD_decompressStream(z, &out, &in);
        o->n += out.pos;
        if (ZSTD_isError(rc) || (out.pos == 0 && in.pos == in.size)) break;
    }
    ZSTD_freeDStream(z);
}

/* An empty Out for depth `depth`, in the buffer the last one at that depth left (if any). */
static Out out_take(Worker *w, int depth) {
    Out o = {0};
    Spare *s = &w->spare[depth];
    o.p = s->p; o.cap = s->cap;
    o.limit = max_file_bytes;
    s->p = NULL; s->cap = 0;
    return o;
}

static void out_give(Worker *w, int depth, Out *o) {
    Spare *s = &w->spare[depth];
    if (!s->p && o->cap <= KEEP_BUFFER_MAX) { s->p = o->p; s->cap = o->cap; } else free(o->p);
    o->p = NULL; o->cap = o->n = 0;
}

static uint64_t octal(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == 0)) i++;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) v = v * 8 + (uint64_t)(p[i] - '0');
    return v;
}

static void scan_inner(Worker *w, Event *ev, const uint8_t *data, size_t n, const char *where, int depth, const Cands *cands);

/* Scan what came out of a stream, as its own data labelled `where`, then look inside it. */
static void scan_decoded(Worker *w, Event *ev, Out *o, char *where, int depth) {
    if (o->n) {
        find(o->p, o->n, &w->window, w->scratch);
        for (size_t i = 0; i < w->window.n; i++) {
            Hit *h = &w->window.v[i];
            hits_push(&ev->inner, (const uint8_t *)h->token, strlen(h->token), h->enc, h->offset);
            ev->inner_where = xrealloc(ev->inner_where, (ev->n_inner_where + 1) * sizeof *ev->inner_where);
            ev->inner_where[ev->n_inner_where++] = where;
        }
    }
    if (o->cut) {
        char buf[200];
        snprintf(buf, sizeof buf, "only the first %llu bytes of the decompressed data were scanned", (unsigned long long)max_file_bytes);
        inner_note(ev, problem_text(where, buf));
        ev->inner_truncated++;
    }
    if (o->n) {
        Cands mine = {0};
        for (size_t i = 0; i < magic_found.n; i++) cands_push(&mine, magic_found.v[i].at, magic_found.v[i].fmt, magic_found.v[i].b64);
        scan_inner(w, ev, o->p, o->n, where, depth + 1, &mine);
        free(mine.v);
    }
    out_give(w, depth, o);
}

static int looks_packed(const uint8_t *h, size_t n);

/* What could not be looked inside (a stream or member past the depth bound, an encrypted member, a zip
 * method not read): a problem and a cut-short count, never a quiet skip. */
static void not_looked_inside(Event *ev, const char *where, const char *why) {
    inner_note(ev, problem_text(where, why));
    ev->inner_truncated++;
}

/* ---- streams carved wherever they start (detect.carve; issue 26) ----
 * Every offset holding a stream's magic, or the base64 of one's first bytes, is tried, in the order of
 * (offset, format name, base64 or not); what comes out is scanned and carved again, MAX_STREAM_DEPTH
 * deep. The work is bounded per stream (max_file_bytes out), per file (MAX_FILE_ATTEMPTS candidates,
 * FILE_DECODED_FACTOR x max_file_bytes out in all) and per scan (MAX_SCAN_ATTEMPTS, MAX_SCAN_DECODED, over
 * every thread): a bound reached is a problem and counts as truncated. */
#define MAX_STREAM_DEPTH 5
#define MAX_FILE_ATTEMPTS 4096
#define FILE_DECODED_FACTOR 4
#define MAX_SCAN_ATTEMPTS (1 << 18)
#define MAX_SCAN_DECODED ((int64_t)1 << 30)
static atomic_llong scan_attempts_left = MAX_SCAN_ATTEMPTS;
static atomic_llong scan_decoded_left = MAX_SCAN_DECODED;

static int cand_cmp(const void *x, const void *y) {
    const Cand *a = x, *b = y;
    if (a->at != b->at) return a->at < b->at ? -1 : 1;
    int c = strcmp(FMT_NAMES[a->fmt], FMT_NAMES[b->fmt]);
    return c ? c : a->b64 - b->b64;
}

static void carve_stop(Worker *w, Event *ev, const char *label, const char *why) {
    not_looked_inside(ev, label, why);
    w->carve_stopped = 1;
}

static uint64_t carve_room(Worker *w) {
    uint64_t room = max_file_bytes, file_left = FILE_DECODED_FACTOR * max_file_bytes;
    file_left = w->carve_decoded < file_left ? file_left - w->carve_decoded : 0;
    long long scan_left = atomic_load(&scan_decoded_left);
    if (file_left < room) room = file_left;
    if (scan_left < 0) scan_left = 0;
    if ((uint64_t)scan_left < room) room = (uint64_t)scan_left;
    return room;
}

static void decode_stream(Worker *w, int fmt, const uint8_t *data, size_t n, Out *o) {
    if (fmt == FMT_GZIP) { if (!gunzip_whole(w, data, n, o)) inflate_all(data, n, 15 + 16, o, NULL); }
    else if (fmt == FMT_ZLIB) inflate_all(data, n, 15, o, NULL);
    else if (fmt == FMT_XZ) unxz(data, n, o);
    else if (fmt == FMT_BZ2) unbz2(data, n, o);
    else unzstd(data, n, o);
}

/* detect._unbase64_lines: the bytes of the base64 run at data[at], line breaks skipped, at most limit chars. */
static size_t unbase64_lines(const uint8_t *data, size_t n, size_t at, size_t limit, uint8_t **out) {
    size_t stop = at + limit + limit / 38, k = 0;
    uint8_t *chars = xrealloc(NULL, limit + 4);
    for (size_t i = at; i < n && i < stop && k < limit; i++) {
        if (data[i] == '\r' || data[i] == '\n') continue;
        if (B64_VAL[data[i]] < 0) break;
        chars[k++] = data[i];
    }
    k -= k % 4;
    uint8_t *plain = xrealloc(NULL, k / 4 * 3 + 1);
    size_t pn = unbase64_run(chars, k, 0, k, plain);
    free(chars);
    *out = plain;
    return pn;
}

static void scan_inner(Worker *w, Event *ev, const uint8_t *data, size_t n, const char *where, int depth, const Cands *cands);

static void carve(Worker *w, Event *ev, const uint8_t *data, size_t n, const char *where, int depth, const Cands *cands) {
    size_t nc = 0;
    Cand *c = xrealloc(NULL, (cands->n + 1) * sizeof *c);
    for (size_t i = 0; i < cands->n; i++) if (cands->v[i].at < n) c[nc++] = cands->v[i];
    if (nc > 1) qsort(c, nc, sizeof *c, cand_cmp);
    for (size_t i = 0; i < nc && !w->carve_stopped; i++) {
        const char *kind = FMT_NAMES[c[i].fmt];
        size_t len = strlen(where) + 64;
        char *lab = xrealloc(NULL, len);
        if (c[i].b64) snprintf(lab, len, "%s (base64@%zu) (%s)", where, c[i].at, kind);
        else if (c[i].at == 0) snprintf(lab, len, "%s (%s)", where, kind);
        else snprintf(lab, len, "%s (%s@%zu)", where, kind, c[i].at);
        char why[160];
        if (w->carve_attempts >= MAX_FILE_ATTEMPTS) {
            snprintf(why, sizeof why, "not looked inside: the bound of %d stream candidates a file was reached", MAX_FILE_ATTEMPTS);
            carve_stop(w, ev, lab, why);
            break;
        }
        if (atomic_fetch_sub(&scan_attempts_left, 1) <= 0) {
            snprintf(why, sizeof why, "not looked inside: the scan's bound of %d stream candidates was reached", MAX_SCAN_ATTEMPTS);
            carve_stop(w, ev, lab, why);
            break;
        }
        w->carve_attempts++;
        uint8_t *decoded_b64 = NULL;
        const uint8_t *sp = data + c[i].at;
        size_t sn = n - c[i].at;
        if (c[i].b64) {
            sn = unbase64_lines(data, n, c[i].at, (size_t)(carve_room(w) * 4 / 3 + 8), &decoded_b64);
            sp = decoded_b64;
        }
        if (depth > MAX_STREAM_DEPTH) {
            Out probe = {0};
            probe.limit = 1;
            decode_stream(w, c[i].fmt, sp, sn, &probe);
            if (probe.n) not_looked_inside(ev, lab, "not looked inside: packed deeper than the bound of " MAX_DEPTH_TEXT " levels");
            free(probe.p);
            free(decoded_b64);
            continue;
        }
        uint64_t room = carve_room(w);
        Out o = out_take(w, depth);
        o.limit = room ? room : 1;
        decode_stream(w, c[i].fmt, sp, sn, &o);
        free(decoded_b64);
        if (!room && o.n) { o.n = 0; o.cut = 1; }
        if (!o.n && !o.cut) { out_give(w, depth, &o); free(lab); continue; }
        w->carve_decoded += o.n;
        atomic_fetch_sub(&scan_decoded_left, (long long)o.n);
        if (o.cut) {
            if (room >= max_file_bytes) {
                snprintf(why, sizeof why, "only the first %llu bytes of the decompressed data were scanned", (unsigned long long)max_file_bytes);
                not_looked_inside(ev, lab, why);
            } else if (atomic_load(&scan_decoded_left) <= 0) {
                snprintf(why, sizeof why, "only the first %llu bytes of the decompressed data were scanned: the scan's bound of %lld decoded bytes was reached",
                         (unsigned long long)room, (long long)MAX_SCAN_DECODED);
                carve_stop(w, ev, lab, why);
            } else {
                snprintf(why, sizeof why, "only the first %llu bytes of the decompressed data were scanned: the bound of %llu decoded bytes a file was reached",
                         (unsigned long long)room, (unsigned long long)(FILE_DECODED_FACTOR * max_file_bytes));
                carve_stop(w, ev, lab, why);
            }
            o.cut = 0;
        }
        scan_decoded(w, ev, &o, lab, depth - 1);
    }
    free(c);
}

/* What is inside a file's bytes or a stream's: its streams, wherever they start, then the tar or zip
 * archive it is (at its start). */
/* A tar or zip member, which no find() saw alone: find() it again for its magics (its hits were the
 * archive's), then look inside it. */
static void scan_member(Worker *w, Event *ev, const uint8_t *data, size_t n, const char *where, int depth) {
    Hits ignored = {0};
    Cands mine = {0};
    if (n) {
        find(data, n, &ignored, w->scratch);
        for (size_t i = 0; i < magic_found.n; i++) cands_push(&mine, magic_found.v[i].at, magic_found.v[i].fmt, magic_found.v[i].b64);
    }
    scan_inner(w, ev, data, n, where, depth, &mine);
    free(ignored.v);
    free(mine.v);
}

static void scan_inner(Worker *w, Event *ev, const uint8_t *data, size_t n, const char *where, int depth, const Cands *cands) {
    carve(w, ev, data, n, where, depth + 1, cands);
    if (n < 4) return;
    if (depth > MAX_DEPTH) {
        if ((n >= 262 && !memcmp(data + 257, "ustar", 5)) || !memcmp(data, "PK\x03\x04", 4))
            not_looked_inside(ev, where, "not looked inside: packed deeper than the bound of " MAX_DEPTH_TEXT " levels");
        return;
    }
    if (n >= 512 && !memcmp(data + 257, "ustar", 5)) {
        /* tar: a member's bytes were scanned as part of the archive; look inside each one. */
        for (size_t at = 0; at + 512 <= n;) {
            const uint8_t *h = data + at;
            if (!h[0]) break;
            uint64_t size = octal(h + 124, 12);
            size_t body = at + 512;
            if (size > n - body) size = n - body;
            if (h[156] == '0' || h[156] == 0) {
                size_t name_len = strnlen((const char *)h, 100);
                char *member = label(where, "member", (const char *)h, name_len);
                size_t before = ev->n_inner_where + ev->n_inner_notes;
                scan_member(w, ev, data + body, (size_t)size, member, depth + 1);
                if (ev->n_inner_where + ev->n_inner_notes == before) free(member);
            }
            at = body + (size_t)((size + 511) / 512 * 512);
        }
        return;
    }
    if (!memcmp(data, "PK\x03\x04", 4)) {
        for (size_t at = 0; at + 30 <= n;) {
            const uint8_t *h = data + at;
            if (memcmp(h, "PK\x03\x04", 4)) {
                const uint8_t *next = memmem(h + 1, n - at - 1, "PK\x03\x04", 4);
                if (!next) break;
                at = (size_t)(next - data);
                continue;
            }
            unsigned method = h[8] | h[9] << 8, flags = h[6] | h[7] << 8;
            size_t csize = (size_t)(h[18] | h[19] << 8 | h[20] << 16 | (uint32_t)h[21] << 24);
            size_t name_len = h[26] | h[27] << 8, extra = h[28] | h[29] << 8;
            size_t body = at + 30 + name_len + extra;
            if (body > n) break;
            char *member = label(where, "member", (const char *)h + 30, name_len);
            size_t used = csize <= n - body ? csize : n - body;
            if (flags & 1) {
                not_looked_inside(ev, member, "not looked inside: the member is encrypted");
                free(member);
            } else if (method == 8) {
                Out m = out_take(w, depth);
                inflate_all(data + body, n - body, -15, &m, &used);
                if (m.n || m.cut) scan_decoded(w, ev, &m, member, depth); else { out_give(w, depth, &m); free(member); }
            } else if (method == 0 || method == 12 || method == 93 || method == 95) {
                /* stored, or bzip2, zstd and xz: those members are whole streams, known by their magic */
                size_t before = ev->n_inner_where + ev->n_inner_notes;
                scan_member(w, ev, data + body, used, member, depth + 1);
                if (ev->n_inner_where + ev->n_inner_notes == before) free(member);
            } else {
                char why[80];
                snprintf(why, sizeof why, "not looked inside: zip compression method %u is not read", method);
                not_looked_inside(ev, member, why);
                free(member);
            }
            at = body + (used ? used : 1);
        }
    }
}

static int looks_packed(const uint8_t *h, size_t n) {
    if (n < 4) return 0;
    return (h[0] == 0x1f && h[1] == 0x8b) || (h[0] == 0x78 && (h[1] == 0x01 || h[1] == 0x5e || h[1] == 0x9c || h[1] == 0xda)) ||
           (n >= 6 && !memcmp(h, "\xfd" "7zXZ\0", 6)) || (h[0] == 'B' && h[1] == 'Z' && h[2] == 'h') ||
           !memcmp(h, "\x28\xb5\x2f\xfd", 4) || !memcmp(h, "PK\x03\x04", 4) || (n >= 262 && !memcmp(h + 257, "ustar", 5));
}

static void scan_packed(Worker *w, int fd, Event *ev, int magic) {
    uint8_t head[512];
    ssize_t got = pread(fd, head, sizeof head, 0);
    w->carve_attempts = w->carve_decoded = 0;
    w->carve_stopped = 0;
    if (got < 4 || !(magic || looks_packed(head, (size_t)got))) return;
    size_t cap = max_file_bytes < ((uint64_t)1 << 31) ? (size_t)max_file_bytes : (size_t)1 << 31, n = 0;
    uint8_t *data;
    if (w->mapped) {
        data = (uint8_t *)w->mapped;  /* read-only: scan_inner only reads it */
        n = w->mapped_n < cap ? w->mapped_n : cap;
        cap = 0;
    } else if (w->buf_from == 0 && w->held <= cap) {
        data = w->buf;  /* scan_fd kept the whole of what it read */
        n = w->held;
        cap = 0;
    } else {
        if (w->packed.cap < cap) { free(w->packed.p); w->packed.p = xrealloc(NULL, cap); w->packed.cap = cap; }
        data = w->packed.p;
        while (n < cap) {
            ssize_t r = pread(fd, data + n, cap - n, (off_t)n);
            if (r <= 0) break;
            n += (size_t)r;
        }
    }
    if (w->file_cands.n > 1) qsort(w->file_cands.v, w->file_cands.n, sizeof *w->file_cands.v, cand_cmp);
    scan_inner(w, ev, data, n, ev->text, 0, &w->file_cands);
    if (cap > KEEP_BUFFER_MAX) { free(w->packed.p); w->packed.p = NULL; w->packed.cap = 0; }
}

static void read_event(Worker *w, Event *ev) {
    int fd = open(ev->text, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) { ev->open_err = errno; return; }
    struct stat st;
    if (fstat(fd, &st) < 0) { ev->open_err = errno; close(fd); return; }
    if (!S_ISREG(st.st_mode)) { close(fd); ev->not_regular = 1; return; }
    w->file_cands.n = 0;
    size_t size = (size_t)st.st_size;
    void *map = size >= MMAP_MIN && (uint64_t)size <= max_file_bytes && size <= KEEP_BUFFER_MAX
        ? mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0) : MAP_FAILED;
    if (map == MAP_FAILED) {
        ev->read_err = scan_fd(w, fd, ev);
        if (!ev->read_err) scan_packed(w, fd, ev, w->file_cands.n > 0);
        close(fd);
        return;
    }
    sigjmp_buf env;
    int again = 0;
    if (sigsetjmp(env, 1) == 0) {
        bus_env = &env;
        scan_mapped(w, map, size, ev);
        w->mapped = map;
        w->mapped_n = size;
        scan_packed(w, fd, ev, w->file_cands.n > 0);
        bus_env = NULL;
        /* It grew meanwhile: read() would have read to its end, so it is read again that way. */
        struct stat now;
        again = fstat(fd, &now) < 0 || (size_t)now.st_size != size;
    } else {
        /* It shrank while read (the mapping faulted past its new end): read again, as read() sees a file cut
         * short. A scan cut short may leave the scratch marked in use: a fresh one. */
        bus_env = NULL;
        if (hs_clone_scratch(scratch, &w->scratch) != HS_SUCCESS) { fprintf(stderr, "ppscan: hyperscan scratch failed\n"); exit(70); }
        again = 1;
    }
    w->mapped = NULL;
    munmap(map, size);
    if (again) {
        /* What the mapping gave is dropped (the strings it kept are left: a rare path) and the file read whole. */
        ev->file_hits.n = ev->inner.n = ev->n_inner_where = ev->n_inner_notes = 0;
        ev->bytes = ev->inner_truncated = 0;
        ev->truncated = 0;
        w->file_cands.n = 0;
        if (lseek(fd, 0, SEEK_SET) < 0) ev->read_err = errno;
        else {
            ev->read_err = scan_fd(w, fd, ev);
            if (!ev->read_err) scan_packed(w, fd, ev, w->file_cands.n > 0);
        }
    }
    close(fd);
}

static size_t next_event;
static pthread_mutex_t next_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker_main(void *arg) {
    Worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&next_lock);
        while (next_event < n_events && events[next_event].kind != EV_FILE) next_event++;
        size_t i = next_event < n_events ? next_event++ : n_events;
        pthread_mutex_unlock(&next_lock);
        if (i >= n_events) return NULL;
        read_event(w, &events[i]);
    }
}

static void read_files(int threads) {
    signal(SIGBUS, on_sigbus);
    pthread_t tids[64];
    Worker workers[64];
    memset(workers, 0, sizeof workers);
    for (int t = 0; t < threads; t++)
        if (hs_clone_scratch(scratch, &workers[t].scratch) != HS_SUCCESS) { fprintf(stderr, "ppscan: hyperscan scratch failed\n"); exit(70); }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tids[t], NULL, worker_main, &workers[t])) { threads = t; break; }
    worker_main(&workers[0]);
    for (int t = 1; t < threads; t++) pthread_join(tids[t], NULL);
}

static void replay(void) {
    for (size_t i = 0; i < n_events; i++) {
        Event *e = &events[i];
        if (e->kind == EV_NOTE) { problem_push(e->text); continue; }
        if (e->kind == EV_FOUND) { found_add(&e->hit, e->text); continue; }
        n_bytes += e->bytes;
        if (e->open_err) { problem_push(errno_text(e->text, e->open_err)); continue; }
        if (e->not_regular) { problem_push(problem_text(e->text, "not scanned: it stopped being a regular file before it was opened")); continue; }
        if (e->read_err) { problem_push(errno_text(e->text, e->read_err)); continue; }
        n_files++;
        for (size_t k = 0; k < e->file_hits.n; k++) found_add(&e->file_hits.v[k], e->text);
        for (size_t k = 0; k < e->inner.n; k++) found_add(&e->inner.v[k], e->inner_where[k]);
        if (e->truncated) {
            n_truncated++;
            char buf[160];
            snprintf(buf, sizeof buf, "only the first %llu bytes were scanned (the file is larger than max_file_bytes)", (unsigned long long)max_file_bytes);
            problem_push(problem_text(e->text, buf));
        }
        for (size_t k = 0; k < e->n_inner_notes; k++) problem_push(e->inner_notes[k]);
        n_truncated += e->inner_truncated;
    }
}

/* ---- the walk ---- */
static char **skips;
static size_t n_skips;
static int proc_done;
static dev_t proc_dev, sys_dev;
static int have_proc_dev, have_sys_dev;
typedef struct { dev_t dev; ino_t ino; } DirKey;
static DirKey *dirs_seen;
static size_t n_seen, cap_seen;

static int seen_add(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < n_seen; i++) if (dirs_seen[i].dev == dev && dirs_seen[i].ino == ino) return 0;
    if (n_seen == cap_seen) { cap_seen = cap_seen ? cap_seen * 2 : 256; dirs_seen = realloc(dirs_seen, cap_seen * sizeof *dirs_seen); }
    dirs_seen[n_seen].dev = dev; dirs_seen[n_seen].ino = ino; n_seen++;
    return 1;
}

static int within(const char *path, const char *top) {
    size_t t = strlen(top);
    while (t > 0 && top[t - 1] == '/') t--;
    if (!strcmp(path, top)) return 1;
    return !strncmp(path, top, t) && path[t] == '/';
}
static int skipped(const char *path) { for (size_t i = 0; i < n_skips; i++) if (within(path, skips[i])) return 1; return 0; }

static int all_digits(const char *s) { if (!*s) return 0; for (; *s; s++) if (*s < '0' || *s > '9') return 0; return 1; }

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    memcpy(s, dir, a);
    size_t k = a;
    if (!(a > 0 && dir[a - 1] == '/')) s[k++] = '/';
    memcpy(s + k, name, b + 1);
    return s;
}

static void read_file(const char *path) { event_push(EV_FILE, strdup(path)); }

static void scan_name(const char *path, const char *name) { scan_bytes_named((const uint8_t *)name, strlen(name), path, " (name)"); }

static void scan_link(const char *path) {
    char target[PATH_MAX + 1];
    ssize_t n = readlink(path, target, sizeof target);
    if (n < 0) { note_errno(path, errno); return; }
    scan_bytes_named((const uint8_t *)target, (size_t)n, path, " (link target)");
}

static int cmp_pid(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    while (*x == '0' && x[1]) x++;
    while (*y == '0' && y[1]) y++;
    size_t lx = strlen(x), ly = strlen(y);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x, y);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void process(const char *pid) {
    static const char *leaves[] = {"environ", "cmdline"};
    for (int i = 0; i < 2; i++) {
        char path[64 + NAME_MAX];
        snprintf(path, sizeof path, "/proc/%s/%s", pid, leaves[i]);
        if (!skipped(path)) read_file(path);
    }
}

static void proc(void) {
    if (proc_done) return;
    proc_done = 1;
    DIR *d = opendir("/proc");
    if (!d) { note_errno("/proc", errno); return; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    for (;;) {
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno) note_errno("/proc", errno);
            break;
        }
        if (!all_digits(e->d_name)) continue;
        if (n == cap) { cap = cap ? cap * 2 : 256; names = realloc(names, cap * sizeof *names); }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_pid);
    for (size_t i = 0; i < n; i++) { process(names[i]); free(names[i]); }
    free(names);
}

static int enter(const char *path, const char *name) {
    scan_name(path, name);
    if (skipped(path)) return 0;
    struct stat st;
    if (lstat(path, &st) < 0) { note_errno(path, errno); return 0; }
    if (S_ISLNK(st.st_mode)) { scan_link(path); return 0; }
    if (!S_ISDIR(st.st_mode)) return 0;
    if (!strcmp(path, "/proc") || (have_proc_dev && st.st_dev == proc_dev)) { proc(); return 0; }
    if (!strcmp(path, "/sys") || (have_sys_dev && st.st_dev == sys_dev)) return 0;
    return seen_add(st.st_dev, st.st_ino);
}

static void entry(const char *path, const char *name) {
    scan_name(path, name);
    if (skipped(path)) return;
    struct stat st;
    if (lstat(path, &st) < 0) { note_errno(path, errno); return; }
    if (S_ISLNK(st.st_mode)) scan_link(path);
    else if (S_ISREG(st.st_mode)) read_file(path);
}

/* os.walk(top, onerror=...) with the dirnames pruned by enter(), files by entry(). */
static void walk(const char *top) {
    DIR *d = opendir(top);
    if (!d) { note_errno(top, errno); return; }
    char **dirs = NULL, **files = NULL;
    size_t nd = 0, nf = 0, cd = 0, cf = 0;
    struct dirent *e;
    int dfd = dirfd(d);
    for (;;) {
        /* A listing that fails part way is said (os.walk's onerror), never read as a shorter folder. */
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno) note_errno(top, errno);
            break;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int is_dir;
        if (e->d_type == DT_DIR) is_dir = 1;
        else if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
            /* os.scandir's is_dir() follows links (stat, never open); a broken link is not a dir. */
            struct stat st;
            is_dir = fstatat(dfd, e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        } else is_dir = 0;
        if (is_dir) { if (nd == cd) { cd = cd ? cd * 2 : 32; dirs = realloc(dirs, cd * sizeof *dirs); } dirs[nd++] = strdup(e->d_name); }
        else { if (nf == cf) { cf = cf ? cf * 2 : 32; files = realloc(files, cf * sizeof *files); } files[nf++] = strdup(e->d_name); }
    }
    closedir(d);
    if (nd) qsort(dirs, nd, sizeof *dirs, cmp_str);
    if (nf) qsort(files, nf, sizeof *files, cmp_str);
    char **keep = nd ? malloc(nd * sizeof *keep) : NULL;
    size_t nk = 0;
    for (size_t i = 0; i < nd; i++) {
        char *p = join(top, dirs[i]);
        if (enter(p, dirs[i])) keep[nk++] = p; else free(p);
        free(dirs[i]);
    }
    for (size_t i = 0; i < nf; i++) { char *p = join(top, files[i]); entry(p, files[i]); free(p); free(files[i]); }
    free(dirs); free(files);
    for (size_t i = 0; i < nk; i++) { walk(keep[i]); free(keep[i]); }
    free(keep);
}

static void proc_path(const char *path) {
    /* path.split("/")[2:] of "/proc/..." */
    const char *rest = path + 6;
    char a[PATH_MAX], b[PATH_MAX];
    const char *slash = strchr(rest, '/');
    if (!slash) {
        if (all_digits(rest)) { process(rest); return; }
    } else if (!strchr(slash + 1, '/')) {
        snprintf(a, sizeof a, "%.*s", (int)(slash - rest), rest);
        snprintf(b, sizeof b, "%s", slash + 1);
        if (all_digits(a) && (!strcmp(b, "environ") || !strcmp(b, "cmdline"))) { read_file(path); return; }
    }
    note(path, "not scanned: of /proc only /proc/<pid>/environ and cmdline are read");
}

/* os.path.abspath */
static char *abspath(const char *p) {
    char cwd[PATH_MAX];
    char *full;
    if (p[0] == '/') full = strdup(p);
    else { if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/"); full = join(cwd, p); }
    size_t n = strlen(full);
    char **parts = malloc((n + 1) * sizeof *parts);
    size_t np = 0;
    int initial = full[0] == '/' ? (full[1] == '/' && full[2] != '/' ? 2 : 1) : 0;
    for (char *tok = strtok(full, "/"); tok; tok = strtok(NULL, "/")) {
        if (!strcmp(tok, ".")) continue;
        if (!strcmp(tok, "..")) { if (np) np--; continue; }
        parts[np++] = tok;
    }
    char *out = malloc(n + 3);
    size_t k = 0;
    for (int i = 0; i < initial; i++) out[k++] = '/';
    for (size_t i = 0; i < np; i++) { if (i) out[k++] = '/'; size_t l = strlen(parts[i]); memcpy(out + k, parts[i], l); k += l; }
    if (!k) out[k++] = '.';
    out[k] = 0;
    free(parts); free(full);
    return out;
}

static void root(const char *given) {
    char *path = abspath(given);
    if (within(path, "/sys")) note(path, "not scanned: /sys is never entered (kernel-made; some reads block)");
    else if (!strcmp(path, "/proc")) proc();
    else if (within(path, "/proc")) proc_path(path);
    else if (skipped(path)) note(path, "not scanned: it is in the skip list");
    else {
        struct stat st;
        if (lstat(path, &st) < 0) note_errno(path, errno);
        else if (S_ISLNK(st.st_mode)) { scan_link(path); note(path, "not scanned: it is a symbolic link and links are not followed"); }
        else if (S_ISDIR(st.st_mode)) { seen_add(st.st_dev, st.st_ino); walk(path); }
        else if (S_ISREG(st.st_mode)) read_file(path);
        else note(path, "not scanned: not a regular file or directory");
    }
    free(path);
}

static void mount_device(const char *path, dev_t *dev, int *have) {
    struct stat a, b;
    *have = stat(path, &a) == 0 && stat("/", &b) == 0 && a.st_dev != b.st_dev;
    if (*have) *dev = a.st_dev;
}

/* ---- modes: the proof line, the sentinels, the dump ----
 * What lets the suite run the probe in a sandbox that has no shell and no Python: the proof of where
 * it ran (the line the shell wrapper of acceptance/harness/probes.py prints otherwise), the sentinel files the
 * scan must find (written here, as the sandbox's uid, before the walk, and removed after it), and a
 * dump of every file (acceptance/cases/inside/dump.py's JSON lines) instead of a scan. */

/* Python's errno.errorcode[err] (two codes have two names; Python keeps the other one). */
static const char *errno_name(int err) {
    if (err == EDEADLK) return "EDEADLOCK";
    if (err == EOPNOTSUPP) return "ENOTSUP";
    const char *name = strerrorname_np(err);
    return name ? name : "OSError";
}

/* "PATH: Strerror [ECODE]", as dump.py's note() and the sentinel record word an OSError. */
static char *os_error_text(const char *path, int err) {
    char buf[300];
    snprintf(buf, sizeof buf, "%s [%s]", strerror(err), errno_name(err));
    return problem_text(path, buf);
}

static const char *PROOF_NS[] = {"mnt", "pid", "net", "user", "uts", "ipc"};

/* The rights this process runs with, from its own /proc/self/status, as the proof line's tail (the shell
 * wrapper of acceptance/harness/probes.py prints the same): " gid=G groups=A,B cap=HEX nnp=N seccomp=N".
 * The host compares them with the agent's (its pid 1, read on the host): a probe with fewer rights than the
 * agent may miss what the agent reaches. A field the kernel does not show is printed empty (refused there). */
static void proof_rights(char *out, size_t size) {
    char gid[32] = "", groups[512] = "", cap[32] = "", nnp[8] = "", seccomp[8] = "";
    FILE *f = fopen("/proc/self/status", "re");
    char buf[4096];
    while (f && fgets(buf, sizeof buf, f)) {
        char *v = strchr(buf, ':');
        if (!v) continue;
        *v++ = 0;
        v += strspn(v, " \t");
        v[strcspn(v, "\n")] = 0;
        if (!strcmp(buf, "Gid")) snprintf(gid, sizeof gid, "%.*s", (int)strcspn(v, " \t"), v);
        else if (!strcmp(buf, "CapEff")) snprintf(cap, sizeof cap, "%s", v);
        else if (!strcmp(buf, "NoNewPrivs")) snprintf(nnp, sizeof nnp, "%s", v);
        else if (!strcmp(buf, "Seccomp")) snprintf(seccomp, sizeof seccomp, "%s", v);
        else if (!strcmp(buf, "Groups")) {
            size_t at = 0;
            for (char *t = strtok(v, " \t"); t && at + strlen(t) + 2 < sizeof groups; t = strtok(NULL, " \t"))
                at += (size_t)snprintf(groups + at, sizeof groups - at, "%s%s", at ? "," : "", t);
        }
    }
    if (f) fclose(f);
    snprintf(out, size, " gid=%s groups=%s cap=%s nnp=%s seccomp=%s", gid, groups, cap, nnp, seccomp);
}

/* The first line of output: PAIRPROOF-PROOF NONCE, this process's namespaces and its uid, the line
 * acceptance/harness/probes.py's WRAPPER prints from the shell (verified the same way, on the host). A namespace
 * that cannot be read is named so, and the host refuses the line.
 * With --expect (the rest of the line the host expects: the six namespaces and uid=N), a probe that finds
 * itself anywhere else stops right after the line, before it writes a sentinel or reads a file: a probe
 * misrouted by a driver (to the host, or another sandbox) must not walk, nor write, where it landed. */
static void put_proof(const char *nonce, const char *expect) {
    char line[2048];
    size_t at = 0;
    for (size_t i = 0; i < sizeof PROOF_NS / sizeof *PROOF_NS; i++) {
        char path[64], link[256];
        snprintf(path, sizeof path, "/proc/self/ns/%s", PROOF_NS[i]);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n < 0) snprintf(link, sizeof link, "unreadable:%s[%s]", PROOF_NS[i], errno_name(errno));
        else link[n] = 0;
        at += (size_t)snprintf(line + at, sizeof line - at, "%s%s", i ? " " : "", link);
    }
    snprintf(line + at, sizeof line - at, " uid=%u", (unsigned)geteuid());
    char rights[1024];
    proof_rights(rights, sizeof rights);
    puts_("PAIRPROOF-PROOF ");
    puts_(nonce);
    puts_(" ");
    puts_(line);
    puts_(rights);
    puts_("\n");
    flush_out();
    if (expect && strcmp(expect, line)) {
        fprintf(stderr, "ppscan: refusing to look: this is not the sandbox the host expects (here: %s; expected: %s)\n",
                line, expect);
        exit(3);
    }
}

/* One sentinel: PATH gets the token held in the environment variable VAR (never in argv, which the
 * scan reads back from /proc/<pid>/cmdline). */
typedef struct { const char *var, *path; int written, removed; char *error; } Sentinel;
static Sentinel *sentinels;
static size_t n_sentinels;

static void write_sentinels(void) {
    for (size_t i = 0; i < n_sentinels; i++) {
        Sentinel *s = &sentinels[i];
        const char *token = getenv(s->var);
        size_t len = strlen(token), done = 0;
        /* O_EXCL and O_NOFOLLOW: a file or link the sandbox put there first is never written through. */
        int fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
        if (fd < 0) { s->error = os_error_text(s->path, errno); continue; }
        int err = 0;
        while (done < len && !err) {
            ssize_t w = write(fd, token + done, len - done);
            if (w < 0 && errno != EINTR) err = errno;
            else if (w > 0) done += (size_t)w;
        }
        if (close(fd) < 0 && !err) err = errno;
        if (err) {
            s->error = os_error_text(s->path, err);
            unlink(s->path);  /* a part-written sentinel is no sentinel */
            continue;
        }
        s->written = 1;
    }
}

static void remove_sentinels(void) {
    for (size_t i = 0; i < n_sentinels; i++) {
        Sentinel *s = &sentinels[i];
        if (!s->written) continue;
        if (unlink(s->path) < 0) s->error = os_error_text(s->path, errno);
        else s->removed = 1;
    }
}

/* , "sentinels": [{"path", "written", "removed"[, "error"]}...] in the completeness record. */
static void put_sentinels(void) {
    if (!n_sentinels) return;
    puts_(", \"sentinels\": [");
    for (size_t i = 0; i < n_sentinels; i++) {
        const Sentinel *s = &sentinels[i];
        puts_(i ? ", {\"path\": " : "{\"path\": ");
        put_json_str(s->path, strlen(s->path));
        puts_(s->written ? ", \"written\": true" : ", \"written\": false");
        puts_(s->removed ? ", \"removed\": true" : ", \"removed\": false");
        if (s->error) { puts_(", \"error\": "); put_json_str(s->error, strlen(s->error)); }
        puts_("}");
    }
    puts_("]");
}

/* The dump (acceptance/cases/inside/dump.py): every regular file under the roots carried out whole in chunks
 * {"path", "b64"} (up to DUMP_LIMIT bytes a file), a symbolic link's target text as "PATH (link target)"
 * (never followed), every process's environ and cmdline, fifos, sockets and devices never opened, and
 * the record {"files", "bytes", "truncated", "problems", "end"} last. Names are not carried. */
#define DUMP_CHUNK (1 << 20)
#define DUMP_LIMIT ((uint64_t)256 << 20)
static uint64_t dump_files, dump_bytes, dump_truncated;
static char **dump_problems;
static size_t n_dump_problems;
static char **dump_skips;  /* compared as given, with the joined path, as dump.py does */
static size_t n_dump_skips;
static uint8_t *dump_buf;

static void dump_note(const char *path, int err) {
    dump_problems = xrealloc(dump_problems, (n_dump_problems + 1) * sizeof *dump_problems);
    dump_problems[n_dump_problems++] = os_error_text(path, err);
}

static void put_b64(const uint8_t *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        quad[0] = A[v >> 18 & 63]; quad[1] = A[v >> 12 & 63];
        quad[2] = i + 1 < n ? A[v >> 6 & 63] : '=';
        quad[3] = i + 2 < n ? A[v & 63] : '=';
        put(quad, 4);
    }
}

static void dump_line(const char *path, const char *suffix, const uint8_t *data, size_t n) {
    puts_("{\"path\": ");
    if (suffix) {
        size_t len = strlen(path) + strlen(suffix) + 1;
        char *named = xrealloc(NULL, len);
        snprintf(named, len, "%s%s", path, suffix);
        put_json_str(named, len - 1);
        free(named);
    } else put_json_str(path, strlen(path));
    puts_(", \"b64\": \"");
    put_b64(data, n);
    puts_("\"}\n");
    flush_out();
}

static int dump_skipped(const char *path) {
    for (size_t i = 0; i < n_dump_skips; i++) if (!strcmp(path, dump_skips[i])) return 1;
    return 0;
}

static void dump_emit(const char *path) {
    struct stat st;
    if (lstat(path, &st) < 0) { dump_note(path, errno); return; }
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX + 1];
        ssize_t n = readlink(path, target, sizeof target);
        if (n < 0) { dump_note(path, errno); return; }
        dump_line(path, " (link target)", (const uint8_t *)target, (size_t)n);
        return;
    }
    if (!S_ISREG(st.st_mode) && strncmp(path, "/proc/", 6)) return;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) { dump_note(path, errno); return; }
    if (fstat(fd, &st) < 0) { dump_note(path, errno); close(fd); return; }
    if (!S_ISREG(st.st_mode)) { close(fd); return; }
    if (!dump_buf) dump_buf = xrealloc(NULL, DUMP_CHUNK);
    uint64_t total = 0;
    for (;;) {
        ssize_t got = read(fd, dump_buf, DUMP_CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { dump_note(path, errno); close(fd); return; }
        if (got == 0) break;
        total += (uint64_t)got;
        dump_line(path, NULL, dump_buf, (size_t)got);
        if (total >= DUMP_LIMIT) {
            uint8_t one;
            do got = read(fd, &one, 1); while (got < 0 && errno == EINTR);
            if (got < 0) { dump_note(path, errno); close(fd); return; }
            if (got > 0) dump_truncated++;
            break;
        }
    }
    close(fd);
    dump_files++;
    dump_bytes += total;
}

static void dump_proc(void) {
    DIR *d = opendir("/proc");
    if (!d) { dump_note("/proc", errno); return; }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    for (;;) {
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno) dump_note("/proc", errno);
            break;
        }
        if (!all_digits(e->d_name)) continue;
        names = xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_pid);
    for (size_t i = 0; i < n; i++) {
        char path[64 + NAME_MAX];
        snprintf(path, sizeof path, "/proc/%s/environ", names[i]);
        dump_emit(path);
        snprintf(path, sizeof path, "/proc/%s/cmdline", names[i]);
        dump_emit(path);
        free(names[i]);
    }
    free(names);
}

/* os.walk(top) top-down, not following links: a directory in the skip list is not entered, anything
 * else that is not a directory is emitted (a link to a directory too: its target text). */
static void dump_walk(const char *top) {
    struct stat here;
    if (lstat(top, &here) == 0) seen_add(here.st_dev, here.st_ino);  /* for check_mounts */
    DIR *d = opendir(top);
    if (!d) { dump_note(top, errno); return; }
    int dfd = dirfd(d);
    char **dirs = NULL;
    size_t nd = 0;
    struct dirent *e;
    for (;;) {
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno) dump_note(top, errno);
            break;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *path = join(top, e->d_name);
        if (dump_skipped(path)) { free(path); continue; }
        int is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st;
            is_dir = fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        }
        if (is_dir) { dirs = xrealloc(dirs, (nd + 1) * sizeof *dirs); dirs[nd++] = path; continue; }
        dump_emit(path);
        free(path);
    }
    closedir(d);
    if (nd) qsort(dirs, nd, sizeof *dirs, cmp_str);
    for (size_t i = 0; i < nd; i++) { dump_walk(dirs[i]); free(dirs[i]); }
    free(dirs);
}

/* ---- every mount under the roots was entered ----
 * The sandbox's own /proc/self/mountinfo names every mount it has; each one that is a folder under the
 * roots, not skipped, and visible at its mount point must be a folder the walk entered (dirs_seen): a walk
 * that quietly stayed on one side of a mount is said, path by path, and the host refuses the scan. A mount
 * hidden under a later one, or one the sandbox may not reach (statx fails: the walk said so where it met
 * it), is not expected. */
static void unescape_mountinfo(char *s) {
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else *w++ = *r++;
    }
    *w = 0;
}

static int was_entered(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < n_seen; i++) if (dirs_seen[i].dev == dev && dirs_seen[i].ino == ino) return 1;
    return 0;
}

static void check_mounts(char **roots, size_t n_roots, int (*excluded)(const char *), void (*say)(const char *, const char *)) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) { say("/proc/self/mountinfo", "not read: the mounts the walk should have entered are unknown"); return; }
    char *line = NULL, mp[PATH_MAX + 1];
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long id;
        if (sscanf(line, "%llu %*u %*u:%*u %*s %4096s", &id, mp) != 2) continue;
        unescape_mountinfo(mp);
        int under = 0;
        for (size_t i = 0; i < n_roots && !under; i++) { char *r = abspath(roots[i]); under = within(mp, r); free(r); }
        if (!under || excluded(mp) || within(mp, "/proc") || within(mp, "/sys")) continue;
        struct statx sx;
        if (statx(AT_FDCWD, mp, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO | STATX_MNT_ID, &sx) < 0) continue;
        if (!S_ISDIR(sx.stx_mode) || ((sx.stx_mask & STATX_MNT_ID) && sx.stx_mnt_id != id)) continue;
        dev_t dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
        if ((have_proc_dev && dev == proc_dev) || (have_sys_dev && dev == sys_dev)) continue;  /* /proc's, read once */
        if (!was_entered(dev, sx.stx_ino))
            say(mp, "not scanned: a mount under the roots that the walk never entered");
    }
    free(line);
    fclose(f);
}

static void say_scan(const char *path, const char *reason) { note(path, reason); }
static void say_dump(const char *path, const char *reason) {
    dump_problems = xrealloc(dump_problems, (n_dump_problems + 1) * sizeof *dump_problems);
    dump_problems[n_dump_problems++] = problem_text(path, reason);
}
static int dump_excluded(const char *path) {
    for (size_t i = 0; i < n_dump_skips; i++) if (within(path, dump_skips[i])) return 1;
    return 0;
}

static void dump(char **roots, size_t n_roots) {
    dump_proc();
    for (size_t i = 0; i < n_roots; i++) dump_walk(roots[i]);
    check_mounts(roots, n_roots, dump_excluded, say_dump);
    remove_sentinels();
    char num[160];
    snprintf(num, sizeof num, "{\"files\": %llu, \"bytes\": %llu, \"truncated\": %llu, \"problems\": [",
             (unsigned long long)dump_files, (unsigned long long)dump_bytes, (unsigned long long)dump_truncated);
    puts_(num);
    for (size_t i = 0; i < n_dump_problems; i++) {
        if (i) puts_(", ");
        put_json_str(dump_problems[i], strlen(dump_problems[i]));
    }
    puts_("]");
    put_sentinels();
    puts_(", \"end\": \"pairproof-dump-end\"}\n");
    flush_out();
}

static void usage_error(const char *msg) {
    fprintf(stderr, "usage: detect.py [-h] --run RUN [--max-file-bytes MAX_FILE_BYTES] [--skip PATH] ROOT [ROOT ...]\ndetect.py: error: %s\n", msg);
    exit(2);
}

static int parse_int(const char *s, long long *v) {
    char *end;
    errno = 0;
    while (*s == ' ') s++;
    *v = strtoll(s, &end, 10);
    return !errno && end != s && *end == 0;
}

/* The value of option `name` at argv[*i] ("--name VALUE" or "--name=VALUE"), or NULL if argv[*i] is
 * another argument; a missing value is a usage error. */
static const char *option(int argc, char **argv, int *i, const char *name) {
    size_t len = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, len) || (a[len] != 0 && a[len] != '=')) return NULL;
    if (a[len] == '=') return a + len + 1;
    if (*i + 1 >= argc) {
        char m[100];
        snprintf(m, sizeof m, "argument %s: expected one argument", name);
        usage_error(m);
    }
    return argv[++*i];
}

int main(int argc, char **argv) {
    char **roots = malloc((size_t)argc * sizeof *roots);
    size_t n_roots = 0;
    skips = malloc(((size_t)argc + 2) * sizeof *skips);
    skips[n_skips++] = abspath("/proc/kcore");
    skips[n_skips++] = abspath("/sys");
    dump_skips = malloc(((size_t)argc + 3) * sizeof *dump_skips);
    sentinels = calloc((size_t)argc, sizeof *sentinels);
    int only_positional = 0, dump_mode = 0, mfb_given = 0;
    const char *nonce = NULL, *expect = NULL;
    long long mfb = DEFAULT_MAX_FILE_BYTES;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (only_positional || a[0] != '-' || !a[1]) { roots[n_roots++] = argv[i]; continue; }
        if (!strcmp(a, "--")) { only_positional = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: ppscan [-h] --run RUN [--max-file-bytes MAX_FILE_BYTES] [--skip PATH] [--proof NONCE]\n"
                   "              [--expect 'NS... uid=N'] [--sentinel VAR=PATH] [--dump] ROOT [ROOT ...]\n"
                   "Report every token of run RUN under the given roots (detect.py's output format), or with\n"
                   "--dump carry every file out (acceptance/cases/inside/dump.py's output format).\n"
                   "  --run RUN           the run whose tokens are looked for (8 lowercase hex; not with --dump)\n"
                   "  --proof NONCE       print first the proof line: PAIRPROOF-PROOF NONCE, the namespaces, uid=N, its rights\n"
                   "  --expect LINE       the proof line's namespaces and uid=N the host expects; anywhere else,\n"
                   "                      stop after the proof line (exit 3) before writing or reading anything\n"
                   "  --sentinel VAR=PATH write the token held in the environment variable VAR to PATH (a new file)\n"
                   "                      before the walk, remove it after, and say so in the completeness record\n");
            return 0;
        }
        if (!strcmp(a, "--dump")) { dump_mode = 1; continue; }
        if ((v = option(argc, argv, &i, "--run"))) {
            size_t k = 0;
            while (k < 8 && ((v[k] >= '0' && v[k] <= '9') || (v[k] >= 'a' && v[k] <= 'f'))) k++;
            if (k != 8 || v[8]) {
                char m[300];
                snprintf(m, sizeof m, "argument --run: '%.100s' is not a run id (8 lowercase hex characters, e.g. a3f09c1e)", v);
                usage_error(m);
            }
            memcpy(PREFIX, v, 8);
            PREFIX[8] = '-';
            continue;
        }
        if ((v = option(argc, argv, &i, "--max-file-bytes"))) {
            if (!parse_int(v, &mfb)) usage_error("argument --max-file-bytes: invalid int value");
            mfb_given = 1;
            continue;
        }
        if ((v = option(argc, argv, &i, "--skip"))) {
            skips[n_skips++] = abspath(v);
            dump_skips[n_dump_skips++] = (char *)v;
            continue;
        }
        if ((v = option(argc, argv, &i, "--proof"))) {
            if (!*v) usage_error("argument --proof: the nonce is empty");
            for (const char *c = v; *c; c++)
                if (*c <= ' ' || *c == 0x7f) usage_error("argument --proof: the nonce must be printable, without spaces");
            nonce = v;
            continue;
        }
        if ((v = option(argc, argv, &i, "--expect"))) {
            if (!*v) usage_error("argument --expect: empty (the six namespaces and uid=N of the proof line)");
            expect = v;
            continue;
        }
        if ((v = option(argc, argv, &i, "--sentinel"))) {
            char m[PATH_MAX + 200];
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || eq[1] != '/') {
                snprintf(m, sizeof m, "argument --sentinel: expected VAR=/absolute/path, got %.200s", v);
                usage_error(m);
            }
            char *var = strndup(v, (size_t)(eq - v));
            const char *token = getenv(var);
            if (!token || !*token) {
                snprintf(m, sizeof m, "argument --sentinel: the environment variable %.100s holding its token is not set", var);
                usage_error(m);
            }
            sentinels[n_sentinels].var = var;
            sentinels[n_sentinels++].path = eq + 1;
            continue;
        }
        char m[300];
        snprintf(m, sizeof m, "unrecognized arguments: %.200s", a);
        usage_error(m);
    }
    if (!n_roots) usage_error("the following arguments are required: ROOT");
    if (!dump_mode && !PREFIX[0]) usage_error("the following arguments are required: --run");
    if (mfb < 1) { char m[100]; snprintf(m, sizeof m, "--max-file-bytes must be at least 1, got %lld", mfb); usage_error(m); }
    if (dump_mode && mfb_given) usage_error("argument --max-file-bytes: the dump carries files whole (up to 256 MiB); it applies to the scan only");
    max_file_bytes = (uint64_t)mfb;
    if (expect && !nonce) usage_error("argument --expect: needs --proof (the expectation is checked as the proof line is made)");
    if (nonce) put_proof(nonce, expect);
    write_sentinels();
    if (dump_mode) {
        /* dump.py never enters these, whatever the roots */
        dump_skips[n_dump_skips++] = "/proc";
        dump_skips[n_dump_skips++] = "/sys";
        dump_skips[n_dump_skips++] = "/dev";
        dump(roots, n_roots);
        return 0;
    }
    build_anchors();
    mount_device("/proc", &proc_dev, &have_proc_dev);
    mount_device("/sys", &sys_dev, &have_sys_dev);
    for (size_t i = 0; i < n_roots; i++) root(roots[i]);
    check_mounts(roots, n_roots, skipped, say_scan);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("PPSCAN_THREADS");
    int threads = env && atoi(env) > 0 ? atoi(env) : (int)(cpus > 0 ? cpus : 1);
    if (threads > 64) threads = 64;
    read_files(threads);
    remove_sentinels();
    replay();
    char num[64];
    for (size_t i = 0; i < n_found; i++) {
        const Hit *h = &found[i].hit;
        puts_("{\"token\": ");
        put_json_str(h->token, strlen(h->token));
        puts_(", \"encoding\": \"");
        puts_(ENC_NAMES[h->enc]);
        snprintf(num, sizeof num, "\", \"offset\": %llu, \"where\": ", (unsigned long long)h->offset);
        puts_(num);
        put_json_str(found[i].where, strlen(found[i].where));
        puts_("}\n");
        if (outlen > (1 << 16)) flush_out();
    }
    flush_out();
    for (size_t i = 0; i < n_problems; i++) { fputs(problems[i], stderr); fputc('\n', stderr); }
    fflush(stderr);
    snprintf(num, sizeof num, "{\"scanned_files\": %llu, \"errors\": %zu, ", (unsigned long long)n_files, n_problems);
    puts_(num);
    snprintf(num, sizeof num, "\"bytes\": %llu, \"truncated\": %llu, \"problems\": [", (unsigned long long)n_bytes, (unsigned long long)n_truncated);
    puts_(num);
    for (size_t i = 0; i < n_problems && i < SUMMARY_PROBLEMS; i++) {
        if (i) puts_(", ");
        put_json_str(problems[i], strlen(problems[i]));
    }
    puts_("]");
    put_sentinels();
    puts_(", \"end\": \"pairproof-scan-end\"}\n");
    flush_out();
    return 0;
}
