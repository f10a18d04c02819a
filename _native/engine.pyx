# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""The native engine: the engine contract (_engines/contract.py) on non-blocking libhiredis.

One round: every command for every master is formatted and written before any reply is read; then
poll() waits on all sockets at once, with the GIL released, and libhiredis parses the replies into
C structs. Python objects are made only for the result. The scripts, the outcome codes and every
timing rule come from the Python package; this module only moves bytes and counts votes.

This file is the umbrella: the constants taken from the Python package, the NativeEngine class
(the contract's calls), and the parts it includes, each named after what it mirrors in Python:
resp.pxi (_engines/resp.py), batches.pxi (a batched script's commands and replies:
_engines/script_commands.py, and the batched replies of _engines/round.py), master.pxi (a
master's connection: _engines/master.py, with python_engine.py's steps around a round), round.pxi
(a round: _engines/round.py), routing.pxi (a cluster place's links: the router's keys per link,
MOVED/ASK followed), round_events.pxi
(NativeRound, the round an event loop feeds: aio/_rounds.py drives it) and steps.pxi (the blocking
driver of the steps: _engines/blocking.py's run). engine.pxd is the table of contents: the shared
structs and limits, both classes' fields, every part's C functions.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport PyObject
from libc.errno cimport errno
from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memset, strlen, strncmp

from libhiredis cimport (
    HIREDIS_MAJOR,
    HIREDIS_MINOR,
    HIREDIS_PATCH,
    REDIS_ERR,
    REDIS_ERR_IO,
    REDIS_REPLY_ARRAY,
    REDIS_REPLY_ERROR,
    REDIS_REPLY_INTEGER,
    REDIS_REPLY_NIL,
    REDIS_REPLY_STATUS,
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

import math
import os

from hiredlock._core import scripts as _scripts
from hiredlock._engines import connect as connecting
from hiredlock._engines import poller as _poller
from hiredlock._engines import resolver as _resolver
from hiredlock._engines import routing as _routing
from hiredlock._engines import tls as _tls
from hiredlock._engines.connect import LOCAL_ERRNOS, LOCAL_ERROR_PREFIX
from hiredlock._engines.master_policy import MasterPolicy, MasterReport


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
# How often one key's command follows a cluster's MOVED/ASK in a round (see _redirect).
cdef int MAX_REDIRECTS = _routing.MAX_REDIRECTS
cdef const char *ASKING_COMMAND = b"*1\r\n$6\r\nASKING\r\n"
cdef size_t ASKING_LENGTH = 16
# The largest reply a lock command may get: libhiredis keeps a reply's bytes until it is whole,
# and builds an array's elements as they come, so a master could make it take any amount of
# memory otherwise.
cdef size_t MAX_REPLY = _scripts.MAX_REPLY_BYTES
# The names a batched script's command carries at most (see _scripts.BATCHED): its reply is an
# array of as many replies, the only array a lock command gets.
cdef int BATCH_ITEMS = _scripts.SCRIPT_BATCH_ITEMS
# the room in the argv arrays: a command's shared arguments and its items' (_argv, _unit_argv)
cdef size_t ARGV_ROOM = 2 * MAX_PARTS + 2 + BATCH_ITEMS * MAX_ARGS
# A connection opened in a round has at least this long from the round's start (see _scripts).
cdef int64_t CONNECT_MIN_NS = <int64_t>(_scripts.CONNECT_TIMEOUT_MIN_MS * 1e6)
# A round that waits takes the GIL this often to run Python's signal handlers: a signal may be
# delivered to another thread than the one in poll() (no EINTR here then), and WSAPoll is never
# interrupted at all. A round that decides sooner never takes it.
cdef int64_t SIGNAL_SLICE_NS = 10 * 1000000
# NativeEngine.p_next_follow when the policy has no Sentinel group to follow
cdef int64_t NEVER = INT64_MAX
# What a vote says when a connection did not start: the Python package's texts
# (_engines/connect.py), the same on both engines.
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
# master's (see hiredlock/_engines/connect.py): libhiredis reports it as the errno's text, at the
# end of its message ("Can't create socket: Too many open files").
_LOCAL_TEXTS = tuple(os.strerror(code).encode() for code in sorted(LOCAL_ERRNOS))
_LOCAL_PREFIX = LOCAL_ERROR_PREFIX.encode()
cdef int n_local_texts = len(_LOCAL_TEXTS)
cdef const char *local_texts[8]
for _index, _text in enumerate(_LOCAL_TEXTS[:8]):
    local_texts[_index] = _text
cdef const char *local_prefix = _LOCAL_PREFIX

cdef size_t MAX_DETAIL = 400

# Incremented in a child after fork(): an engine made before the fork must not touch its sockets.
cdef int fork_generation = 0


cdef void after_fork_in_child() noexcept nogil:
    global fork_generation
    fork_generation += 1


hl_on_fork_in_child(after_fork_in_child)

if hl_replies_init() != 0:  # (libhiredis's reply functions: see hl_replies.h)
    raise MemoryError()

# Connections closed by engines of this process (free_context): the asyncio driver keeps sockets
# registered on its loop between rounds, and a change here tells it a registered descriptor may
# have closed (and its number come back as another socket). Only ever incremented: a lost
# increment between threads still changes the value.
cdef unsigned long long closed_count = 0


cdef inline void free_context(redisContext *ctx) noexcept nogil:
    """redisFree for a master's connection: every socket an engine closes goes through here."""
    global closed_count
    closed_count += 1
    redisFree(ctx)


cdef inline int64_t now_ns() noexcept nogil:
    return hl_now_ns()


include "resp.pxi"
include "batches.pxi"
include "master.pxi"
include "round.pxi"
include "routing.pxi"
include "round_events.pxi"
include "steps.pxi"


# final (engine.pxd says so too): its cdef and cpdef methods are called directly (no vtable). The
# steps of a round are C functions of the parts, taking the engine first, so that the sync loop
# and the event-fed round share them and the C compiler may inline them.
@cython.final
cdef class NativeEngine:
    """Engine contract on libhiredis: one non-blocking connection per master."""

    name = "native"

    def __cinit__(self, masters, quorum=None, router=None):
        cdef int i
        if router is None:
            specs = tuple(masters)
            self.n = len(specs)
            self.n_cols = self.n
        else:
            # a cluster place's nodes are links of their own (see routing.py); the places vote
            specs = tuple(router.links)
            self.n = len(specs)
            self.n_cols = router.n_places
            self.router = router
            self.routed = True
        if self.n == 0:
            raise ValueError("masters must name at least one Redis master")
        self.quorum = self.n_cols // 2 + 1 if quorum is None else quorum
        self.masters = <Master *>calloc(self.n, sizeof(Master))
        self.fds = <hl_pollfd *>calloc(self.n, sizeof(hl_pollfd))
        self.fd_master = <int *>calloc(self.n, sizeof(int))
        self.argv_ptr = <const char **>calloc(ARGV_ROOM, sizeof(char *))
        self.argv_len = <size_t *>calloc(ARGV_ROOM, sizeof(size_t))
        if (self.masters == NULL or self.fds == NULL or self.fd_master == NULL
                or self.argv_ptr == NULL or self.argv_len == NULL):
            raise MemoryError()
        self._keepalive = []
        self._places = [None] * self.n
        self._addresses = [None] * self.n
        self._answers = [None] * self.n
        self._skip_why = [None] * self.n
        self._channels = [None] * self.n
        self.script_bits = {}
        self.scripts = {}
        self.batched = {}
        self.specs = specs
        self.generation = fork_generation
        for i in range(self.n):
            self._setup_master(i, specs[i])
            self.masters[i].column = i
            self.masters[i].n_carry = -1
        if router is not None:
            columns = tuple(router.columns)
            if len(columns) != self.n or not all(
                    type(c) is int and 0 <= c < self.n_cols for c in columns):
                raise ValueError("router.columns must give each link's place, 0 to n_places - 1")
            for i in range(self.n):
                self.masters[i].column = columns[i]
        self._grow(1)
        self.policy = MasterPolicy(self._places, self.router)
        _take_masks(self)
        _resolver.prefetch([place for place in self._places if place is not None])

    cdef _setup_master(self, int i, spec):
        cdef Master *m = &self.masters[i]
        m.state = DOWN
        if spec.path is not None:
            m.path = self._hold(spec.path.encode())
        elif spec.sentinel is not None:
            # its address is the master the sentinels name: see _resolve
            m.named = True
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
        cells = <size_t>n_items * self.n_cols
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
            if self.routed:
                free(self.masters[i].carry)
                self.masters[i].carry = <int *>malloc(n_items * sizeof(int))
                if self.masters[i].carry == NULL:
                    raise MemoryError()
        if self.routed:
            self.owner = <int *>malloc(cells * sizeof(int))
            self.redirects = <uint8_t *>malloc(n_items)
            if self.owner == NULL or self.redirects == NULL:
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
        free(self.owner)
        free(self.redirects)
        self.owner = NULL
        self.redirects = NULL
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
                free(self.masters[i].carry)
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

    def closes(self):
        """(contract: Engine.closes)"""
        return closed_count

    def owed_fds(self):
        """(contract: Engine.owed_fds) The descriptors of the connections owing replies, with
        every byte of their commands written."""
        cdef int i
        cdef Master *m
        fds = []
        if self.generation != fork_generation:
            return fds
        for i in range(self.n):
            m = &self.masters[i]
            if m.ctx != NULL and m.stale > 0 and not m.want_write:
                fds.append(<long long>hl_context_fd(m.ctx))
        return fds

    cpdef bint owes_replies(self):
        """(contract: Engine.owes_replies) Replies owed, or bytes unwritten, by a round that
        ended."""
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

    # -- a request's round, run here or begun for a driver fed by an event loop -----------------

    cdef object set_nx(self, keys, tokens, long long ttl_ms, double timeout_ms):
        """SET key token NX PX ttl_ms on every master; OK if set, TAKEN if the key exists."""
        if ttl_ms != self.ttl_cached or self.set_tail is None:
            self.set_tail = (b"NX", b"PX", str(ttl_ms).encode())
            self.ttl_cached = ttl_ms
        if type(keys) is not tuple:
            keys = tuple(keys)
        if type(tokens) is not tuple:
            tokens = tuple(tokens)
        if len(keys) != len(tokens):
            raise ValueError("SetNx needs one token per key")
        return _round(self, KIND_SET, SET_HEAD, (), keys, tokens,
                      self.set_tail, timeout_ms, False, True, False, False, 0)

    cdef object run_script(self, bytes sha, bytes source, int numkeys, argvs, double timeout_ms,
                           bint wait_all, bint want_values=False, bint honour_backoff=False,
                           bint acquires=False):
        """EVALSHA sha numkeys *argv per item (EVAL source on a connection that has not run the
        script yet, and after NOSCRIPT). OK on a reply > 0."""
        cdef tuple known = self.scripts.get(sha)
        if known is None or <int>known[0] != numkeys:
            known = self._script(sha, source, numkeys)
        if type(argvs) is not tuple:
            argvs = tuple(argvs)
        if len(<tuple>argvs) > 1 and numkeys > 0 and not self.routed:
            # (contract: run) a few commands of the batching script, BATCH_ITEMS names each
            batching = self.batched.get(sha, False)
            if batching is False:
                batching = self._batched(sha)
            if batching is not None:
                return _round(self, KIND_SCRIPT, <tuple>known[2], <tuple>known[3], argvs, None,
                              (), timeout_ms, wait_all, honour_backoff, want_values, acquires,
                              <uint32_t>batching[0], <tuple>batching, numkeys)
        return _round(self, KIND_SCRIPT, <tuple>known[2], <tuple>known[3], argvs, None, (),
                      timeout_ms, wait_all, honour_backoff, want_values, acquires,
                      <uint32_t>known[1])

    cdef tuple _script(self, bytes sha, bytes source, int numkeys):
        """A script's bit (see Master.scripts_known) and its commands' leading arguments, kept
        for the next rounds (for 64 scripts at most)."""
        cdef uint32_t bit = self._script_bit(sha)
        count = NUMKEYS[numkeys] if 0 <= numkeys < 10 else str(numkeys).encode()
        known = (numkeys, bit, (b"EVALSHA", sha, count), (b"EVAL", source, count))
        if len(self.scripts) < 64:
            self.scripts[sha] = known
        return known

    cdef uint32_t _script_bit(self, bytes sha):
        """The script's bit in Master.scripts_known (0: more than 32 scripts, not tracked)."""
        cdef uint32_t bit = self.script_bits.get(sha, 0)
        if bit == 0 and len(self.script_bits) < 32:
            bit = (<uint32_t>1) << len(self.script_bits)
            self.script_bits[sha] = bit
        return bit

    cdef object _batched(self, bytes sha):
        """The batching script of script `sha` (see _scripts.BATCHED), as _script gives a
        script's, without the count (each command has its own), or None: kept for the next
        rounds (for 64 scripts at most)."""
        batching = _scripts.BATCHED.get(sha)
        known = None
        if batching is not None:
            known = (self._script_bit(batching.sha), (b"EVALSHA", batching.sha),
                     (b"EVAL", batching.source))
        if len(self.batched) < 64:
            self.batched[sha] = known
        return known

    cpdef run(self, request):
        """Runs a round request (SetNx, RunScript or Cleanup: see hiredlock._core.requests) and
        returns its results."""
        if not isinstance(request, tuple):
            raise TypeError(f"not a request: {request!r}")
        cdef tuple args = <tuple>request
        if type(request) is _SetNx:
            return self.set_nx(args[SET_NX_KEYS], args[SET_NX_TOKENS], args[SET_NX_TTL_MS],
                               args[SET_NX_TIMEOUT_MS])
        return self.run_script(args[SCRIPT_SHA], args[SCRIPT_SOURCE], args[SCRIPT_NUMKEYS],
                               args[SCRIPT_ARGVS], args[SCRIPT_TIMEOUT_MS], args[SCRIPT_WAIT_ALL],
                               args[SCRIPT_WANT_VALUES], args[SCRIPT_HONOUR_BACKOFF],
                               args[SCRIPT_ACQUIRES])

    def begin(self, request):
        """Starts a round request's round and returns it (a NativeRound): a driver feeds it
        events, finish() gives its results. Host names are looked up in here, synchronously
        (bounded by the round's timeout). With `beginning` set, _round starts the round and hands
        it out (run pays one flag test for sharing its argument handling)."""
        self.beginning = True
        try:
            return self.run(request)
        finally:
            self.beginning = False

    def finish(self, NativeRound rnd not None):
        """(contract: Engine.finish) A round's results; it is ended first if need be."""
        rnd.end()
        return rnd.results
