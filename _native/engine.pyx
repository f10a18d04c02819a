# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""The native engine: the engine contract (hiredlock/_engines/contract.py) on non-blocking libhiredis.

One round: every command for every master is formatted and written before any reply is read; then
poll() waits on all sockets at once, with the GIL released, and libhiredis parses the replies into
C structs. Python objects are made only for the result. The scripts, the outcome codes and every
timing rule come from the Python package; this file only moves bytes and counts votes.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport PyObject
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memset, strlen, strncmp

from libhiredis cimport (
    HIREDIS_MAJOR,
    HIREDIS_MINOR,
    HIREDIS_PATCH,
    REDIS_ERR,
    REDIS_ERR_IO,
    REDIS_REPLY_ERROR,
    REDIS_REPLY_INTEGER,
    REDIS_REPLY_NIL,
    REDIS_REPLY_STATUS,
    freeReplyObject,
    redisAppendFormattedCommand,
    redisBufferRead,
    redisBufferWrite,
    redisConnectNonBlock,
    redisConnectUnixNonBlock,
    redisContext,
    redisFree,
    redisReader,
    redisReaderFeed,
    redisReaderGetReply,
    redisReply,
)

import os

from hiredlock._engines import connect as connecting
from hiredlock._engines import poller as _poller
from hiredlock._engines import resolver as _resolver
from hiredlock._core import scripts as _scripts
from hiredlock._engines import tls as _tls
from hiredlock._engines.connect import LOCAL_ERRNOS, LOCAL_ERROR_PREFIX


cdef extern from "hl_platform.h" nogil:
    # poll() / WSAPoll(), the monotonic clock, SO_ERROR, and fork detection: see that header.
    ctypedef int hl_socket  # SOCKET (64-bit) on Windows, int elsewhere
    ctypedef struct hl_pollfd:
        hl_socket fd
        short events
        short revents
    enum:
        POLLIN
        POLLOUT
        POLLERR
        POLLHUP
        POLLNVAL
        HL_POLLRDHUP
    int hl_poll(hl_pollfd *fds, unsigned long count, int timeout_ms)
    int hl_poll_interrupted()
    int64_t hl_now_ns()
    int hl_socket_error(hl_socket fd)
    int hl_peer_closed(hl_socket fd)
    long hl_send(hl_socket fd, const char *data, size_t length)
    int hl_send_error()
    int hl_on_fork_in_child(void (*child)())
    void hl_set_noinherit(hl_socket fd)
    const char *hl_error_text(int error)
    int hl_is_reset(int error)
    hl_socket hl_context_fd(redisContext *ctx)  # ctx.fd: redisFD (SOCKET) on Windows


cdef extern from *:
    """
    #ifdef _WIN32
    static void hl_close_socket(hl_socket fd) { closesocket(fd); }
    #else
    #include <unistd.h>
    static void hl_close_socket(int fd) { close(fd); }
    #endif
    """
    # closes the socket only: for a connection whose libhiredis memory is not to be touched
    void close_socket "hl_close_socket" (hl_socket fd) nogil


HIREDIS_VERSION = f"{HIREDIS_MAJOR}.{HIREDIS_MINOR}.{HIREDIS_PATCH}"

# Outcome codes, taken from the Python package so that both engines speak the same numbers.
cdef uint8_t OK = _scripts.Outcome.OK
cdef uint8_t TAKEN = _scripts.Outcome.TAKEN
cdef uint8_t TIMEOUT = _scripts.Outcome.TIMEOUT
cdef uint8_t CONN_ERROR = _scripts.Outcome.CONN_ERROR
cdef uint8_t ERROR = _scripts.Outcome.ERROR
cdef uint8_t SKIPPED = _scripts.Outcome.SKIPPED
cdef uint8_t PENDING = 255
cdef int MAX_STALE = _scripts.MAX_STALE_REPLIES
cdef int BACKOFF_MIN_MS = _scripts.RECONNECT_BACKOFF_MIN_MS
cdef int BACKOFF_MAX_MS = _scripts.RECONNECT_BACKOFF_MAX_MS
# The largest reply a lock command may get: libhiredis keeps a reply's bytes until it is whole,
# and builds an array's elements as they come, so a master could make it take any amount of
# memory otherwise.
cdef size_t MAX_REPLY = _scripts.MAX_REPLY_BYTES
# A connection opened in a round has at least this long from the round's start (see _scripts).
cdef int64_t CONNECT_MIN_NS = <int64_t>(_scripts.CONNECT_TIMEOUT_MIN_MS * 1e6)
# A round that waits takes the GIL this often to run Python's signal handlers: a signal may be
# delivered to another thread than the one in poll() (no EINTR here then), and WSAPoll is never
# interrupted at all. A round that decides sooner never takes it.
cdef int64_t SIGNAL_SLICE_NS = 10 * 1000000
# How often a round looks whether the sentinels name a new master for a group it is connected to
# (a cache read: _resolver asks the sentinels in the background).
cdef int64_t SENTINEL_CHECK_NS = <int64_t>(_resolver.SENTINEL_CHECK_S * 1e9)
# What a vote says when a connection did not start: the Python package's texts (_engines/connect.py), the
# same on both engines.
cdef bytes _CONNECT_TIMED_OUT = connecting.CONNECT_TIMED_OUT.encode()
cdef bytes _TLS_HANDSHAKE_TIMED_OUT = connecting.TLS_HANDSHAKE_TIMED_OUT.encode()
cdef bytes _PLAINTEXT_RESET = connecting.PLAINTEXT_RESET.encode()
cdef const char *CONNECT_TIMED_OUT = _CONNECT_TIMED_OUT
cdef const char *TLS_HANDSHAKE_TIMED_OUT = _TLS_HANDSHAKE_TIMED_OUT
cdef const char *PLAINTEXT_RESET = _PLAINTEXT_RESET
# What fds_wanted() reports, in the event loop's terms (hiredlock._engines.poller's).
cdef int EVENT_IN = _poller.POLLIN
cdef int EVENT_OUT = _poller.POLLOUT

# A connect that fails for want of this process's own resources is a local error, not the
# master's (see hiredlock/_engines/connect.py): libhiredis reports it as the errno's text, at the end of
# its message ("Can't create socket: Too many open files").
_LOCAL_TEXTS = tuple(os.strerror(code).encode() for code in sorted(LOCAL_ERRNOS))
_LOCAL_PREFIX = LOCAL_ERROR_PREFIX.encode()
cdef int n_local_texts = len(_LOCAL_TEXTS)
cdef const char *local_texts[8]
for _index, _text in enumerate(_LOCAL_TEXTS[:8]):
    local_texts[_index] = _text
cdef const char *local_prefix = _LOCAL_PREFIX


cdef bint is_local_failure(const char *text) noexcept nogil:
    """Whether libhiredis's connect error text is one of the local errors."""
    cdef size_t length = strlen(text)
    cdef size_t tail
    cdef int j
    for j in range(n_local_texts if n_local_texts < 8 else 8):
        tail = strlen(local_texts[j])
        if tail <= length and strncmp(text + length - tail, local_texts[j], tail) == 0:
            return True
    return False


SET_HEAD = (b"SET",)
NUMKEYS = tuple(str(count).encode() for count in range(10))

cdef enum Kind:
    KIND_SET
    KIND_SCRIPT

cdef enum State:
    DOWN         # no connection
    CONNECTING   # non-blocking connect() not confirmed yet
    READY        # connected

cdef size_t MAX_DETAIL = 400
cdef enum:
    WHY_SIZE = 96              # room for the reason take_reply() refuses a reply
    TLS_WHY_SIZE = 256         # room for the reason a TLS channel failed (OpenSSL's words)
    MAX_LOCAL_DETAIL = 200     # room for a local connect failure's vote detail

# Incremented in a child after fork(): an engine made before the fork must not touch its sockets.
cdef int fork_generation = 0


cdef void after_fork_in_child() noexcept nogil:
    global fork_generation
    fork_generation += 1


hl_on_fork_in_child(after_fork_in_child)


cdef inline int64_t now_ns() noexcept nogil:
    return hl_now_ns()


cdef inline size_t format_int(char *buffer, long long value) noexcept nogil:
    return <size_t>snprintf(buffer, 24, b"%lld", value)


cdef enum:
    MAX_PARTS = 4              # shared leading or trailing arguments of a command
    MAX_ARGS = 16              # per-item arguments (keys and values) of one command


# Commands are laid out in RESP here rather than by libhiredis's redisFormatCommandArgv, which
# prints every length with sprintf: that alone was a sixth of a lock cycle's instructions.

cdef inline size_t command_size(int argc, const size_t *argvlen) noexcept nogil:
    """An upper bound of the RESP size of a command: *argc, then $len and the bytes per argument."""
    cdef size_t total = 24
    cdef int j
    for j in range(argc):
        total += argvlen[j] + 26
    return total


cdef inline char *put_decimal(char *out, size_t value) noexcept nogil:
    cdef char digits[24]
    cdef int n = 0
    while True:
        digits[n] = <char>(48 + value % 10)
        n += 1
        value //= 10
        if value == 0:
            break
    while n > 0:
        n -= 1
        out[0] = digits[n]
        out += 1
    return out


cdef char *put_command(char *out, int argc, const char **argv,
                       const size_t *argvlen) noexcept nogil:
    """Writes the command in RESP at out (room: command_size); returns the end."""
    cdef int j
    out[0] = 42  # '*'
    out = put_decimal(out + 1, <size_t>argc)
    out[0] = 13
    out[1] = 10
    out += 2
    for j in range(argc):
        out[0] = 36  # '$'
        out = put_decimal(out + 1, argvlen[j])
        out[0] = 13
        out[1] = 10
        memcpy(out + 2, argv[j], argvlen[j])
        out += 2 + argvlen[j]
        out[0] = 13
        out[1] = 10
        out += 2
    return out


cdef int format_command(char **target, int argc, const char **argv,
                        const size_t *argvlen) noexcept nogil:
    """The command in RESP in a new buffer (free() it); its length, or -1 when out of memory."""
    cdef char *buffer = <char *>malloc(command_size(argc, argvlen))
    if buffer == NULL:
        return -1
    target[0] = buffer
    return <int>(put_command(buffer, argc, argv, argvlen) - buffer)

cdef extern from "Python.h":
    # Borrowed references, no reference counting: for the tuples of bytes a round points into.
    PyObject *tuple_item "PyTuple_GET_ITEM" (object tuple, Py_ssize_t index)
    char *bytes_data "PyBytes_AS_STRING" (PyObject *value)
    Py_ssize_t bytes_size "PyBytes_GET_SIZE" (PyObject *value)


cdef inline int _parts(tuple parts, const char **ptr, size_t *length) except -1:
    """Points at the bytes of a few shared arguments (the tuple keeps them alive)."""
    cdef Py_ssize_t j
    cdef Py_ssize_t count = len(parts)
    cdef PyObject *part
    if count > MAX_PARTS:
        raise ValueError("too many shared arguments")
    for j in range(count):
        part = tuple_item(parts, j)
        ptr[j] = bytes_data(part)
        length[j] = bytes_size(part)
    return <int>count


cdef struct Command:
    Kind kind
    int n_items                # one command per item (lock) and master
    int n_head                 # SET | EVALSHA sha numkeys
    const char *head[MAX_PARTS]
    size_t head_len[MAX_PARTS]
    const char *eval_head[MAX_PARTS]   # EVAL source numkeys, sent after NOSCRIPT
    size_t eval_head_len[MAX_PARTS]
    int n_args                 # per item: key token (SET) or keys and args (scripts)
    const char **args          # [item * n_args + j] (the engine's scratch arrays)
    size_t *args_len
    int n_tail                 # NX PX ttl (SET)
    const char *tail[MAX_PARTS]
    size_t tail_len[MAX_PARTS]
    bint want_values
    uint32_t script_bit        # this script's bit in Master.scripts_known (0: not tracked)
    # Every item's command (EVALSHA for scripts), formatted once, back to back, for all masters:
    # item k is batch[item_end[k - 1]:item_end[k]].
    char *batch
    size_t *item_end


cdef struct Redo:
    # An EVAL to send if the reply to command number `seq` (a script sent as EVALSHA in a round
    # that ended before its reply came) turns out to be NOSCRIPT.
    unsigned long long seq
    char *command
    int length
    Redo *next


cdef struct Master:
    const char *host           # NULL for a unix socket
    int port
    const char *path           # NULL for TCP
    bint named                 # host is a name: connect to `address`, looked up before the round
    const char *address        # this round's numeric address for a named host; NULL: none
    char resolve_error[160]    # why a named host has no address
    redisContext *ctx
    State state
    int64_t connect_deadline   # a connect still pending then is given up
    int64_t down_until         # acquire rounds do not reconnect before this (backoff)
    int backoff_ms
    char last_error[300]       # why it last failed, for the votes of rounds that back off
    int handshake              # AUTH/SELECT replies still owed (they come first)
    int stale                  # replies owed to abandoned rounds (they come next)
    unsigned long long sent    # commands queued on this connection so far
    unsigned long long received  # replies read from it so far: reply n answers command n
    Redo *redo_head            # EVALs owed to abandoned script commands, in command order
    Redo *redo_tail
    # Bit s: script s was sent on this connection as EVAL, so the server has it cached before any
    # later command of the connection runs, and EVALSHA is safe (a NOSCRIPT, after a SCRIPT
    # FLUSH, is answered with the EVAL, in its round or late). Until then the script goes as EVAL,
    # and a master that stopped reading is sent the source once, not with every command.
    uint32_t scripts_known
    # the handshake, formatted once: AUTH [user] password, SELECT db
    int auth_argc
    const char *auth_argv[3]
    size_t auth_len[3]
    int select_db              # -1: no SELECT
    # this round's reply slots: key indices in the order the replies will come
    int *slots
    unsigned long long *slot_seq  # the command number of each slot
    int slot_head
    int slot_tail
    int slot_cap
    bint want_write            # obuf not flushed yet
    bint failed                # failed in this round
    bint waited                # wait_all rounds wait for it (it is not lagging)
    bint lagging               # a round timed out on it; cleared once it has caught up
    bint unreached             # its last failure came before anything was written to it
    # its connection opened or came up in this round, or came up just before it: its login and
    # first commands go in this round (CONNECT_MIN_NS applies)
    bint cold
    bint unqueued              # no round's commands queued on its connection yet
    int64_t last_round_end     # when a round last ended with this connection open
    # In an event-fed round a closed connection's socket stays open in `doomed` until the round
    # has told its driver (before_close), which must take the fd off its event loop before the
    # number can be reused.
    bint defer_free
    redisContext *doomed
    # TLS (see hiredlock/_engines/tls.py): the master's connections carry every byte through a
    # TLSChannel (NativeEngine._channels[i], made once the TCP connect is confirmed; called with
    # the GIL); plaintext masters never take the GIL for I/O.
    bint tls
    bint has_channel           # the current connection's channel exists (READY: handshake done)
    bint tls_wants_write       # the channel holds bytes the socket has not taken yet
    bint demoted               # a named master answered READONLY in this round
    bint sentinel              # a Sentinel group's master (named: see _resolve)
    int64_t check_after        # a sentinel master's address is looked at again from then
    char tls_error[TLS_WHY_SIZE]  # why the channel last failed


cdef void forget_redo(Master *m, unsigned long long up_to) noexcept nogil:
    """Frees the owed EVALs of commands numbered below up_to."""
    cdef Redo *head
    while m.redo_head != NULL and m.redo_head.seq < up_to:
        head = m.redo_head
        m.redo_head = head.next
        free(head.command)
        free(head)
    if m.redo_head == NULL:
        m.redo_tail = NULL


cdef Redo *late_reply(Master *m, redisReply *reply) noexcept nogil:
    """A reply to an abandoned round (number m.received - 1): dropped, unless it is a script's
    NOSCRIPT: then its EVAL is returned, for the caller to send (and to free_redo) at once; its
    own reply will be dropped in turn."""
    cdef unsigned long long seq = m.received - 1
    cdef Redo *redo
    cdef Redo *again = NULL
    m.stale -= 1
    forget_redo(m, seq)
    redo = m.redo_head
    if (redo != NULL and redo.seq == seq and reply.type == REDIS_REPLY_ERROR
            and strncmp(reply.str, b"NOSCRIPT", 8) == 0):
        m.redo_head = redo.next
        if m.redo_head == NULL:
            m.redo_tail = NULL
        again = redo
    forget_redo(m, seq + 1)
    m.lagging = m.lagging and m.stale > 0
    return again


cdef void free_redo(Redo *redo) noexcept nogil:
    free(redo.command)
    free(redo)


cdef inline const char *pending_bound(redisReader *r, char *why) noexcept nogil:
    """NULL, or why the reply not complete yet is refused: its bytes so far exceed MAX_REPLY."""
    if r.len - r.pos <= MAX_REPLY:
        return NULL
    snprintf(why, WHY_SIZE, b"reply too large: over %llu bytes pending and not complete",
             <unsigned long long>MAX_REPLY)
    return why


cdef int odd_reply(redisReader *r, char kind, char *why) noexcept nogil:
    """A reply of a type lock commands do not get starts at r.pos. 0: libhiredis may read it (a
    scalar, bounded by pending_bound() like any other, or a nil or empty array); 1: its length
    line has not all come yet; -1: refused, with the reason in why (WHY_SIZE bytes)."""
    cdef size_t start = r.pos + 1
    cdef size_t end, digits_from
    cdef unsigned long long count = 0
    cdef bint negative
    if kind == 37 or kind == 126 or kind == 62 or kind == 124:  # RESP3 '%' '~' '>' '|'
        snprintf(why, WHY_SIZE, b"protocol error: unexpected reply type '%c'", kind)
        return -1
    if kind != 42:  # not '*'
        return 0
    # An array: libhiredis would allocate its element table for the length it announces, and
    # build each element as it comes, before the reply is whole.
    end = start
    negative = end < r.len and r.buf[end] == 45  # '-'
    if negative:
        end += 1
    digits_from = end
    while end < r.len and end - start < 21 and 48 <= r.buf[end] <= 57:
        count = count * 10 + <unsigned long long>(r.buf[end] - 48)
        end += 1
    if end == r.len and end - start < 21:
        return 1
    if end == r.len or r.buf[end] != 13 or end == digits_from or end - digits_from > 19:
        snprintf(why, WHY_SIZE, b"protocol error: bad array length")
        return -1
    if negative:
        if count == 1:
            return 0
        snprintf(why, WHY_SIZE, b"protocol error: bad array length")
        return -1
    if count == 0:
        return 0
    if count > MAX_REPLY // 3:  # each element takes 3 bytes at least
        snprintf(why, WHY_SIZE, b"reply too large: an array of %.*s elements",
                 <int>(end - digits_from), r.buf + digits_from)
    else:
        snprintf(why, WHY_SIZE, b"unexpected array reply")
    return -1


cdef inline const char *take_reply(redisReader *r, void **raw, char *why) noexcept nogil:
    """Takes the next whole reply out of the reader into raw[0] (NULL when none has all come
    yet). Returns NULL, or why the connection must go: a protocol error, or a reply too large
    for a lock command (why is room for the text, WHY_SIZE bytes)."""
    cdef char kind
    cdef int ahead
    raw[0] = NULL
    if r.ridx == -1 and r.pos < r.len:
        # A reply starts at r.pos. Lock commands get status, integer, bulk (nil) or error
        # replies; any other type is looked at before libhiredis allocates for it.
        kind = r.buf[r.pos]
        if kind != 58 and kind != 43 and kind != 36 and kind != 45:  # ':' '+' '$' '-'
            ahead = odd_reply(r, kind, why)
            if ahead < 0:
                return why
            if ahead > 0:
                return pending_bound(r, why)
    if redisReaderGetReply(r, raw) == REDIS_ERR:
        return b"protocol error in the reply"
    if raw[0] == NULL:
        return pending_bound(r, why)
    return NULL


cdef void drop(Master *m) noexcept nogil:
    """Closes the connection (close() only: no bytes are sent, safe in a forked child)."""
    if m.ctx != NULL:
        if m.defer_free and m.doomed == NULL:
            m.doomed = m.ctx
        else:
            redisFree(m.ctx)
        m.ctx = NULL
    forget_redo(m, <unsigned long long>-1)
    m.sent = 0
    m.received = 0
    m.state = DOWN
    m.stale = 0
    m.handshake = 0
    m.want_write = False
    m.lagging = False
    m.scripts_known = 0
    m.has_channel = False
    m.tls_wants_write = False
    m.demoted = False


cdef void bury(Master *m) noexcept nogil:
    """Closes the socket a deferred drop() kept open (see Master.doomed)."""
    if m.doomed != NULL:
        redisFree(m.doomed)
        m.doomed = NULL


cdef void fail(Master *m, int64_t now) noexcept nogil:
    """Drops the connection after a failure and pauses reconnects, longer each time."""
    m.unreached = m.state != READY
    drop(m)
    m.backoff_ms = m.backoff_ms * 2
    if m.backoff_ms < BACKOFF_MIN_MS:
        m.backoff_ms = BACKOFF_MIN_MS
    if m.backoff_ms > BACKOFF_MAX_MS:
        m.backoff_ms = BACKOFF_MAX_MS
    m.down_until = now + <int64_t>m.backoff_ms * 1000000


cdef inline const char *connect_timed_out(Master *m) noexcept nogil:
    """Why a connection still connecting at its deadline failed: a TLS master has its channel
    once the TCP connect is confirmed, and then it is the handshake that timed out."""
    return TLS_HANDSHAKE_TIMED_OUT if m.has_channel else CONNECT_TIMED_OUT


cdef inline const char *plain_failure(Master *m, const char *text, int error) noexcept nogil:
    """Why a plaintext connection failed to read or write (libhiredis's or the OS's `text`), or
    PLAINTEXT_RESET when it was reset (`error`) before any reply came: a TLS port."""
    if m.received == 0 and m.path == NULL and hl_is_reset(error):
        return PLAINTEXT_RESET
    return text


cdef inline int connect_events(Master *m) noexcept nogil:
    """What a connection still connecting waits for: the end of the TCP connect, then (TLS) the
    server's handshake records, and room to send its own."""
    if not m.has_channel:
        return POLLOUT
    return POLLIN | POLLOUT if m.tls_wants_write else POLLIN


cdef class NativeRound


# final: its cdef methods are called directly (no vtable), so the C compiler may inline the
# steps that the sync loop and the event-fed round share.
@cython.final
cdef class NativeEngine:
    """Engine contract on libhiredis: one non-blocking connection per master."""

    cdef Master *masters
    cdef int n
    cdef int quorum
    cdef int generation
    cdef bint busy
    cdef bint beginning        # begin_*: the call hands out its round instead of running it
    cdef bint closed
    # Set before a round writes anything, cleared once it has accounted for every reply it is
    # still owed: if a round ever left without doing so, the next one drops every connection
    # rather than trust what they carry.
    cdef bint in_round
    cdef object specs          # keeps the host/path/password bytes alive
    cdef list _keepalive
    cdef int n_named           # masters given by host name (looked up by _resolver)
    # [master]: what _resolver looks up for a named master (a (host name, port) pair, or a
    # SentinelGroup), else None
    cdef list _places
    cdef list _addresses       # [master]: bytes behind Master.address (kept alive here)
    cdef list _channels        # [master]: a TLS master's TLSChannel (see Master.tls)
    cdef object pending_exc    # what a signal handler (or a lookup) raised in this round
    cdef dict script_bits      # sha -> its bit in Master.scripts_known
    # per-round scratch, grown as batches grow
    cdef int cap_items
    cdef uint8_t *codes        # [item * n + master]
    cdef long long *values     # [item * n + master]: integer replies, when asked for
    cdef int *oks
    cdef int *fails
    cdef int64_t *decided_at
    cdef char **details        # [item * n + master], malloc'd texts or NULL
    cdef hl_pollfd *fds
    cdef int *fd_master
    cdef const char **argv_ptr
    cdef size_t *argv_len
    cdef const char **args     # [item * n_args + j]: the round's per-item arguments
    cdef size_t *args_len
    cdef char *batch           # the round's commands, formatted (see Command.batch)
    cdef size_t batch_cap
    cdef size_t *item_end
    cdef long long ttl_cached  # SET's PX argument, kept from the last round that had this ttl
    cdef bytes ttl_text
    # the round in progress
    cdef int c_n_items
    cdef int c_undecided
    cdef int64_t c_timeout_ns
    cdef int64_t c_t0
    cdef int64_t c_deadline        # masters connected before the round are waited for until then
    cdef int64_t c_cold_deadline   # masters whose connection opens in the round: until then
    cdef bint c_wait_all
    cdef bint c_best_effort
    cdef bint c_extended           # past c_deadline, waiting for masters connected in the round
    cdef bint c_details            # some vote of the round has a detail text (to free)
    cdef bint c_owed               # what _wanted() found
    cdef bint c_owed_waited

    name = "native"

    def __cinit__(self, masters, quorum=None):
        cdef int i
        specs = tuple(masters)
        self.n = len(specs)
        if self.n == 0:
            raise ValueError("masters must name at least one Redis master")
        self.quorum = self.n // 2 + 1 if quorum is None else quorum
        self.masters = <Master *>calloc(self.n, sizeof(Master))
        self.fds = <hl_pollfd *>calloc(self.n, sizeof(hl_pollfd))
        self.fd_master = <int *>calloc(self.n, sizeof(int))
        self.argv_ptr = <const char **>calloc(2 * MAX_PARTS + MAX_ARGS, sizeof(char *))
        self.argv_len = <size_t *>calloc(2 * MAX_PARTS + MAX_ARGS, sizeof(size_t))
        if (self.masters == NULL or self.fds == NULL or self.fd_master == NULL
                or self.argv_ptr == NULL or self.argv_len == NULL):
            raise MemoryError()
        self._keepalive = []
        self._places = [None] * self.n
        self._addresses = [None] * self.n
        self._channels = [None] * self.n
        self.script_bits = {}
        self.specs = specs
        self.generation = fork_generation
        for i in range(self.n):
            self._setup_master(i, specs[i])
        self._grow(1)
        _resolver.prefetch([place for place in self._places if place is not None])

    cdef _setup_master(self, int i, spec):
        cdef Master *m = &self.masters[i]
        m.state = DOWN
        if spec.path is not None:
            m.path = self._hold(spec.path.encode())
        elif spec.sentinel is not None:
            # its address is the master the sentinels name: see _resolve
            m.named = True
            m.sentinel = True
            snprintf(m.resolve_error, sizeof(m.resolve_error), b"%s", b"not looked up yet")
            self._places[i] = spec.sentinel
            self.n_named += 1
        else:
            m.host = self._hold(spec.host.encode())
            m.port = spec.port
            if _resolver.numeric_family(spec.host) is None:
                # hiredis would call getaddrinfo() with the name in the round: see _resolve
                m.named = True
                snprintf(m.resolve_error, sizeof(m.resolve_error), b"%s", b"not looked up yet")
                self._places[i] = (spec.host, spec.port)
                self.n_named += 1
        m.tls = spec.tls is not None
        m.select_db = spec.db if spec.db else -1
        m.auth_argc = 0
        if spec.password is not None:
            m.auth_argv[0] = self._hold(b"AUTH")
            m.auth_len[0] = 4
            m.auth_argc = 1
            if spec.username is not None:
                m.auth_argv[1] = self._hold(spec.username.encode())
                m.auth_len[1] = len(spec.username.encode())
                m.auth_argc = 2
            password = spec.password.encode()
            m.auth_argv[m.auth_argc] = self._hold(password)
            m.auth_len[m.auth_argc] = len(password)
            m.auth_argc += 1

    cdef const char *_hold(self, bytes value):
        self._keepalive.append(value)
        return PyBytes_AS_STRING(value)

    cdef int _grow(self, int n_items) except -1:
        """Makes the scratch arrays big enough for a batch of n_items."""
        cdef int i
        cdef size_t cells
        if n_items <= self.cap_items:
            return 0
        cells = <size_t>n_items * self.n
        self._free_scratch()
        self.codes = <uint8_t *>malloc(cells)
        self.values = <long long *>malloc(cells * sizeof(long long))
        self.oks = <int *>malloc(n_items * sizeof(int))
        self.fails = <int *>malloc(n_items * sizeof(int))
        self.decided_at = <int64_t *>malloc(n_items * sizeof(int64_t))
        self.details = <char **>calloc(cells, sizeof(char *))
        self.args = <const char **>malloc(n_items * MAX_ARGS * sizeof(char *))
        self.args_len = <size_t *>malloc(n_items * MAX_ARGS * sizeof(size_t))
        self.item_end = <size_t *>malloc(n_items * sizeof(size_t))
        if (self.codes == NULL or self.values == NULL or self.oks == NULL or self.fails == NULL
                or self.decided_at == NULL or self.details == NULL or self.args == NULL
                or self.args_len == NULL or self.item_end == NULL):
            raise MemoryError()
        for i in range(self.n):
            # each item's command may be sent twice (EVAL after NOSCRIPT)
            free(self.masters[i].slots)
            free(self.masters[i].slot_seq)
            self.masters[i].slot_cap = 2 * n_items
            self.masters[i].slots = <int *>malloc(2 * n_items * sizeof(int))
            self.masters[i].slot_seq = <unsigned long long *>malloc(
                2 * n_items * sizeof(unsigned long long))
            if self.masters[i].slots == NULL or self.masters[i].slot_seq == NULL:
                raise MemoryError()
        self.cap_items = n_items
        return 0

    cdef void _free_scratch(self) noexcept:
        self.cap_items = 0
        free(self.codes)
        free(self.values)
        free(self.oks)
        free(self.fails)
        free(self.decided_at)
        free(self.details)
        free(self.args)
        free(self.args_len)
        free(self.item_end)
        self.args = NULL
        self.args_len = NULL
        self.item_end = NULL
        self.codes = NULL
        self.values = NULL
        self.oks = NULL
        self.fails = NULL
        self.decided_at = NULL
        self.details = NULL

    def __dealloc__(self):
        cdef int i
        if self.masters != NULL:
            self._close_all()
            for i in range(self.n):
                free(self.masters[i].slots)
                free(self.masters[i].slot_seq)
            free(self.masters)
        self._free_scratch()
        free(self.batch)
        free(self.fds)
        free(self.fd_master)
        free(self.argv_ptr)
        free(self.argv_len)

    def close(self):
        """Closes every connection (without I/O on them in a forked child)."""
        self._close_all()
        self.closed = True

    cpdef bint owes_replies(self):
        """True when a master still owes replies to a round that ended, or has bytes of one not
        written yet: commands of that round may still run there, after this moment."""
        cdef int i
        cdef Master *m
        for i in range(self.n):
            m = &self.masters[i]
            if m.ctx != NULL and (m.stale > 0 or m.redo_head != NULL or m.want_write):
                return True
        return False

    cdef void _close_all(self) noexcept:
        cdef int i
        cdef Master *m
        # In a child forked while a thread of the parent was in a round of this engine (with the
        # GIL released), that thread stopped anywhere: between libhiredis freeing a buffer and
        # replacing it (waiting for malloc's lock, which fork() holds), say. Its connections'
        # memory cannot be trusted, so only their sockets are closed and the rest is left.
        cdef bint torn = self.busy and self.generation != fork_generation
        for i in range(self.n):
            m = &self.masters[i]
            m.defer_free = False
            if torn:
                if m.ctx != NULL:
                    close_socket(hl_context_fd(m.ctx))
                m.ctx = NULL
                m.doomed = NULL
                m.redo_head = NULL
                m.redo_tail = NULL
            drop(m)
            bury(m)

    # -- the two calls of the contract, and the same rounds fed by an event loop ---------------

    cpdef object set_nx(self, keys, tokens, long long ttl_ms, double timeout_ms):
        """SET key token NX PX ttl_ms on every master; OK if set, TAKEN if the key exists."""
        if ttl_ms != self.ttl_cached or self.ttl_text is None:
            self.ttl_text = str(ttl_ms).encode()
            self.ttl_cached = ttl_ms
        if type(keys) is not tuple:
            keys = tuple(keys)
        if type(tokens) is not tuple:
            tokens = tuple(tokens)
        if len(keys) != len(tokens):
            raise ValueError("set_nx needs one token per key")
        return self._round(KIND_SET, SET_HEAD, (), (keys, tokens), True,
                           (b"NX", b"PX", self.ttl_text), timeout_ms, False, True, False, 0)

    cpdef object run_script(self, bytes sha, bytes source, int numkeys, argvs, double timeout_ms,
                            bint wait_all, bint want_values=False, bint honour_backoff=False):
        """EVALSHA sha numkeys *argv per item (EVAL source on a connection that has not run the
        script yet, and after NOSCRIPT). OK on a reply > 0."""
        cdef uint32_t bit = self.script_bits.get(sha, 0)
        if bit == 0 and len(self.script_bits) < 32:
            bit = (<uint32_t>1) << len(self.script_bits)
            self.script_bits[sha] = bit
        count = NUMKEYS[numkeys] if 0 <= numkeys < 10 else str(numkeys).encode()
        if type(argvs) is not tuple:
            argvs = tuple(argvs)
        return self._round(KIND_SCRIPT, (b"EVALSHA", sha, count), (b"EVAL", source, count),
                           argvs, False, (), timeout_ms, wait_all, honour_backoff, want_values,
                           bit)

    # The calls above, begun instead: with `beginning` set, _round starts the round and hands it
    # out (the sync calls pay one flag test for sharing their argument handling).

    def begin_set_nx(self, keys, tokens, long long ttl_ms, double timeout_ms):
        """Starts set_nx's round (commands queued and written as far as the sockets take them)
        and returns it (a NativeRound): a driver feeds it events, finish() gives its results.
        Host names are looked up in here, synchronously (bounded by the round's timeout)."""
        self.beginning = True
        try:
            return self.set_nx(keys, tokens, ttl_ms, timeout_ms)
        finally:
            self.beginning = False

    def begin_script(self, bytes sha, bytes source, int numkeys, argvs, double timeout_ms,
                     bint wait_all, bint want_values=False, bint honour_backoff=False):
        """Starts run_script's round; see begin_set_nx."""
        self.beginning = True
        try:
            return self.run_script(sha, source, numkeys, argvs, timeout_ms, wait_all,
                                   want_values, honour_backoff)
        finally:
            self.beginning = False

    def finish(self, NativeRound rnd not None):
        """The results of a round a driver is done with (ended first if need be)."""
        rnd.end()
        return rnd.results

    # -- one round -------------------------------------------------------------------------------

    cdef object _round(self, Kind kind, tuple head, tuple eval_head, tuple items, bint columns,
                       tuple tail, double timeout_ms, bint wait_all, bint honour_backoff,
                       bint want_values, uint32_t script_bit):
        """One round: run here with the GIL released (its results), or when beginning, started and
        handed back to be fed by a driver (a NativeRound). items: a tuple of rows (one tuple of
        arguments per item), or with columns, a tuple of columns (keys, tokens): item k's
        arguments are items[0][k], items[1][k]."""
        cdef int n_items = len(items[0]) if columns else len(items)
        cdef int n_args, i, j, k
        cdef int64_t end
        cdef Command sync_cmd
        cdef Command *cmd = &sync_cmd
        cdef NativeRound rnd = None
        cdef object value, row = None
        cdef bint begin = self.beginning
        if self.closed:
            raise RuntimeError("this engine is closed")
        if self.busy:
            raise RuntimeError("an engine cannot be used by two callers at once (a round of it"
                               " is in progress)")
        if begin:
            rnd = NativeRound.__new__(NativeRound)
            rnd.engine = self
            # the tuples the command points into, alive as long as the round
            rnd.keep = (head, eval_head, items, tail)
            rnd.ended = True  # until it is handed out
            rnd.results = []
            cmd = &rnd.cmd
        if n_items == 0:
            if begin:
                return rnd
            return []
        n_args = len(items) if columns else len(items[0])
        if not 0 < n_args <= MAX_ARGS:
            raise ValueError(f"a command takes 1 to {MAX_ARGS} arguments per item")
        self._grow(n_items)
        memset(cmd, 0, sizeof(Command))
        cmd.kind = kind
        cmd.n_items = n_items
        cmd.want_values = want_values
        cmd.script_bit = script_bit
        cmd.n_head = _parts(head, cmd.head, cmd.head_len)
        _parts(eval_head, cmd.eval_head, cmd.eval_head_len)
        cmd.n_tail = _parts(tail, cmd.tail, cmd.tail_len)
        cmd.n_args = n_args
        cmd.args = self.args
        cmd.args_len = self.args_len
        cmd.item_end = self.item_end
        try:
            # `items` keeps every bytes object alive while the GIL is released.
            for k in range(n_items):
                if not columns:
                    row = items[k]
                    if len(row) != n_args:
                        raise ValueError("every item must have the same number of arguments")
                    if type(row) is not tuple:
                        row = tuple(row)
                for j in range(n_args):
                    # (set_nx's columns are tuples: see set_nx)
                    value = (<tuple>items[j])[k] if columns else (<tuple>row)[j]
                    if type(value) is not bytes:
                        raise TypeError("command arguments must be bytes")
                    cmd.args[k * n_args + j] = PyBytes_AS_STRING(value)
                    cmd.args_len[k * n_args + j] = PyBytes_GET_SIZE(value)
            self._format_batch(cmd)
            self.busy = True
            if begin:
                if self.generation != fork_generation:
                    self._forget_inherited()
                # Host names are looked up here, synchronously, bounded by the round's timeout.
                if not self._start(cmd, <int64_t>(timeout_ms * 1e6), wait_all, honour_backoff):
                    exc = self.pending_exc
                    self.pending_exc = None
                    raise exc
                for i in range(self.n):
                    self.masters[i].defer_free = True
                # From here on the round holds the engine until it ends.
                rnd.ended = False
                return rnd
            with nogil:
                # Only C memory owned by this engine, or kept alive by the tuples above, is
                # touched in here, except where _run takes the GIL for a moment (a name lookup,
                # Python's signal handlers); the result is built after.
                if self.generation != fork_generation:
                    self._forget_inherited()
                self._run(cmd, <int64_t>(timeout_ms * 1e6), wait_all, honour_backoff)
                end = now_ns()
            if self.pending_exc is not None:
                # A signal handler raised (or a lookup was interrupted): the round has ended
                # and accounted for every reply it is still owed, so the exception may go.
                exc = self.pending_exc
                self.pending_exc = None
                raise exc
            return self._results(cmd, self.c_t0, end)
        finally:
            if rnd is None or rnd.ended:  # a round handed out keeps the engine until it ends
                self.busy = False
                self._clear_details(n_items)

    cdef inline void _clear_details(self, int n_items) noexcept nogil:
        cdef int i
        if not self.c_details:
            return
        self.c_details = False
        for i in range(n_items * self.n):
            free(self.details[i])
            self.details[i] = NULL

    cdef int _format_batch(self, Command *cmd) except -1:
        """Formats every item's command (EVALSHA for scripts) into the engine's batch buffer."""
        cdef size_t need = 0
        cdef char *out
        cdef char *grown
        cdef int k, argc
        for k in range(cmd.n_items):
            argc = self._argv(cmd, k, False)
            need += command_size(argc, self.argv_len)
        if need > self.batch_cap:
            grown = <char *>realloc(self.batch, need)
            if grown == NULL:
                raise MemoryError()
            self.batch = grown
            self.batch_cap = need
        out = self.batch
        for k in range(cmd.n_items):
            argc = self._argv(cmd, k, False)
            out = put_command(out, argc, self.argv_ptr, self.argv_len)
            cmd.item_end[k] = <size_t>(out - self.batch)
        cmd.batch = self.batch
        return 0

    cdef void _forget_inherited(self) noexcept nogil:
        # In a forked child: close our copies of the parent's sockets, sending nothing.
        cdef int i
        for i in range(self.n):
            drop(&self.masters[i])
        self.generation = fork_generation

    cdef list _results(self, Command *cmd, int64_t t0, int64_t end):
        cdef int k, i
        cdef uint8_t *row
        cdef list out = []
        cdef dict details
        for k in range(cmd.n_items):
            row = self.codes + k * self.n
            details = None
            for i in range(self.n):
                if row[i] == PENDING:
                    row[i] = SKIPPED if self.decided_at[k] else TIMEOUT
                if self.details[k * self.n + i] != NULL:
                    if details is None:
                        details = {}
                    details[i] = self.details[k * self.n + i].decode("utf-8", "replace")
            out.append((
                PyBytes_FromStringAndSize(<char *>row, self.n),
                (self.decided_at[k] if self.decided_at[k] else end) - t0,
                details,
                tuple([self.values[k * self.n + i] for i in range(self.n)])
                if cmd.want_values else None,
            ))
        return out

    cdef void _run(self, Command *cmd, int64_t timeout_ns, bint wait_all,
                   bint honour_backoff) noexcept nogil:
        """The sync driver: a whole round, polling with the GIL released. The event-fed round
        (NativeRound) is the same steps, with its waiting done by an event loop."""
        cdef int k, nfds, rc
        cdef bint last_look
        cdef int64_t remaining, wait, now, next_check
        if not self._start(cmd, timeout_ns, wait_all, honour_backoff):
            return  # interrupted before anything was written: nothing is owed
        next_check = self.c_t0 + SIGNAL_SLICE_NS
        while True:
            nfds = self._wanted()
            if self._stop(nfds):
                break
            now = now_ns()
            if now >= next_check:
                if self._signalled():
                    break
                now = now_ns()
                next_check = now + SIGNAL_SLICE_NS
            remaining = (self.c_cold_deadline if self.c_extended else self.c_deadline) - now
            # Past the deadline, take one more look without waiting: replies that are already
            # here count (a client descheduled past its deadline must not call masters that
            # answered in time dead).
            last_look = remaining <= 0
            wait = next_check - now
            if remaining < wait:
                wait = remaining if remaining > 0 else 0
            rc = hl_poll(self.fds, nfds, <int>((wait + 999999) // 1000000))
            if rc < 0:
                if not hl_poll_interrupted():
                    break
                if self._signalled():
                    break
                next_check = now_ns() + SIGNAL_SLICE_NS
                continue
            for k in range(nfds):
                if self.fds[k].revents:
                    self._service(self.fd_master[k], self.fds[k].revents, cmd)
            if last_look and not self._extend():
                break
        # Every way out of the loop above comes here, a signal handler's exception included.
        self._account(cmd)

    # The steps of a round, shared by the sync driver (_run) and the event-fed round.

    cdef inline bint _start(self, Command *cmd, int64_t timeout_ns, bint wait_all,
                            bint honour_backoff) noexcept nogil:
        """Starts a round: takes in what arrived since the last one, looks up host names, queues
        every command on every master and writes what the sockets take. False when a lookup was
        interrupted (the exception is in pending_exc): nothing was written, nothing is owed."""
        cdef int i
        cdef int64_t t0
        cdef Master *m
        memset(self.codes, PENDING, <size_t>cmd.n_items * self.n)
        memset(self.oks, 0, cmd.n_items * sizeof(int))
        memset(self.fails, 0, cmd.n_items * sizeof(int))
        memset(self.decided_at, 0, cmd.n_items * sizeof(int64_t))
        if cmd.want_values:
            memset(self.values, 0, <size_t>cmd.n_items * self.n * sizeof(long long))
        self.c_n_items = cmd.n_items
        self.c_undecided = cmd.n_items
        self.c_timeout_ns = timeout_ns
        self.c_wait_all = wait_all
        # The unlock after a failed attempt decides nothing anyone waits for: it goes to every
        # master but waits for the ones keeping up only, decided or not (see _engines/contract.py).
        self.c_best_effort = wait_all and honour_backoff
        self.c_extended = False

        # Take in what arrived since the last round: late replies, and closed connections.
        if self.in_round:
            for i in range(self.n):
                drop(&self.masters[i])
        self._refresh()
        # Host names are looked up now, before the round's clock starts, and only when some
        # named master is about to connect.
        if self.n_named and self._lookup_due() and not self._resolve(timeout_ns):
            self.c_t0 = now_ns()
            return False

        t0 = now_ns()
        self.c_t0 = t0
        self.c_deadline = t0 + timeout_ns
        # Masters whose connection opens in this round may take longer (see _scripts), and are
        # waited for past the deadline only while their answer can still decide a key.
        self.c_cold_deadline = t0 + (timeout_ns if timeout_ns > CONNECT_MIN_NS
                                     else CONNECT_MIN_NS)
        self.in_round = True

        # Queue every command on every master and write what can be written.
        for i in range(self.n):
            m = &self.masters[i]
            m.failed = False
            m.cold = m.ctx != NULL and m.state == READY and m.unqueued
            # Once every key is decided, a wait_all round does not wait for a master that let an
            # earlier round time out and has not caught up since, or that is still connecting
            # since an earlier round: one stopped master must not cost every release its
            # timeout. While a key is undecided every master is waited for (see _stop).
            m.waited = not m.lagging and m.state != CONNECTING
            m.slot_head = 0
            m.slot_tail = 0
            self._prepare(i, cmd, t0, honour_backoff)
        return True

    cdef inline int _wanted(self) noexcept nogil:
        """Fills fds (and fd_master) with what the round waits for on each socket; returns how
        many. Sets c_owed (some master the round still waits for owes it a reply or its
        connect: past the deadline, only masters connected in the round are waited for) and
        c_owed_waited (one of those is waited for once every key is decided). Every other
        socket is still read: a late reply counts while the round goes on."""
        cdef int i, events
        cdef int nfds = 0
        cdef bint owes
        cdef bint owed = False
        cdef bint owed_waited = False
        cdef bint extended = self.c_extended
        cdef Master *m
        for i in range(self.n):
            m = &self.masters[i]
            if m.failed or m.ctx == NULL:
                continue
            if m.state == CONNECTING:
                events = connect_events(m)
                owes = True
            elif m.slot_head != m.slot_tail:
                events = POLLIN | POLLOUT if m.want_write else POLLIN
                owes = True
            elif m.want_write:
                events = POLLIN | POLLOUT  # only flushing: it owes this round nothing
                owes = False
            else:
                continue
            if owes and (m.cold or not extended):
                owed = True
                owed_waited = owed_waited or m.waited
            self.fds[nfds].fd = hl_context_fd(m.ctx)
            self.fds[nfds].events = events
            self.fds[nfds].revents = 0
            self.fd_master[nfds] = i
            nfds += 1
        self.c_owed = owed
        self.c_owed_waited = owed_waited
        return nfds

    cdef inline bint _stop(self, int nfds) noexcept nogil:
        """Whether the round is over (the stop rules of _engines/contract.py), given what _wanted() just
        found. While a key is undecided, every master that may still answer is waited for
        (lagging ones too: skipping one the quorum needs would be a false failure); once all are
        decided, a wait_all round waits for the masters marked `waited` only."""
        if not self.c_owed:
            return True
        if self.c_undecided == 0 or self.c_best_effort:
            return not self.c_wait_all or not self.c_owed_waited
        return self.c_extended and not self._cold_can_decide()

    cdef inline bint _extend(self) noexcept nogil:
        """After the last look at the deadline: whether the round goes on, to the connect bound
        of the masters connected in it (_stop says whether any is still worth waiting for)."""
        if (not self.c_extended and not self.c_best_effort
                and self.c_cold_deadline > self.c_deadline):
            self.c_extended = True
            return True
        return False

    cdef inline void _account(self, Command *cmd) noexcept nogil:
        """Ends a round: what is still owed is read and dropped by a later round, or the
        connection goes."""
        cdef int i
        cdef Master *m
        cdef int64_t now = now_ns()
        for i in range(self.n):
            m = &self.masters[i]
            if m.ctx == NULL:
                continue
            m.last_round_end = now
            if m.demoted:
                m.demoted = False
                drop(m)
                self._look_again(i)
                continue
            if m.state == CONNECTING and now >= m.connect_deadline:
                self._explain_pending(i, connect_timed_out(m))
                snprintf(m.last_error, sizeof(m.last_error), b"not retried yet after: %s",
                         connect_timed_out(m))
                fail(m, now)
                continue
            if m.slot_tail > m.slot_head:
                m.stale += m.slot_tail - m.slot_head
                # (it timed out if the round ended at its own bound: an early-decided round
                # leaves the flag as it was)
                if now >= (self.c_cold_deadline if m.cold else self.c_deadline):
                    m.lagging = True
                if cmd.kind == KIND_SCRIPT:
                    self._owe_evals(m, cmd)
            if m.stale > MAX_STALE:
                fail(m, now)
        self.in_round = False

    cdef bint _signalled(self) noexcept with gil:
        """Runs Python's signal handlers; True when one raised (the exception is kept for the
        caller of the round, which raises it once the round is accounted for)."""
        try:
            PyErr_CheckSignals()
        except BaseException as exc:
            self.pending_exc = exc
            return True
        return False

    cdef bint _cold_can_decide(self) noexcept nogil:
        """Past the deadline: whether the masters connected in this round, still unanswered,
        could yet make an undecided key succeed (the others' silence counts as failure by now)."""
        cdef int i, k, possible
        cdef Master *m
        for k in range(self.c_n_items):
            if self.decided_at[k]:
                continue
            possible = self.oks[k]
            for i in range(self.n):
                m = &self.masters[i]
                if (m.cold and not m.failed and m.ctx != NULL
                        and self.codes[k * self.n + i] == PENDING):
                    possible += 1
            if possible >= self.quorum:
                return True
        return False

    cdef bint _lookup_due(self) noexcept nogil:
        """Whether a named master has no connection (this round may open one), or a Sentinel
        group's master is due for a look at where the sentinels say it is now."""
        cdef int i
        cdef int64_t now = now_ns()
        for i in range(self.n):
            if self.masters[i].named and (
                    self.masters[i].ctx == NULL
                    or (self.masters[i].sentinel and now >= self.masters[i].check_after)):
                return True
        return False

    cdef bint _resolve(self, int64_t timeout_ns) noexcept with gil:
        """Looks up the named masters that have no connection, all at once, waiting at most the
        round's timeout (_resolver answers from its cache, and waits only for a name's first
        lookup). False when interrupted (the exception is kept, as in _signalled)."""
        cdef int i
        cdef Master *m
        cdef bytes text, host
        cdef int64_t now = now_ns()
        indices = [i for i in range(self.n)
                   if self.masters[i].named and (
                       self.masters[i].ctx == NULL
                       or (self.masters[i].sentinel and now >= self.masters[i].check_after))]
        try:
            answers = _resolver.lookup_many(
                [self._places[i] for i in indices],
                max(timeout_ns, 0) / 1e9)
        except BaseException as exc:
            self.pending_exc = exc
            return False
        for i, answer in zip(indices, answers):
            m = &self.masters[i]
            if m.sentinel:
                m.check_after = now + SENTINEL_CHECK_NS
            if m.ctx != NULL:
                # A Sentinel group's master with a connection: if the sentinels name another
                # master now (a failover), the connection goes and this round opens a new one.
                # So it does when the cache names none any more (the sentinels have not answered
                # for the stale lifetime of their last answer): this round's vote is why.
                if not isinstance(answer, str):
                    host = answer.host.encode()
                    if host == self._addresses[i] and answer.port == m.port:
                        continue
                drop(m)
            if isinstance(answer, str):
                text = answer.encode("utf-8", "replace")
                m.address = NULL
                snprintf(m.resolve_error, sizeof(m.resolve_error), b"%s", <char *>text)
            else:
                self._addresses[i] = answer.host.encode()
                m.address = PyBytes_AS_STRING(self._addresses[i])
                m.port = answer.port  # (a Sentinel group's master has a port of its own)
        return True

    cdef void _look_again(self, int i) noexcept with gil:
        """A named master failed us: its address may have moved (a failover, a DNS change), so
        it is looked up again now, in the background (see _resolver.refresh)."""
        try:
            _resolver.refresh(self._places[i])
        except BaseException as exc:
            if self.pending_exc is None:
                self.pending_exc = exc

    cdef void _refresh(self) noexcept nogil:
        """Reads, without waiting, what idle connections received since the last round.

        Late replies to earlier rounds are dropped here, so a master that was merely slower than
        the quorum is waited for again; a connection the master closed meanwhile (a restart) is
        replaced in this round instead of failing it.
        """
        cdef int i, k, step, nfds = 0
        cdef Master *m
        cdef void *raw = NULL
        cdef redisReply *reply
        cdef Redo *redo
        cdef bint broken
        cdef char why[WHY_SIZE]
        cdef redisReader *reader
        cdef size_t pending
        for i in range(self.n):
            m = &self.masters[i]
            # Every open connection is looked at (one poll() for all): skipping those used a
            # moment ago saved a syscall but let a connection the server had just closed fail
            # the next round (a false LockLost on extend after CLIENT KILL).
            if m.ctx != NULL:
                self.fds[nfds].fd = hl_context_fd(m.ctx)
                self.fds[nfds].events = (connect_events(m) if m.state == CONNECTING
                                         else POLLIN | HL_POLLRDHUP)
                self.fds[nfds].revents = 0
                self.fd_master[nfds] = i
                nfds += 1
        if nfds == 0 or hl_poll(self.fds, nfds, 0) <= 0:
            return
        for k in range(nfds):
            if not self.fds[k].revents:
                continue
            i = self.fd_master[k]
            m = &self.masters[i]
            if m.state == CONNECTING:
                # A connect that completed after its round: confirm it now (a TLS master's
                # handshake goes on), or, if the server went away meanwhile (a restart), start
                # afresh in this round. Nothing was queued.
                if (self.fds[k].revents & (POLLERR | POLLHUP | POLLNVAL)
                        or (not m.has_channel and hl_socket_error(hl_context_fd(m.ctx)))):
                    drop(m)
                    continue
                if m.tls:
                    step = self._tls_step(i)
                    if step < 0:
                        drop(m)
                    if step <= 0:
                        continue
                    m.want_write = m.tls_wants_write
                m.state = READY
                m.backoff_ms = 0
                if self._handshake(i) != NULL:
                    drop(m)
                continue
            broken = self._fill(i) != NULL
            while not broken:
                reader = m.ctx.reader
                if take_reply(reader, &raw, why) != NULL:
                    broken = True  # the next round's connection starts afresh
                    break
                if raw == NULL:
                    if reader.ridx == -1 and reader.pos == reader.len:
                        break
                    # A reply has partly come: what else of it is here is read now, so that a
                    # huge one is found too large before the round, not in the middle of it.
                    pending = reader.len - reader.pos
                    broken = self._fill(i) != NULL
                    if not broken and reader.len - reader.pos == pending:
                        break  # nothing more yet
                    continue
                reply = <redisReply *>raw
                m.received += 1
                if m.handshake > 0:
                    m.handshake -= 1
                    broken = reply.type == REDIS_REPLY_ERROR  # the next connect reports it
                elif m.stale > 0:
                    redo = late_reply(m, reply)
                    broken = redo != NULL and self._resend(i, redo) != NULL
                else:
                    broken = True  # a reply nobody asked for: never guess what it answers
                freeReplyObject(raw)
            # The late replies and the end of the stream may have come together (a master that
            # answered, then died): the read above took the replies, not the end. A connection
            # whose peer has closed is replaced now, not found dead in the middle of the round.
            if not broken and (self.fds[k].revents & (HL_POLLRDHUP | POLLHUP | POLLERR)
                               or (HL_POLLRDHUP == 0 and hl_peer_closed(hl_context_fd(m.ctx)))):
                broken = True
            if not broken and m.want_write:
                broken = self._flush(i) != NULL
            if broken:
                drop(m)

    cdef void _prepare(self, int i, Command *cmd, int64_t now, bint honour_backoff) noexcept nogil:
        cdef Master *m = &self.masters[i]
        if m.state == CONNECTING and now >= m.connect_deadline:
            self._fail_master(i, CONN_ERROR, connect_timed_out(m), now)
            return
        if m.ctx == NULL:
            if honour_backoff and now < m.down_until and (cmd.kind == KIND_SET or m.unreached):
                # An acquire does not wait for a master that just failed, nor does the unlock
                # after a failed attempt when nothing could have reached that master; release
                # and extend always try.
                self._vote_master(i, CONN_ERROR, m.last_error)
                m.failed = True
                return
            if not self._connect(i, now):
                return
        if m.state == READY:
            self._queue_round(i, cmd, now)
        # else: commands are queued once the connect completes, if it does within this round; a
        # connection still connecting when the round ends has nothing queued, so nothing stale
        # can reach the master later.

    cdef void _queue_round(self, int i, Command *cmd, int64_t now) noexcept nogil:
        """Queues the handshake (on a new connection) and every command of the round; writes."""
        cdef Master *m = &self.masters[i]
        cdef int k
        m.unqueued = False
        # A script not sent on this connection yet goes as EVAL (see Master.scripts_known);
        # a script the engine does not track (more than 32) relies on the NOSCRIPT fallback.
        cdef bint as_eval = cmd.script_bit != 0 and not (m.scripts_known & cmd.script_bit)
        cdef const char *failure
        if as_eval:
            for k in range(cmd.n_items):
                failure = self._append_eval(i, cmd, k)
                if failure != NULL:
                    self._fail_master(i, CONN_ERROR, failure, now)
                    return
            m.scripts_known |= cmd.script_bit
        else:
            if m.slot_tail + cmd.n_items > m.slot_cap:
                self._fail_master(i, CONN_ERROR, b"out of memory", now)
                return
            if m.tls:
                failure = self._put(i, cmd.batch, cmd.item_end[cmd.n_items - 1])
                if failure != NULL:
                    self._fail_master(i, CONN_ERROR, failure, now)
            elif m.ctx.obuf != NULL and m.ctx.obuf[0] == 0:
                # Nothing queued before it (no login, no owed EVAL): the batch goes out straight
                # from the engine's buffer, without a copy into libhiredis's.
                self._send_batch(i, cmd, now)
            elif redisAppendFormattedCommand(
                    m.ctx, cmd.batch, cmd.item_end[cmd.n_items - 1]) == REDIS_ERR:
                self._fail_master(i, CONN_ERROR, b"out of memory", now)
            else:
                m.want_write = True
                self._write(i, now)
            if m.failed:
                return
            for k in range(cmd.n_items):
                m.slots[m.slot_tail] = k
                m.slot_seq[m.slot_tail] = m.sent
                m.slot_tail += 1
                m.sent += 1
            return
        m.want_write = True
        self._write(i, now)

    cdef void _send_batch(self, int i, Command *cmd, int64_t now) noexcept nogil:
        """Sends the round's batch on an idle connection; what the socket does not take now is
        queued in libhiredis's output buffer, written when the socket is writable."""
        cdef Master *m = &self.masters[i]
        cdef size_t total = cmd.item_end[cmd.n_items - 1]
        cdef long sent = hl_send(hl_context_fd(m.ctx), cmd.batch, total)
        cdef int error
        if sent < 0:
            error = hl_send_error()
            self._fail_master(i, CONN_ERROR, plain_failure(m, hl_error_text(error), error), now)
        elif <size_t>sent < total:
            if redisAppendFormattedCommand(m.ctx, cmd.batch + sent, total - sent) == REDIS_ERR:
                self._fail_master(i, CONN_ERROR, b"out of memory", now)
            else:
                m.want_write = True
        else:
            m.want_write = False

    cdef bint _connect(self, int i, int64_t now) noexcept nogil:
        cdef Master *m = &self.masters[i]
        if m.path != NULL:
            m.ctx = redisConnectUnixNonBlock(m.path)
        elif m.named:
            if m.address == NULL:
                # no address (yet): a failed connect, backed off like one (see _resolve)
                self._fail_master(i, CONN_ERROR, m.resolve_error, now)
                return False
            m.ctx = redisConnectNonBlock(m.address, m.port)
            m.address = NULL  # each connect uses the lookup made for its own round
        else:
            m.ctx = redisConnectNonBlock(m.host, m.port)
        if m.ctx == NULL:
            self._local_failure(i, b"out of memory")
            return False
        if m.ctx.err:
            if is_local_failure(m.ctx.errstr):
                self._local_failure(i, m.ctx.errstr)
            else:
                self._fail_master(i, CONN_ERROR, m.ctx.errstr, now)
            return False
        hl_set_noinherit(hl_context_fd(m.ctx))
        m.state = CONNECTING
        m.cold = True
        m.unqueued = True
        m.connect_deadline = now + (
            self.c_timeout_ns if self.c_timeout_ns > CONNECT_MIN_NS else CONNECT_MIN_NS)
        m.stale = 0
        m.handshake = 0
        return True

    cdef const char *_handshake(self, int i) noexcept nogil:
        """Queues AUTH and SELECT on a connection that has just connected; they answer first.
        NULL, or why the connection failed."""
        cdef Master *m = &self.masters[i]
        cdef const char *argv[2]
        cdef size_t argvlen[2]
        cdef char dbtext[24]
        cdef const char *failure
        if m.auth_argc:
            failure = self._put_argv(i, m.auth_argc, m.auth_argv, m.auth_len)
            if failure != NULL:
                return failure
            m.handshake += 1
            m.sent += 1
        if m.select_db >= 0:
            argv[0] = b"SELECT"
            argvlen[0] = 6
            argvlen[1] = format_int(dbtext, m.select_db)
            argv[1] = dbtext
            failure = self._put_argv(i, 2, argv, argvlen)
            if failure != NULL:
                return failure
            m.handshake += 1
            m.sent += 1
        return NULL

    cdef const char *_put_argv(self, int i, int argc, const char **argv,
                               const size_t *argvlen) noexcept nogil:
        cdef char *formatted = NULL
        cdef int length = format_command(&formatted, argc, argv, argvlen)
        cdef const char *failure
        if length < 0:
            return b"out of memory"
        failure = self._put(i, formatted, length)
        free(formatted)
        return failure

    cdef int _argv(self, Command *cmd, int k, bint as_eval) noexcept nogil:
        """Lays out item k's command in the engine's argv arrays; returns its argument count."""
        cdef int argc = 0
        cdef int j
        cdef const char **argv = self.argv_ptr
        cdef size_t *argvlen = self.argv_len
        cdef const char **head = &cmd.head[0]
        cdef size_t *head_len = &cmd.head_len[0]
        if as_eval:
            head = &cmd.eval_head[0]
            head_len = &cmd.eval_head_len[0]
        for j in range(cmd.n_head):
            argv[argc] = head[j]
            argvlen[argc] = head_len[j]
            argc += 1
        for j in range(cmd.n_args):
            argv[argc] = cmd.args[k * cmd.n_args + j]
            argvlen[argc] = cmd.args_len[k * cmd.n_args + j]
            argc += 1
        for j in range(cmd.n_tail):
            argv[argc] = cmd.tail[j]
            argvlen[argc] = cmd.tail_len[j]
            argc += 1
        return argc

    cdef const char *_append_eval(self, int i, Command *cmd, int k) noexcept nogil:
        """Queues item k's script as EVAL (with its source) on master i; NULL, or why not."""
        cdef Master *m = &self.masters[i]
        cdef int argc, length
        cdef char *formatted = NULL
        cdef const char *failure
        if m.slot_tail == m.slot_cap:
            return b"out of memory"
        argc = self._argv(cmd, k, True)
        length = format_command(&formatted, argc, self.argv_ptr, self.argv_len)
        if length < 0:
            return b"out of memory"
        failure = self._put(i, formatted, length)
        free(formatted)
        if failure != NULL:
            return failure
        m.slots[m.slot_tail] = k
        m.slot_seq[m.slot_tail] = m.sent
        m.slot_tail += 1
        m.sent += 1
        return NULL

    cdef void _owe_evals(self, Master *m, Command *cmd) noexcept nogil:
        """The round ends before these script replies came: keep each one's EVAL, in case the
        late reply is NOSCRIPT (a flushed script cache), so the script still runs there."""
        cdef int j, argc, length
        cdef char *formatted
        cdef Redo *redo
        for j in range(m.slot_head, m.slot_tail):
            argc = self._argv(cmd, m.slots[j], True)
            formatted = NULL
            length = format_command(&formatted, argc, self.argv_ptr, self.argv_len)
            redo = <Redo *>malloc(sizeof(Redo))
            if length < 0 or redo == NULL:
                if length >= 0:
                    free(formatted)
                free(redo)
                continue  # out of memory: that late NOSCRIPT will go unanswered
            redo.seq = m.slot_seq[j]
            redo.command = formatted
            redo.length = length
            redo.next = NULL
            if m.redo_tail == NULL:
                m.redo_head = redo
            else:
                m.redo_tail.next = redo
            m.redo_tail = redo

    cdef void _write(self, int i, int64_t now) noexcept nogil:
        cdef const char *failure = self._flush(i)
        if failure != NULL:
            self._fail_master(i, CONN_ERROR, failure, now)

    # -- bytes to and from a master: libhiredis's buffers, or a TLS master's channel ----------

    cdef const char *_put(self, int i, const char *data, size_t length) noexcept nogil:
        """Queues formatted commands; a TLS master's are encrypted and sent at once (as much as
        the socket takes). NULL, or why the connection failed."""
        cdef Master *m = &self.masters[i]
        if m.tls:
            return self._tls_send(i, data, length)
        if redisAppendFormattedCommand(m.ctx, data, length) == REDIS_ERR:
            return b"out of memory"
        m.want_write = True
        return NULL

    cdef const char *_flush(self, int i) noexcept nogil:
        """Writes what is queued, as much as the socket takes; NULL, or why that failed."""
        cdef Master *m = &self.masters[i]
        cdef int done = 0
        if m.tls:
            return self._tls_send(i, NULL, 0)
        if redisBufferWrite(m.ctx, &done) == REDIS_ERR:
            return plain_failure(m, m.ctx.errstr, errno if m.ctx.err == REDIS_ERR_IO else 0)
        m.want_write = not done
        return NULL

    cdef const char *_fill(self, int i) noexcept nogil:
        """Reads what arrived into the reply reader; NULL, or why the connection failed."""
        cdef Master *m = &self.masters[i]
        if m.tls:
            return self._tls_read(i)
        if redisBufferRead(m.ctx) == REDIS_ERR:
            return plain_failure(m, m.ctx.errstr, errno if m.ctx.err == REDIS_ERR_IO else 0)
        return NULL

    cdef const char *_resend(self, int i, Redo *redo) noexcept nogil:
        """Sends an abandoned command's EVAL (late_reply's), whose reply will be dropped too."""
        cdef Master *m = &self.masters[i]
        cdef const char *failure = self._put(i, redo.command, redo.length)
        free_redo(redo)
        if failure == NULL:
            m.sent += 1
            m.stale += 1
        return failure

    cdef const char *_tls_send(self, int i, const char *data, size_t length) noexcept with gil:
        cdef Master *m = &self.masters[i]
        try:
            channel = self._channels[i]
            if length:
                done = channel.write(PyBytes_FromStringAndSize(data, length))
            else:
                done = channel.flush()
        except BaseException as exc:
            return self._tls_failed(m, exc)
        m.want_write = not done
        return NULL

    cdef const char *_tls_read(self, int i) noexcept with gil:
        cdef Master *m = &self.masters[i]
        cdef bytes data
        try:
            data = self._channels[i].read()
        except BaseException as exc:
            return self._tls_failed(m, exc)
        if data and redisReaderFeed(m.ctx.reader, PyBytes_AS_STRING(data),
                                    PyBytes_GET_SIZE(data)) == REDIS_ERR:
            return b"out of memory"
        return NULL

    cdef int _tls_step(self, int i) noexcept with gil:
        """One step of a TLS master's handshake, on a confirmed TCP connection (its channel is
        made at the first): 1 once it is over, 0 while it goes on, -1 failed (see tls_error)."""
        cdef Master *m = &self.masters[i]
        try:
            if not m.has_channel:
                spec = self.specs[i]
                # (a Sentinel group's master is known by the address the sentinels gave)
                host = spec.host if spec.host is not None else self._addresses[i].decode()
                self._channels[i] = _tls.TLSChannel.on_fd(spec.tls, hl_context_fd(m.ctx), host)
                m.has_channel = True
            channel = self._channels[i]
            done = channel.handshake()
            m.tls_wants_write = channel.wants_write
        except BaseException as exc:
            self._tls_failed(m, exc)
            return -1
        return 1 if done else 0

    cdef const char *_tls_failed(self, Master *m, exc) noexcept:
        """Keeps why a TLS master's channel failed (in m.tls_error, which it returns). Anything
        but an error of the connection (a signal handler's exception) is raised once the round
        is over, as in _signalled."""
        cdef bytes text
        if isinstance(exc, Exception):
            text = str(exc).encode("utf-8", "replace")
        else:
            if self.pending_exc is None:
                self.pending_exc = exc
            text = b"interrupted"
        snprintf(m.tls_error, TLS_WHY_SIZE, b"%s", <char *>text)
        return m.tls_error

    cdef void _service(self, int i, int revents, Command *cmd) noexcept nogil:
        cdef Master *m = &self.masters[i]
        cdef int err = 0
        cdef int64_t now = now_ns()
        if m.failed or m.ctx == NULL:
            return
        cdef const char *failure
        if m.state == CONNECTING:
            if not m.has_channel:
                err = hl_socket_error(hl_context_fd(m.ctx))
                if err:
                    self._fail_master(i, CONN_ERROR, hl_error_text(err), now)
                    return
            if m.tls:
                err = self._tls_step(i)
                if err < 0:
                    self._fail_master(i, CONN_ERROR, m.tls_error, now)
                    return
                if err == 0:
                    return  # the handshake goes on
                m.want_write = m.tls_wants_write
            m.state = READY
            m.backoff_ms = 0
            # connected in this round (opened in an earlier one, maybe): its login and first
            # commands have the connect bound
            m.cold = True
            m.waited = True
            failure = self._handshake(i)
            if failure != NULL:
                self._fail_master(i, CONN_ERROR, failure, now)
                return
            self._queue_round(i, cmd, now)
            return
        if revents & POLLOUT:
            self._write(i, now)
            if m.failed:
                return
        if revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL):
            failure = self._fill(i)
            if failure != NULL:
                self._fail_master(i, CONN_ERROR, failure, now)
                return
            self._drain(i, cmd, now)

    cdef void _drain(self, int i, Command *cmd, int64_t now) noexcept nogil:
        """Takes every complete reply out of the reader and counts it."""
        cdef Master *m = &self.masters[i]
        cdef void *raw = NULL
        cdef redisReply *reply
        cdef int k
        cdef const char *refused
        cdef Redo *redo
        cdef char why[WHY_SIZE]
        while True:
            refused = take_reply(m.ctx.reader, &raw, why)
            if refused != NULL:
                self._fail_master(i, ERROR, refused, now)
                return
            if raw == NULL:
                return
            reply = <redisReply *>raw
            m.received += 1
            if m.handshake > 0:
                m.handshake -= 1
                if reply.type == REDIS_REPLY_ERROR:
                    self._fail_master(i, ERROR, reply.str, now)
                    freeReplyObject(raw)
                    return
            elif m.stale > 0:
                redo = late_reply(m, reply)
                if redo != NULL:
                    refused = self._resend(i, redo)
                    if refused != NULL:
                        self._fail_master(i, CONN_ERROR, refused, now)
                    else:
                        self._write(i, now)
            elif m.slot_head < m.slot_tail:
                k = m.slots[m.slot_head]
                m.slot_head += 1
                if cmd.kind == KIND_SCRIPT and reply.type != REDIS_REPLY_ERROR:
                    m.scripts_known |= cmd.script_bit
                if (cmd.kind == KIND_SCRIPT and reply.type == REDIS_REPLY_ERROR
                        and strncmp(reply.str, b"NOSCRIPT", 8) == 0):
                    # The script cache was flushed: send the source, and wait for that reply.
                    m.scripts_known &= ~cmd.script_bit
                    refused = self._append_eval(i, cmd, k)
                    if refused != NULL:
                        self._fail_master(i, CONN_ERROR, refused, now)
                    else:
                        m.want_write = True
                        self._write(i, now)
                else:
                    self._count(cmd, k, i, reply)
            freeReplyObject(raw)
            if m.failed:
                return

    cdef void _count(self, Command *cmd, int k, int i, redisReply *reply) noexcept nogil:
        if reply.type == REDIS_REPLY_ERROR:
            self._vote(k, i, ERROR, reply.str)
            if self.masters[i].named and strncmp(reply.str, b"READONLY", 8) == 0:
                # a replica now (a failover): this connection goes after the round, and the
                # master is looked up again
                self.masters[i].demoted = True
        elif cmd.kind == KIND_SET:
            if (reply.type == REDIS_REPLY_STATUS and reply.len == 2
                    and strncmp(reply.str, b"OK", 2) == 0):
                self._vote(k, i, OK, NULL)
            elif reply.type == REDIS_REPLY_NIL:
                self._vote(k, i, TAKEN, NULL)
            else:
                self._vote(k, i, ERROR, b"unexpected reply to SET")
        elif reply.type == REDIS_REPLY_INTEGER:
            if cmd.want_values:
                self.values[k * self.n + i] = reply.integer
            self._vote(k, i, OK if reply.integer > 0 else TAKEN, NULL)
        elif reply.type == REDIS_REPLY_NIL:
            self._vote(k, i, TAKEN, NULL)
        else:
            self._vote(k, i, ERROR, b"unexpected reply to the script")

    cdef void _vote(self, int k, int i, uint8_t code, const char *detail) noexcept nogil:
        cdef int cell = k * self.n + i
        cdef size_t length
        if self.codes[cell] != PENDING:
            return
        self.codes[cell] = code
        if detail != NULL and self.details[cell] == NULL:
            length = strlen(detail)
            if length > MAX_DETAIL:
                length = MAX_DETAIL
            self.details[cell] = <char *>malloc(length + 1)
            self.c_details = True
            if self.details[cell] != NULL:
                memcpy(self.details[cell], detail, length)
                self.details[cell][length] = 0
        if code == OK:
            self.oks[k] += 1
        else:
            self.fails[k] += 1
        if self.decided_at[k] == 0 and (
                self.oks[k] >= self.quorum or self.fails[k] > self.n - self.quorum):
            self.decided_at[k] = now_ns()
            self.c_undecided -= 1

    cdef void _explain_pending(self, int i, const char *detail) noexcept nogil:
        """Gives master i's pending votes on undecided keys (they end as TIMEOUT) a reason."""
        cdef int k, cell
        for k in range(self.c_n_items):
            cell = k * self.n + i
            if (self.codes[cell] == PENDING and self.decided_at[k] == 0
                    and self.details[cell] == NULL):
                self.details[cell] = <char *>malloc(strlen(detail) + 1)
                if self.details[cell] != NULL:
                    self.c_details = True
                    memcpy(self.details[cell], detail, strlen(detail) + 1)

    cdef void _vote_master(self, int i, uint8_t code, const char *detail) noexcept nogil:
        cdef int k
        for k in range(self.c_n_items):
            self._vote(k, i, code, detail)

    cdef void _local_failure(self, int i, const char *reason) noexcept nogil:
        """Master i's connect failed for want of this process's resources: its votes say so; no
        reconnect backoff starts (see hiredlock/_engines/connect.py)."""
        cdef char detail[MAX_LOCAL_DETAIL]
        snprintf(detail, sizeof(detail), b"%s%s", local_prefix, reason)
        self._vote_master(i, CONN_ERROR, detail)
        self.masters[i].slot_head = self.masters[i].slot_tail
        self.masters[i].failed = True
        drop(&self.masters[i])

    cdef void _fail_master(self, int i, uint8_t code, const char *detail,
                           int64_t now) noexcept nogil:
        """The master failed in this round: each key it has not answered gets this vote."""
        cdef const char *reason = detail
        if reason == NULL:
            reason = b"failure"
        self._vote_master(i, code, detail)
        snprintf(self.masters[i].last_error, sizeof(self.masters[i].last_error),
                 b"not retried yet after: %s", reason)
        self.masters[i].slot_head = self.masters[i].slot_tail
        self.masters[i].failed = True
        fail(&self.masters[i], now)
        if self.masters[i].named:
            self._look_again(i)


@cython.final
cdef class NativeRound:
    """One round of a NativeEngine, fed by a driver (an event loop) instead of waited for in C:

        fds_wanted()            fd -> POLLIN | POLLOUT (hiredlock._engines.poller's): what the round
                                waits for on each socket
        on_ready(fd, r, w)      that socket is readable (r) and/or writable (w)
        next_deadline_ns        when (time.monotonic_ns) on_deadline is due
        on_deadline(now_ns)     a deadline passed: a last look without waiting, then the round
                                either ends or goes on to the connect bound of new connections
        finished()              nothing more to wait for: the driver then calls end()
        end()                   the end-of-round accounting (once): what each master still owes
                                is kept for later rounds to read and drop, or its connection
                                goes; also how a driver gives up on a round early (a cancelled
                                task). The engine's finish(round) then gives the results.
        break_off()             instead of end() after an exception in the middle of an event:
                                what the masters owe is unknown, so their connections go
        before_close            None, or called with an fd just before the round closes that
                                socket, so that a driver takes it off its event loop first (fd
                                numbers are reused)

    Every step runs the engine's own C steps (those of its GIL-released loop) with the GIL held.
    The round holds its engine (busy) from begin_* until end() or break_off().
    """

    cdef NativeEngine engine
    cdef Command cmd
    cdef tuple keep            # the arguments cmd points into
    cdef bint over             # its last deadline passed
    cdef bint ended
    cdef list results
    cdef public object before_close

    def fds_wanted(self):
        cdef NativeEngine e = self.engine
        cdef int k, nfds, events
        cdef dict wanted = {}
        if self.ended or self.over:
            return wanted
        nfds = e._wanted()
        for k in range(nfds):
            events = 0
            if e.fds[k].events & POLLIN:
                events |= EVENT_IN
            if e.fds[k].events & POLLOUT:
                events |= EVENT_OUT
            wanted[e.fds[k].fd] = events
        return wanted

    def finished(self):
        """Whether the round is over (the stop rules of _engines/contract.py)."""
        cdef NativeEngine e = self.engine
        if self.ended or self.over:
            return True
        return e._stop(e._wanted())

    @property
    def next_deadline_ns(self):
        cdef NativeEngine e = self.engine
        if self.ended:
            return 0
        return e.c_cold_deadline if e.c_extended else e.c_deadline

    def on_ready(self, int fd, readable, writable):
        cdef NativeEngine e = self.engine
        cdef int k, nfds
        cdef int revents = (POLLIN if readable else 0) | (POLLOUT if writable else 0)
        if self.ended or self.over or not revents:
            return
        # Only a socket the round waits on now is serviced, as in the sync loop (an event the
        # loop collected before the round stopped waiting on it is stale).
        nfds = e._wanted()
        for k in range(nfds):
            if e.fds[k].fd == fd:
                e._service(e.fd_master[k], revents, &self.cmd)
                break
        self._closed(True)

    def on_deadline(self, long long now_ns):
        cdef NativeEngine e = self.engine
        cdef int k, nfds
        if self.ended or self.over or now_ns < self.next_deadline_ns:
            return
        # One more look without waiting: replies already here count (see _run).
        nfds = e._wanted()
        if nfds and hl_poll(e.fds, nfds, 0) > 0:
            for k in range(nfds):
                if e.fds[k].revents:
                    e._service(e.fd_master[k], e.fds[k].revents, &self.cmd)
        if not e._extend():
            self.over = True
        self._closed(True)

    def end(self):
        """Accounts the round, once, and lets the engine go."""
        if self.ended:
            return
        self._conclude(False)

    def break_off(self):
        """Instead of end() after an exception: every connection goes (what it owes is
        unknown)."""
        if self.ended:
            return
        self._conclude(True)

    cdef int _conclude(self, bint broken) except -1:
        cdef NativeEngine e = self.engine
        cdef int i
        cdef int64_t end
        self.ended = True
        try:
            if broken:
                for i in range(e.n):
                    drop(&e.masters[i])
                e.in_round = False
            else:
                e._account(&self.cmd)
            end = now_ns()
            for i in range(e.n):
                e.masters[i].defer_free = False
            self._closed(not broken)
            self.results = e._results(&self.cmd, e.c_t0, end)
        finally:
            for i in range(e.n):
                e.masters[i].defer_free = False
                bury(&e.masters[i])
            e._clear_details(self.cmd.n_items)
            e.busy = False
        return 0

    cdef int _closed(self, bint tell) except -1:
        """Closes the sockets of the connections dropped in the last step, each after telling
        the driver (before_close)."""
        cdef NativeEngine e = self.engine
        cdef Master *m
        cdef redisContext *ctx
        cdef int i
        for i in range(e.n):
            m = &e.masters[i]
            if m.doomed == NULL:
                continue
            ctx = m.doomed
            m.doomed = NULL
            try:
                if tell and self.before_close is not None:
                    self.before_close(hl_context_fd(ctx))
            finally:
                redisFree(ctx)
        return 0

    def __dealloc__(self):
        # Never ended (its driver went away without end()): its connections go, since nothing
        # accounted for what they owe, and the engine is free again.
        cdef int i
        cdef NativeEngine e = self.engine
        if self.ended or e is None:
            return
        for i in range(e.n):
            e.masters[i].defer_free = False
            drop(&e.masters[i])
            bury(&e.masters[i])
        e.in_round = False
        e._clear_details(self.cmd.n_items)
        e.busy = False


# -- the blocking driver of the algorithm's steps (hiredlock/_core/requests.py) ----------------------------
#
# The same loop as _engines/blocking.py run_python, in C: PyIter_Send hands back the generator's return value
# without raising StopIteration, and no Python frame runs between two rounds. The request kinds
# are _steps' own constants, handed over by set_step_kinds() when _steps is imported.

cdef extern from "Python.h":
    int PyIter_Send(object iterator, object arg, PyObject **presult) except -1
    void Py_DECREF(PyObject *o)
    void Py_INCREF_raw "Py_INCREF" (PyObject *o)
    enum:
        PYGEN_RETURN
        PYGEN_NEXT

cdef int _SET_NX = -1
cdef int _PAUSE = -1

_pause = None


def set_step_kinds(int set_nx, int pause, pause_function):
    """Tells run_steps the request kinds of hiredlock._core.requests and how a pause is waited for
    (called by that module)."""
    global _SET_NX, _PAUSE, _pause
    _SET_NX = set_nx
    _PAUSE = pause
    _pause = pause_function


def run_steps(steps, pool, list pin=None):
    """Drives a step generator to its end, blocking, on engines from `pool`; see
    hiredlock._engines.blocking.run_python (pin included). A native engine's rounds are called in C, without a Python
    call in between."""
    cdef PyObject *sent = NULL
    cdef int status = PyIter_Send(steps, None, &sent)
    cdef object request, engine, reply
    cdef tuple args
    cdef NativeEngine native
    cdef int kind
    cdef bint owes
    while True:
        request = <object>sent
        Py_DECREF(sent)
        sent = NULL
        if status == PYGEN_RETURN:
            return request
        kind = (<tuple?>request)[0]
        args = (<tuple>request)[1] if kind != _PAUSE else None
        try:
            if kind == _PAUSE:
                _pause((<tuple>request)[1])
                reply = None
            else:
                if pin is None or pin[0] is None:
                    engine = pool.checkout()
                else:  # wait for it about a round: this one's timeout
                    engine = pool.checkout(pin[0], args[3] if kind == _SET_NX else args[4])
                try:
                    if type(engine) is NativeEngine:
                        native = <NativeEngine>engine
                        if kind == _SET_NX:
                            reply = native.set_nx(args[0], args[1], args[2], args[3])
                        else:
                            reply = native.run_script(args[0], args[1], args[2], args[3],
                                                      args[4], args[5], args[6], args[7])
                    elif kind == _SET_NX:
                        reply = engine.set_nx(*args)
                    else:
                        reply = engine.run_script(*args)
                finally:
                    if pin is not None:
                        if type(engine) is NativeEngine:
                            owes = (<NativeEngine>engine).owes_replies()
                        else:
                            owes = engine.owes_replies()
                        pin[0] = engine if owes else None
                    pool.checkin(engine)
        except BaseException as exc:
            try:
                request = steps.throw(exc)
            except StopIteration as stop:
                return stop.value
            sent = <PyObject *>request
            # (a new reference for the DECREF at the top of the loop)
            Py_INCREF_raw(sent)
            status = PYGEN_NEXT
            continue
        status = PyIter_Send(steps, reply, &sent)
