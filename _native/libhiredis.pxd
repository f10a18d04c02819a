# cython: language_level=3
# Declarations of the part of libhiredis that both 0.14 (Debian bookworm) and 1.x export.
# Only declarations live here; the engine that uses them is engine.pyx.

cdef extern from "hiredis/hiredis.h" nogil:
    enum:
        HIREDIS_MAJOR
        HIREDIS_MINOR
        HIREDIS_PATCH
        REDIS_OK
        REDIS_ERR
        REDIS_ERR_IO           # redisContext.err: a read or write failed; errno says why
        REDIS_REPLY_STRING
        REDIS_REPLY_ARRAY
        REDIS_REPLY_INTEGER
        REDIS_REPLY_NIL
        REDIS_REPLY_STATUS
        REDIS_REPLY_ERROR

    # Fields that 0.14 and 1.x both have, with the same meaning: the bytes received and not yet
    # parsed are buf[pos:len]; ridx is -1 between replies, 0 while a reply's first line or value
    # is read, above 0 inside an aggregate's elements.
    ctypedef struct redisReader:
        char *buf
        size_t pos
        size_t len
        int ridx

    ctypedef struct redisReply:
        int type
        long long integer
        size_t len
        char *str
        size_t elements        # an array's (a batched script's reply)
        redisReply **element

    ctypedef struct redisContext:
        int err
        char errstr[128]
        int fd
        redisReader *reader
        char *obuf             # an sds string: what is queued to be written ("" when nothing)

    redisContext *redisConnectNonBlock(const char *ip, int port)
    redisContext *redisConnectUnixNonBlock(const char *path)
    void redisFree(redisContext *c)
    int redisBufferRead(redisContext *c)
    int redisBufferWrite(redisContext *c, int *done)
    int redisAppendCommandArgv(redisContext *c, int argc, const char **argv,
                               const size_t *argvlen)
    int redisAppendFormattedCommand(redisContext *c, const char *cmd, size_t len)
    int redisFormatCommandArgv(char **target, int argc, const char **argv,
                               const size_t *argvlen)
    void redisFreeCommand(char *cmd)
    int redisReaderFeed(redisReader *r, const char *buf, size_t len)
    int redisReaderGetReply(redisReader *r, void **reply)
    void freeReplyObject(void *reply)
