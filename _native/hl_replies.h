/* A master's scalar replies, built in a scratch reply of its own instead of on the heap.
 *
 * libhiredis's reader builds every reply as heap objects: a redisReply (calloc) and, for a status,
 * an error or a string, a copy of its text (malloc), freed again once the engine has counted the
 * reply. A lock's commands get one scalar reply each (+OK, :1, $-1, -ERR ...), so that was some
 * 300 instructions per reply in the allocator alone: 3,000 per acquire+release at five masters.
 *
 * Here a connection's reader builds a whole scalar reply (not part of an array) whose text fits
 * HL_SCRATCH_TEXT bytes in its master's scratch reply instead, through libhiredis's reply object
 * functions (redisReplyObjectFunctions, with the reader's privdata pointing at the scratch). The
 * rest (arrays and their elements, longer texts, RESP3 doubles and booleans) is built by
 * libhiredis's own functions, as before. A scratch reply is valid until the master's next reply
 * is read; hl_free_reply() frees a reply of either kind (nothing, for a scratch one), and the
 * reader's freeObject (called by libhiredis on a reply it gives up) does the same.
 *
 * A scratch reply is told apart by its `element` pointer: the address of hl_scratch_mark, which
 * no reply libhiredis builds has (a scalar's is NULL, an array's its own table). The engine reads
 * `element` of array replies only.
 */
#ifndef HL_REPLIES_H
#define HL_REPLIES_H

#if defined(__GNUC__)  /* (see hl_platform.h) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#endif

#include <string.h>
#include <hiredis/hiredis.h>

#define HL_SCRATCH_TEXT 128

typedef struct hl_scratch {
    redisReply reply;
    char text[HL_SCRATCH_TEXT];
} hl_scratch;

static char hl_scratch_mark;
/* libhiredis's own reply functions (every reader starts with the same table) */
static redisReplyObjectFunctions *hl_library_functions = NULL;

static inline int hl_is_scratch(const void *reply) {
    return reply != NULL && ((const redisReply *)reply)->element == (redisReply **)&hl_scratch_mark;
}

static inline void hl_free_reply(void *reply) {
    if (reply != NULL && !hl_is_scratch(reply)) {
        freeReplyObject(reply);
    }
}

/* The master's scratch reply, cleared, marked and of type `type`, for a reply not inside an
 * array; NULL otherwise. */
static inline redisReply *hl_scratch_for(const redisReadTask *task, int type) {
    hl_scratch *scratch = (hl_scratch *)task->privdata;
    if (task->parent != NULL || scratch == NULL) {
        return NULL;
    }
    memset(&scratch->reply, 0, sizeof(scratch->reply));
    scratch->reply.type = type;
    scratch->reply.element = (redisReply **)&hl_scratch_mark;
    return &scratch->reply;
}

static void *hl_create_string(const redisReadTask *task, char *text, size_t length) {
    redisReply *reply;
    if ((task->type == REDIS_REPLY_STATUS || task->type == REDIS_REPLY_ERROR
         || task->type == REDIS_REPLY_STRING)
        && length < HL_SCRATCH_TEXT && (reply = hl_scratch_for(task, task->type)) != NULL) {
        char *into = ((hl_scratch *)task->privdata)->text;
        memcpy(into, text, length);
        into[length] = '\0';
        reply->str = into;
        reply->len = length;
        return reply;
    }
    return hl_library_functions->createString(task, text, length);
}

static void *hl_create_integer(const redisReadTask *task, long long value) {
    redisReply *reply = hl_scratch_for(task, REDIS_REPLY_INTEGER);
    if (reply == NULL) {
        return hl_library_functions->createInteger(task, value);
    }
    reply->integer = value;
    return reply;
}

static void *hl_create_nil(const redisReadTask *task) {
    /* (a nil bulk string's task is of type STRING: the reply is NIL, as libhiredis makes it) */
    redisReply *reply = hl_scratch_for(task, REDIS_REPLY_NIL);
    return reply != NULL ? reply : hl_library_functions->createNil(task);
}

#if HIREDIS_MAJOR >= 1
static void *hl_create_array(const redisReadTask *task, size_t elements) {
    return hl_library_functions->createArray(task, elements);
}

static void *hl_create_double(const redisReadTask *task, double value, char *text, size_t length) {
    return hl_library_functions->createDouble(task, value, text, length);
}

static void *hl_create_bool(const redisReadTask *task, int value) {
    return hl_library_functions->createBool(task, value);
}
#else
static void *hl_create_array(const redisReadTask *task, int elements) {
    return hl_library_functions->createArray(task, elements);
}
#endif

static void hl_free_object(void *reply) {
    hl_free_reply(reply);
}

static redisReplyObjectFunctions hl_reply_functions = {
    .createString = hl_create_string,
    .createArray = hl_create_array,
    .createInteger = hl_create_integer,
#if HIREDIS_MAJOR >= 1
    .createDouble = hl_create_double,
    .createBool = hl_create_bool,
#endif
    .createNil = hl_create_nil,
    .freeObject = hl_free_object,
};

/* Learns libhiredis's own reply functions from a reader of its making (once, as the module is
 * imported); -1 when out of memory. */
static int hl_replies_init(void) {
    redisReader *reader = redisReaderCreate();
    if (reader == NULL) {
        return -1;
    }
    hl_library_functions = reader->fn;
    redisReaderFree(reader);
    return 0;
}

/* A new connection's reader builds its scalar replies in `scratch` from now on. */
static inline void hl_use_scratch(redisReader *reader, hl_scratch *scratch) {
    reader->fn = &hl_reply_functions;
    reader->privdata = scratch;
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#endif
