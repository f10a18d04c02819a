# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# The table of contents of hiredlock._native: shared structs and limits, fields, C functions.
#
# For engine.pyx and the parts it includes: what the parts share (the OS header, the limits, the
# per-master and per-command structs), the two cdef classes with their fields, and the C functions
# of each part with their signatures. Cython checks every definition in the parts against what is
# declared here. Inline helpers are not listed: a .pxd can only declare an inline function together
# with its body; each part names its own.
#
# Cython reads this file as the module's own .pxd through src/hiredlock/_native.pxd (the place it
# looks for the .pxd of a module named hiredlock._native), which only includes it.

cimport cython
from libc.stdint cimport int64_t, uint8_t, uint32_t

from libhiredis cimport redisContext, redisReader, redisReply

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


cdef extern from "hl_replies.h" nogil:
    # A master's scratch reply: its scalar replies are built there, not on the heap (see that
    # header); hl_free_reply frees a reply of either kind.
    ctypedef struct hl_scratch:
        pass
    int hl_replies_init()
    void hl_use_scratch(redisReader *reader, hl_scratch *scratch)
    void hl_free_reply(void *reply)


# closes the socket only: for a connection whose libhiredis memory is not to be touched
cdef extern from *:
    """
    #ifdef _WIN32
    static inline void hl_close_socket(hl_socket fd) { closesocket(fd); }
    #else
    #include <unistd.h>
    static inline void hl_close_socket(int fd) { close(fd); }
    #endif
    """
    void close_socket "hl_close_socket" (hl_socket fd) nogil


cdef enum Kind:
    KIND_SET
    KIND_SCRIPT

cdef enum State:
    DOWN         # no connection
    CONNECTING   # non-blocking connect() not confirmed yet
    READY        # connected

cdef enum:
    WHY_SIZE = 96              # room for the reason take_reply() refuses a reply
    TLS_WHY_SIZE = 256         # room for the reason a TLS channel failed (OpenSSL's words)
    MAX_LOCAL_DETAIL = 200     # room for a local connect failure's vote detail

# The requests' field indexes (hiredlock/_core/requests.py: SetNx, RunScript and Cleanup), by
# name, for steps.pxi and NativeEngine.run; steps.pxi's REQUEST_FIELDS lets a test check them
# against the NamedTuples' _fields.
cdef enum:
    SET_NX_KEYS = 0
    SET_NX_TOKENS = 1
    SET_NX_TTL_MS = 2
    SET_NX_TIMEOUT_MS = 3
cdef enum:
    SCRIPT_SHA = 0
    SCRIPT_SOURCE = 1
    SCRIPT_NUMKEYS = 2
    SCRIPT_ARGVS = 3
    SCRIPT_TIMEOUT_MS = 4
    SCRIPT_WAIT_ALL = 5
    SCRIPT_WANT_VALUES = 6
    SCRIPT_HONOUR_BACKOFF = 7
    SCRIPT_ACQUIRES = 8

# The request types, handed over by set_request_types() (steps.pxi).
cdef object _SetNx, _RunScript, _Cleanup, _Pause

# What a round reports about a master to the policy: MasterReport's fields, bit by bit.
cdef enum:
    REPORT_FAILED = 1          # failed (a connection error, or a connect that timed out)
    REPORT_UNREACHED = 2       # failed before anything was written to it
    REPORT_UP = 4              # a connection came up
    REPORT_LAGGED = 8          # a round ended at or past its bound with replies still owed
    REPORT_CAUGHT_UP = 16      # lagging, and caught up (or has a new connection)
    REPORT_READONLY = 32       # answered READONLY

cdef enum:
    MAX_PARTS = 4              # shared leading or trailing arguments of a command
    MAX_ARGS = 16              # per-item arguments (keys and values) of one command


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
    bint acquires              # a script that takes something: no EVAL for a late NOSCRIPT
    uint32_t script_bit        # this script's bit in Master.scripts_known (0: not tracked)
    # A batched script's commands (hiredlock/_core/scripts.py's BATCHED) carry `unit` names
    # each (1: a command per item); script_bit is then the batching script's bit, and head and
    # eval_head stay the item's script's: a name sent on its own (to an unbatched master) goes
    # as EVAL of it.
    int unit
    int n_units                # the commands per master: n_items, or the batched ones
    # Every command (EVALSHA for scripts), formatted once, back to back, for all masters:
    # command c is batch[item_end[c - 1]:item_end[c]].
    char *batch
    size_t *item_end
    # Set and read in a batched round only (_round clears the fields above, not these): the keys
    # per name (per_key: that count as text), the batching script's leading arguments (without
    # the count). item_keys must stay the first of them.
    int item_keys
    char per_key[8]
    size_t per_key_len
    int n_unit_head
    const char *unit_head[MAX_PARTS]
    size_t unit_head_len[MAX_PARTS]
    const char *unit_eval_head[MAX_PARTS]
    size_t unit_eval_head_len[MAX_PARTS]


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
    hl_scratch scratch         # where ctx's reader builds its scalar replies (hl_replies.h)
    State state
    int64_t connect_deadline   # a connect still pending then is given up
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
    # it refused a batched script's command with CROSSSLOT (a cluster-mode server given as a
    # master: a batch's names may be in several slots): its names go one by one
    bint unbatched
    # this round's reply slots: key indices in the order the replies will come (-1 - k: the
    # reply to the ASKING sent before key k's command, on a cluster node); in a batched round,
    # command indices (-1 - k: key k's own EVAL, sent to an unbatched master)
    int *slots
    unsigned long long *slot_seq  # the command number of each slot
    int slot_head
    int slot_tail
    int slot_cap
    bint want_write            # obuf not flushed yet
    # With a router (a cluster place's nodes are links of their own): the place this link votes
    # for, and this round's keys (router.assign): carry[0:n_carry] ascending, n_carry -1 for
    # every key (also without a router, where column is the link's own index). `idle`: no key
    # of the round, so nothing is written to it, opened or waited for (unless a redirection
    # sends it a key).
    int column
    int *carry
    int n_carry
    bint idle
    bint warm                  # a redirect named it with no connection: the next round opens it
    bint failed                # failed in this round
    bint waited                # wait_all rounds wait for it (it is not lagging)
    # The policy's masks for this master (_engines/master_policy.py), as C reads them: its bit of
    # policy.lagging (copied after each settle(), cleared once it catches up in the round), and
    # whether this round skips it (honour_backoff), voting CONN_ERROR with skip_why.
    bint lagging
    bint skip
    const char *skip_why
    # What the rounds tell the policy about it (MasterReport), REPORT_* bits, until settled
    int report
    int64_t failed_at          # when it failed (REPORT_FAILED), and why
    char why[300]
    # its connection opened or came up in this round, or came up just before it: its login and
    # first commands go in this round (CONNECT_MIN_NS applies)
    bint cold
    bint unqueued              # no round's commands queued on its connection yet
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
    char tls_error[TLS_WHY_SIZE]  # why the channel last failed


@cython.final
cdef class NativeEngine:
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
    # A cluster place's links (hiredlock/_engines/routing.py's Router), or None: the engine's
    # masters are then router.links, each voting in its place's column (Master.column), and
    # votes, results and the quorum count n_cols places instead of n links.
    cdef readonly object router  # (read by routing.py's RoutedEngines.stale)
    cdef bint routed
    cdef int n_cols
    cdef int *owner            # [item * n_cols + column]: the link carrying that vote (routed)
    cdef uint8_t *redirects    # [item]: its command's redirections in this round (routed)
    cdef list _keepalive
    cdef int n_named           # masters given by host name (looked up by _resolver)
    # [master]: what _resolver looks up for a named master (a (host name, port) pair, or a
    # SentinelGroup), else None
    cdef list _places
    cdef list _addresses       # [master]: bytes behind Master.address (kept alive here)
    cdef list _answers         # [master]: the resolver's answer its connection went to
    cdef list _skip_why        # [master]: bytes behind Master.skip_why
    # The per-master rules (_engines/master_policy.py's MasterPolicy, one per engine) and, as of
    # the last call into it, whether policy.down is not 0 and policy.next_follow (NEVER: none)
    cdef object policy
    cdef bint p_down
    cdef int64_t p_next_follow
    cdef list _channels        # [master]: a TLS master's TLSChannel (see Master.tls)
    cdef object pending_exc    # what a signal handler (or a lookup) raised in this round
    cdef dict script_bits      # sha -> its bit in Master.scripts_known
    cdef dict scripts          # sha -> (numkeys, bit, EVALSHA head, EVAL head): see _script
    cdef dict batched          # sha -> its batching script's (bit, EVALSHA head, EVAL head)
    cdef char unit_numkeys[24]  # a batched command's numkeys, as _unit_argv lays it out
    # per-round scratch, grown as batches grow
    cdef int cap_items
    cdef uint8_t *codes        # [item * n_cols + column]
    cdef long long *values     # [item * n_cols + column]: integer replies, when asked for
    cdef int *oks
    cdef int *fails
    cdef int64_t *decided_at
    cdef char **details        # [item * n_cols + column], malloc'd texts or NULL
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
    cdef tuple set_tail        # SET's NX PX ttl, for that ttl
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
    cdef bint c_skipping           # some master is skipped in this round (Master.skip)

    # engine.pyx: made, grown, closed
    cdef _setup_master(self, int i, spec)
    cdef const char *_hold(self, bytes value)
    cdef int _grow(self, int n_items) except -1
    cdef void _free_scratch(self) noexcept
    cdef void _close_all(self) noexcept
    cdef tuple _script(self, bytes sha, bytes source, int numkeys)
    cdef uint32_t _script_bit(self, bytes sha)
    cdef object _batched(self, bytes sha)
    cpdef bint owes_replies(self)
    # (called in C by the blocking client's run_one: hiredlock/_engines/blocking.pxd)
    cpdef run(self, request)
    # engine.pyx: a SetNx or RunScript request's round (round.pxi's _round runs it)
    cdef object set_nx(self, keys, tokens, long long ttl_ms, double timeout_ms)
    cdef object run_script(self, bytes sha, bytes source, int numkeys, argvs, double timeout_ms,
                           bint wait_all, bint want_values=*, bint honour_backoff=*,
                           bint acquires=*)


@cython.final
cdef class NativeRound:
    cdef NativeEngine engine
    cdef Command cmd
    cdef tuple keep            # the arguments cmd points into
    cdef bint over             # its last deadline passed
    cdef bint ended
    cdef list results
    cdef public object before_close

    cdef int _conclude(self, bint broken) except -1
    cdef int _closed(self, bint tell) except -1


# -- resp.pxi: RESP commands laid out in C, and the guard on the replies (_engines/resp.py)
# (inline: format_int, command_size, put_decimal, _parts, pending_bound, take_reply)

cdef char *put_command(char *out, int argc, const char **argv,
                       const size_t *argvlen) noexcept nogil
cdef int format_command(char **target, int argc, const char **argv,
                        const size_t *argvlen) noexcept nogil
cdef int _argv(NativeEngine self, Command *cmd, int k, bint as_eval) noexcept nogil
cdef int _format_batch(NativeEngine self, Command *cmd) except -1
cdef int odd_reply(redisReader *r, char kind, char *why) noexcept nogil

# -- batches.pxi: a batched script's commands and their replies (_engines/script_commands.py)
# (inline: _command_argv)

cdef int _unit_argv(NativeEngine self, Command *cmd, int u, bint as_eval) noexcept nogil
cdef void _take_batched(NativeEngine self, Command *cmd, int k, int i, redisReply *reply,
                        int64_t now) noexcept nogil
cdef void _count_batch(NativeEngine self, Command *cmd, int u, int i,
                       redisReply *reply) noexcept nogil

# -- master.pxi: one master's connection: connect, login, bytes in and out, failure
# (_engines/python_engine.py's _Master, and PythonEngine's _refresh / _catch_up / _open)
# (inline: connect_timed_out, plain_failure, connect_events)

cdef bint is_local_failure(const char *text) noexcept nogil
cdef void forget_redo(Master *m, unsigned long long up_to) noexcept nogil
cdef Redo *late_reply(Master *m, redisReply *reply) noexcept nogil
cdef void free_redo(Redo *redo) noexcept nogil
cdef void drop(Master *m) noexcept nogil
cdef void bury(Master *m) noexcept nogil
cdef void fail(Master *m, const char *reason, int64_t now) noexcept nogil
cdef void _forget_inherited(NativeEngine self) noexcept nogil
cdef bint _lookup_due(NativeEngine self) noexcept nogil
cdef bint _resolve(NativeEngine self, int64_t timeout_ns) noexcept with gil
cdef bint _policy_before(NativeEngine self, bint honour_backoff, bint set_round) noexcept with gil
cdef void _settle(NativeEngine self) noexcept with gil
cdef int _take_masks(NativeEngine self) except -1
cdef void _refresh(NativeEngine self) noexcept nogil
cdef bint _connect(NativeEngine self, int i, int64_t now) noexcept nogil
cdef const char *_handshake(NativeEngine self, int i) noexcept nogil
cdef const char *_put_argv(NativeEngine self, int i, int argc, const char **argv,
                           const size_t *argvlen) noexcept nogil
cdef void _write(NativeEngine self, int i, int64_t now) noexcept nogil
cdef const char *_put(NativeEngine self, int i, const char *data,
                      size_t length) noexcept nogil
cdef const char *_flush(NativeEngine self, int i) noexcept nogil
cdef const char *_fill(NativeEngine self, int i) noexcept nogil
cdef const char *_resend(NativeEngine self, int i, Redo *redo) noexcept nogil
cdef const char *_tls_send(NativeEngine self, int i, const char *data,
                           size_t length) noexcept with gil
cdef const char *_tls_read(NativeEngine self, int i) noexcept with gil
cdef int _tls_step(NativeEngine self, int i) noexcept with gil
cdef const char *_tls_failed(NativeEngine self, Master *m, exc) noexcept
cdef void _local_failure(NativeEngine self, int i, const char *reason) noexcept nogil
cdef void _fail_master(NativeEngine self, int i, uint8_t code, const char *detail,
                       int64_t now) noexcept nogil

# -- round.pxi: one round: started, fed events, the stop rule, the votes, the results
# (_engines/python_engine.py's _Round and _Votes; _run is its run_blocking)
# (inline: _clear_details, _start, _wanted, _stop, _extend, _account)

cdef object _round(NativeEngine self, Kind kind, tuple head, tuple eval_head, tuple items,
                   tuple tokens, tuple tail, double timeout_ms, bint wait_all,
                   bint honour_backoff, bint want_values, bint acquires,
                   uint32_t script_bit, tuple batching=*, int item_keys=*)
cdef list _results(NativeEngine self, Command *cmd, int64_t t0, int64_t end)
cdef void _run(NativeEngine self, Command *cmd, int64_t timeout_ns, bint wait_all,
               bint honour_backoff) noexcept nogil
cdef bint _signalled(NativeEngine self) noexcept with gil
cdef bint _cold_can_decide(NativeEngine self) noexcept nogil
cdef void _prepare(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil
cdef void _queue_round(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil
cdef void _send_batch(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil
cdef const char *_append_eval(NativeEngine self, int i, Command *cmd, int k) noexcept nogil
cdef void _owe_evals(NativeEngine self, Master *m, Command *cmd) noexcept nogil
cdef void _service(NativeEngine self, int i, int revents, Command *cmd) noexcept nogil
cdef void _drain(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil
cdef void _count(NativeEngine self, Command *cmd, int k, int i,
                 redisReply *reply) noexcept nogil
cdef void _vote(NativeEngine self, int k, int i, uint8_t code, const char *detail) noexcept nogil
cdef void _explain_pending(NativeEngine self, int i, const char *detail) noexcept nogil
cdef void _vote_master(NativeEngine self, int i, uint8_t code,
                       const char *detail) noexcept nogil

# -- routing.pxi: a cluster place's links (only with a router): the keys each link carries in a
# round, a key's command sent on a link of its own, MOVED/ASK followed (_engines/round.py's)

cdef int _assign(NativeEngine self, Command *cmd, tuple items, bint columns) except -1
cdef const char *_append_item(NativeEngine self, int i, Command *cmd, int k, bint asking,
                              bint as_eval) noexcept nogil
cdef bint _room(Master *m, int more) noexcept nogil
cdef bint _redirect(NativeEngine self, Command *cmd, int k, int i, const char *text,
                    int64_t now) noexcept nogil
cdef int _ask_router(NativeEngine self, int i, const char *text, bint *asking) noexcept with gil

# round_events.pxi: NativeRound (above), the round fed by an event loop (hiredlock/aio/_rounds.py)
# steps.pxi: run_steps, the blocking driver of the step generators (_engines/blocking.py's run),
# and _run_request, one request's round in it (as _engines/blocking.py's run_one)
cdef object _run_request(object checkout, object checkin, object request, list pin)
