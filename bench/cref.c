/* The limit reference: one Redlock acquire+release cycle done with libhiredis and nothing else.
 *
 * Per cycle, on N masters (blocking hiredis contexts, one per master, TCP_NODELAY as hiredis sets
 * it):
 *   1. a fresh token: 20 bytes from getrandom() as 40 hex characters (as hiredlock does);
 *   2. SET key token NX PX ttl appended to all N connections and flushed to all N before any reply
 *      is read; then the N replies are read (each must be +OK);
 *   3. EVALSHA <release sha> 1 key token to all N, flushed before reading; N replies (each :1).
 * The release script is hiredlock's (same text, so the same SHA1), loaded once with SCRIPT LOAD.
 *
 * Built twice from this file by `make bench`:
 *   bench/build/cref          a program:  cref [-c cycles] [-t ttl_ms] [-k key] [-h host] port...
 *                             prints one JSON line: wall and CPU (user+sys) time per cycle;
 *   bench/build/libcref.so    the same code for the benchmarks (ctypes, -DCREF_LIB), so that the
 *                             reference runs in the benchmark process, in the same placement, and
 *                             lands in the same pytest-benchmark report.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define MAX_MASTERS 16

static const char RELEASE_SCRIPT[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

typedef struct cref {
    int n;
    redisContext *ctx[MAX_MASTERS];
    char key[256];
    size_t key_len;
    char ttl[24];
    size_t ttl_len;
    char sha[41];
    char error[256];
} cref_t;

static int fail(cref_t *h, const char *what, const char *detail) {
    snprintf(h->error, sizeof h->error, "%s: %s", what, detail ? detail : "?");
    return -1;
}

const char *cref_error(cref_t *h) { return h->error; }

void cref_close(cref_t *h) {
    if (h == NULL) return;
    for (int i = 0; i < h->n; i++)
        if (h->ctx[i] != NULL) redisFree(h->ctx[i]);
    free(h);
}

/* Connects to every master and loads the release script. NULL on error (message in errbuf). */
cref_t *cref_open(const char *host, const int *ports, int n, const char *key, long ttl_ms,
                  char *errbuf, int errlen) {
    struct timeval tv = {5, 0};
    cref_t *h = calloc(1, sizeof *h);
    if (h == NULL || n < 1 || n > MAX_MASTERS || strlen(key) >= sizeof h->key) {
        snprintf(errbuf, errlen, "bad arguments (1 to %d masters, key < 256 bytes)", MAX_MASTERS);
        free(h);
        return NULL;
    }
    strcpy(h->key, key);
    h->key_len = strlen(key);
    h->ttl_len = (size_t)snprintf(h->ttl, sizeof h->ttl, "%ld", ttl_ms);
    for (int i = 0; i < n; i++) {
        h->ctx[i] = redisConnectWithTimeout(host, ports[i], tv);
        h->n = i + 1;
        if (h->ctx[i] == NULL || h->ctx[i]->err) {
            snprintf(errbuf, errlen, "connect %s:%d: %s", host, ports[i],
                     h->ctx[i] ? h->ctx[i]->errstr : "out of memory");
            cref_close(h);
            return NULL;
        }
        redisReply *r = redisCommand(h->ctx[i], "SCRIPT LOAD %s", RELEASE_SCRIPT);
        if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
            snprintf(errbuf, errlen, "SCRIPT LOAD on port %d failed", ports[i]);
            if (r) freeReplyObject(r);
            cref_close(h);
            return NULL;
        }
        memcpy(h->sha, r->str, 40);
        h->sha[40] = 0;
        freeReplyObject(r);
    }
    return h;
}

/* Writes every connection's output buffer out (blocking sockets: returns when all is sent). */
static int flush_all(cref_t *h) {
    for (int i = 0; i < h->n; i++) {
        int done = 0;
        do {
            if (redisBufferWrite(h->ctx[i], &done) != REDIS_OK)
                return fail(h, "write", h->ctx[i]->errstr);
        } while (!done);
    }
    return 0;
}

static int read_all(cref_t *h, int want_type, const char *phase) {
    for (int i = 0; i < h->n; i++) {
        void *raw = NULL;
        if (redisGetReply(h->ctx[i], &raw) != REDIS_OK) return fail(h, phase, h->ctx[i]->errstr);
        redisReply *r = raw;
        int ok = r->type == want_type &&
                 (want_type == REDIS_REPLY_INTEGER ? r->integer == 1 : (r->len == 2 && r->str[0] == 'O'));
        if (!ok) {
            fail(h, phase, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply (lock taken?)");
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

static void new_token(char *hex) {
    static const char digits[] = "0123456789abcdef";
    unsigned char raw[20];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t k = getrandom(raw + got, sizeof raw - got, 0);
        if (k > 0) got += (size_t)k;
    }
    for (int j = 0; j < 20; j++) {
        hex[2 * j] = digits[raw[j] >> 4];
        hex[2 * j + 1] = digits[raw[j] & 15];
    }
}

/* `count` acquire+release cycles. 0 on success, -1 on the first error (see cref_error). */
int cref_cycles(cref_t *h, long count) {
    char token[40];
    const char *set_argv[6] = {"SET", h->key, token, "NX", "PX", h->ttl};
    size_t set_len[6] = {3, h->key_len, 40, 2, 2, h->ttl_len};
    const char *rel_argv[5] = {"EVALSHA", h->sha, "1", h->key, token};
    size_t rel_len[5] = {7, 40, 1, h->key_len, 40};
    for (long c = 0; c < count; c++) {
        new_token(token);
        for (int i = 0; i < h->n; i++)
            if (redisAppendCommandArgv(h->ctx[i], 6, set_argv, set_len) != REDIS_OK)
                return fail(h, "append SET", h->ctx[i]->errstr);
        if (flush_all(h) || read_all(h, REDIS_REPLY_STATUS, "SET")) return -1;
        for (int i = 0; i < h->n; i++)
            if (redisAppendCommandArgv(h->ctx[i], 5, rel_argv, rel_len) != REDIS_OK)
                return fail(h, "append EVALSHA", h->ctx[i]->errstr);
        if (flush_all(h) || read_all(h, REDIS_REPLY_INTEGER, "EVALSHA")) return -1;
    }
    return 0;
}

/* Instruction counting (bench/test_instructions.py): under `valgrind --tool=callgrind
 * --instr-atstart=no`, cref_instrument(1) starts counting from zero and cref_instrument(0) dumps
 * the counts of the measured part and stops. Outside valgrind both do nothing. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define CREF_HAVE_CALLGRIND 1
#endif
#endif

int cref_instrument(int on) {
#ifdef CREF_HAVE_CALLGRIND
    if (on) {
        CALLGRIND_START_INSTRUMENTATION;
        CALLGRIND_ZERO_STATS;
    } else {
        CALLGRIND_DUMP_STATS_AT("measured");
        CALLGRIND_STOP_INSTRUMENTATION;
    }
    return 1;
#else
    (void)on;
    return 0; /* built without valgrind's headers: no counting */
#endif
}

#ifndef CREF_LIB
static double ns_between(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
}

static double cpu_ns(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

int main(int argc, char **argv) {
    long cycles = 100000, ttl = 10000;
    const char *key = "cref:bench", *host = "127.0.0.1";
    int ports[MAX_MASTERS], n = 0;
    char err[256];
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-c") && a + 1 < argc) cycles = atol(argv[++a]);
        else if (!strcmp(argv[a], "-t") && a + 1 < argc) ttl = atol(argv[++a]);
        else if (!strcmp(argv[a], "-k") && a + 1 < argc) key = argv[++a];
        else if (!strcmp(argv[a], "-h") && a + 1 < argc) host = argv[++a];
        else if (n < MAX_MASTERS && atoi(argv[a]) > 0) ports[n++] = atoi(argv[a]);
        else {
            fprintf(stderr, "usage: cref [-c cycles] [-t ttl_ms] [-k key] [-h host] port...\n");
            return 2;
        }
    }
    if (n == 0) {
        fprintf(stderr, "usage: cref [-c cycles] [-t ttl_ms] [-k key] [-h host] port...\n");
        return 2;
    }
    cref_t *h = cref_open(host, ports, n, key, ttl, err, sizeof err);
    if (h == NULL) {
        fprintf(stderr, "cref: %s\n", err);
        return 1;
    }
    if (cref_cycles(h, cycles / 100 + 1)) { /* warm-up */
        fprintf(stderr, "cref: %s\n", cref_error(h));
        return 1;
    }
    struct timespec t0, t1;
    double c0 = cpu_ns();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = cref_cycles(h, cycles);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double c1 = cpu_ns();
    if (rc) {
        fprintf(stderr, "cref: %s\n", cref_error(h));
        return 1;
    }
    printf("{\"masters\": %d, \"cycles\": %ld, \"wall_ns_per_cycle\": %.1f, "
           "\"cpu_ns_per_cycle\": %.1f}\n",
           n, cycles, ns_between(t0, t1) / cycles, (c1 - c0) / cycles);
    cref_close(h);
    return 0;
}
#endif
