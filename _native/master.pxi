# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# One master's connection: connect, login, bytes in and out, failure.
#
# The mirror of hiredlock/_engines/master.py, with python_engine.py's _refresh, _catch_up, _start
# and _open: connect and the login (AUTH/SELECT), names looked up before the round, the replies
# owed to rounds that ended, bytes in and out (libhiredis's buffers or a TLS channel), a failure,
# and the calls into the engine's MasterPolicy (what a master's failures mean for later rounds is
# there, not here). Included by engine.pyx; its C functions are declared in engine.pxd, the Master
# struct too.

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


# -- the replies a connection still owes to rounds that ended -------------------------------

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
    if m.lagging and m.stale == 0:
        m.lagging = False
        m.report |= REPORT_CAUGHT_UP
    return again


cdef void free_redo(Redo *redo) noexcept nogil:
    free(redo.command)
    free(redo)


# -- closing and failure ------------------------------------------------------------------------

cdef void drop(Master *m) noexcept nogil:
    """Closes the connection (close() only: no bytes are sent, safe in a forked child)."""
    if m.ctx != NULL:
        if m.defer_free and m.doomed == NULL:
            m.doomed = m.ctx
        else:
            free_context(m.ctx)
        m.ctx = NULL
    forget_redo(m, <unsigned long long>-1)
    m.sent = 0
    m.received = 0
    m.state = DOWN
    m.stale = 0
    m.handshake = 0
    m.want_write = False
    m.scripts_known = 0
    m.has_channel = False
    m.tls_wants_write = False


cdef void bury(Master *m) noexcept nogil:
    """Closes the socket a deferred drop() kept open (see Master.doomed)."""
    if m.doomed != NULL:
        free_context(m.doomed)
        m.doomed = NULL


cdef void fail(Master *m, const char *reason, int64_t now) noexcept nogil:
    """Drops the connection after a failure, reported to the policy at the round's end
    (unreached: nothing was written to it, its connection was not up)."""
    m.report |= REPORT_FAILED if m.state == READY else REPORT_FAILED | REPORT_UNREACHED
    m.failed_at = now
    snprintf(m.why, sizeof(m.why), b"%s", reason)
    drop(m)


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


# -- before a round: a fork's inherited sockets, names looked up, what arrived meanwhile --------

cdef void _forget_inherited(NativeEngine self) noexcept nogil:
    # In a forked child: close our copies of the parent's sockets, sending nothing.
    cdef int i
    for i in range(self.n):
        drop(&self.masters[i])
    self.generation = fork_generation


cdef bint _lookup_due(NativeEngine self) noexcept nogil:
    """Whether a named master has no connection (this round may open one)."""
    cdef int i
    for i in range(self.n):
        if self.masters[i].named and self.masters[i].ctx == NULL and not self.masters[i].skip:
            return True
    return False


cdef bint _resolve(NativeEngine self, int64_t timeout_ns) noexcept with gil:
    """Looks up the named masters that have no connection, all at once, waiting at most the
    round's timeout (_resolver answers from its cache, and waits only for a name's first
    lookup). False when interrupted (the exception is kept, as in _signalled)."""
    cdef int i
    cdef Master *m
    cdef bytes text
    indices = [i for i in range(self.n)
               if self.masters[i].named and self.masters[i].ctx == NULL
               and not self.masters[i].skip]
    try:
        answers = _resolver.lookup_many(
            [self._places[i] for i in indices],
            max(timeout_ns, 0) / 1e9)
    except BaseException as exc:
        self.pending_exc = exc
        return False
    for i, answer in zip(indices, answers):
        m = &self.masters[i]
        if isinstance(answer, str):
            text = answer.encode("utf-8", "replace")
            m.address = NULL
            snprintf(m.resolve_error, sizeof(m.resolve_error), b"%s", <char *>text)
        else:
            self._answers[i] = answer
            self._addresses[i] = answer.host.encode()
            m.address = PyBytes_AS_STRING(self._addresses[i])
            m.port = answer.port  # (a Sentinel group's master has a port of its own)
    return True


# -- the engine's MasterPolicy: its masks before a round, the round's report after ------------

cdef bint _policy_before(NativeEngine self, bint honour_backoff, bint set_round) noexcept with gil:
    """Asks the policy what it only says when a mask may not be 0 (master_policy: failover,
    honour_backoff): drops the connections it says go, marks the masters it skips. False when
    interrupted (the exception is kept, as in _signalled)."""
    cdef int i
    cdef Master *m
    cdef bytes why
    cdef int64_t now = now_ns()
    policy = self.policy
    try:
        if now >= self.p_next_follow:
            gone = policy.follow(
                now, [self._answers[i] if self.masters[i].ctx != NULL else None
                      for i in range(self.n)])
            if gone:
                for i in range(self.n):
                    if (gone >> i) & 1:
                        drop(&self.masters[i])
        if honour_backoff and self.p_down:
            skip = policy.skipped(now, set_round)
            if skip:
                self.c_skipping = True
                for i in range(self.n):
                    m = &self.masters[i]
                    m.skip = (skip >> i) & 1
                    if m.skip:
                        why = policy.last_error[i].encode("utf-8", "replace")
                        self._skip_why[i] = why
                        m.skip_why = PyBytes_AS_STRING(why)
        _take_masks(self)
    except BaseException as exc:
        self.pending_exc = exc
        return False
    return True


cdef void _settle(NativeEngine self) noexcept with gil:
    """Hands the masters' reports to the policy (MasterReport: called only when one is not 0),
    drops the connections it says go now (READONLY) and takes its masks for later rounds."""
    cdef int i, report
    cdef Master *m
    failed = unreached = up = lagged = caught_up = readonly = 0
    reasons = {}
    for i in range(self.n):
        m = &self.masters[i]
        report = m.report
        if not report:
            continue
        m.report = 0
        bit = (<object>1) << i
        if report & REPORT_FAILED:
            failed |= bit
            reasons[i] = (m.failed_at, m.why.decode("utf-8", "replace"))
        if report & REPORT_UNREACHED:
            unreached |= bit
        if report & REPORT_UP:
            up |= bit
        if report & REPORT_LAGGED:
            lagged |= bit
        if report & REPORT_CAUGHT_UP:
            caught_up |= bit
        if report & REPORT_READONLY:
            readonly |= bit
    try:
        gone = self.policy.settle(
            MasterReport(failed, unreached, up, lagged, caught_up, readonly, reasons))
        if gone:
            for i in range(self.n):
                if (gone >> i) & 1:
                    drop(&self.masters[i])
        _take_masks(self)
    except BaseException as exc:
        if self.pending_exc is None:
            self.pending_exc = exc


cdef int _take_masks(NativeEngine self) except -1:
    """Reads what C keeps of the policy's state, after each call into it (see Master.lagging)."""
    cdef int i
    policy = self.policy
    lagging = policy.lagging
    for i in range(self.n):
        self.masters[i].lagging = lagging and (lagging >> i) & 1
    self.p_down = policy.down != 0
    follow = policy.next_follow
    self.p_next_follow = NEVER if follow == math.inf else <int64_t>follow
    return 0


cdef void _refresh(NativeEngine self) noexcept nogil:
    """(python_engine.py: _refresh says why) Takes in, without waiting, the late replies and
    the closed connections of idle masters, before a round."""
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
                step = _tls_step(self, i)
                if step < 0:
                    drop(m)
                if step <= 0:
                    continue
                m.want_write = m.tls_wants_write
            m.state = READY
            m.report |= REPORT_UP
            if _handshake(self, i) != NULL:
                drop(m)
            continue
        broken = _fill(self, i) != NULL
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
                broken = _fill(self, i) != NULL
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
                broken = redo != NULL and _resend(self, i, redo) != NULL
            else:
                broken = True  # a reply nobody asked for: never guess what it answers
            hl_free_reply(raw)
        # The late replies and the end of the stream may have come together (a master that
        # answered, then died): the read above took the replies, not the end. A connection
        # whose peer has closed is replaced now, not found dead in the middle of the round.
        if not broken and (self.fds[k].revents & (HL_POLLRDHUP | POLLHUP | POLLERR)
                           or (HL_POLLRDHUP == 0 and hl_peer_closed(hl_context_fd(m.ctx)))):
            broken = True
        if not broken and m.want_write:
            broken = _flush(self, i) != NULL
        if broken:
            drop(m)


# -- connect and login ------------------------------------------------------------------------

cdef bint _connect(NativeEngine self, int i, int64_t now) noexcept nogil:
    cdef Master *m = &self.masters[i]
    if m.path != NULL:
        m.ctx = redisConnectUnixNonBlock(m.path)
    elif m.named:
        if m.address == NULL:
            # no address (yet): a failed connect (see _resolve)
            _fail_master(self, i, CONN_ERROR, m.resolve_error, now)
            return False
        m.ctx = redisConnectNonBlock(m.address, m.port)
        m.address = NULL  # each connect uses the lookup made for its own round
    else:
        m.ctx = redisConnectNonBlock(m.host, m.port)
    if m.ctx == NULL:
        _local_failure(self, i, b"out of memory")
        return False
    hl_use_scratch(m.ctx.reader, &m.scratch)
    if m.ctx.err:
        if is_local_failure(m.ctx.errstr):
            _local_failure(self, i, m.ctx.errstr)
        else:
            _fail_master(self, i, CONN_ERROR, m.ctx.errstr, now)
        return False
    hl_set_noinherit(hl_context_fd(m.ctx))
    m.state = CONNECTING
    if m.lagging:  # a new connection owes nothing (master_policy: lagging)
        m.lagging = False
        m.report |= REPORT_CAUGHT_UP
    m.waited = True
    m.cold = True
    m.unqueued = True
    m.connect_deadline = now + (
        self.c_timeout_ns if self.c_timeout_ns > CONNECT_MIN_NS else CONNECT_MIN_NS)
    m.stale = 0
    m.handshake = 0
    return True


cdef const char *_handshake(NativeEngine self, int i) noexcept nogil:
    """Queues AUTH and SELECT on a connection that has just connected; they answer first.
    NULL, or why the connection failed."""
    cdef Master *m = &self.masters[i]
    cdef const char *argv[2]
    cdef size_t argvlen[2]
    cdef char dbtext[24]
    cdef const char *failure
    if m.auth_argc:
        failure = _put_argv(self, i, m.auth_argc, m.auth_argv, m.auth_len)
        if failure != NULL:
            return failure
        m.handshake += 1
        m.sent += 1
    if m.select_db >= 0:
        argv[0] = b"SELECT"
        argvlen[0] = 6
        argvlen[1] = format_int(dbtext, m.select_db)
        argv[1] = dbtext
        failure = _put_argv(self, i, 2, argv, argvlen)
        if failure != NULL:
            return failure
        m.handshake += 1
        m.sent += 1
    return NULL


cdef const char *_put_argv(NativeEngine self, int i, int argc, const char **argv,
                           const size_t *argvlen) noexcept nogil:
    cdef char *formatted = NULL
    cdef int length = format_command(&formatted, argc, argv, argvlen)
    cdef const char *failure
    if length < 0:
        return b"out of memory"
    failure = _put(self, i, formatted, length)
    free(formatted)
    return failure


cdef void _write(NativeEngine self, int i, int64_t now) noexcept nogil:
    cdef const char *failure = _flush(self, i)
    if failure != NULL:
        _fail_master(self, i, CONN_ERROR, failure, now)


# -- bytes to and from a master: libhiredis's buffers, or a TLS master's channel ----------

cdef const char *_put(NativeEngine self, int i, const char *data, size_t length) noexcept nogil:
    """Queues formatted commands; a TLS master's are encrypted and sent at once (as much as
    the socket takes). NULL, or why the connection failed."""
    cdef Master *m = &self.masters[i]
    if m.tls:
        return _tls_send(self, i, data, length)
    if redisAppendFormattedCommand(m.ctx, data, length) == REDIS_ERR:
        return b"out of memory"
    m.want_write = True
    return NULL


cdef const char *_flush(NativeEngine self, int i) noexcept nogil:
    """Writes what is queued, as much as the socket takes; NULL, or why that failed."""
    cdef Master *m = &self.masters[i]
    cdef int done = 0
    if m.tls:
        return _tls_send(self, i, NULL, 0)
    if redisBufferWrite(m.ctx, &done) == REDIS_ERR:
        return plain_failure(m, m.ctx.errstr, errno if m.ctx.err == REDIS_ERR_IO else 0)
    m.want_write = not done
    return NULL


cdef const char *_fill(NativeEngine self, int i) noexcept nogil:
    """Reads what arrived into the reply reader; NULL, or why the connection failed."""
    cdef Master *m = &self.masters[i]
    if m.tls:
        return _tls_read(self, i)
    if redisBufferRead(m.ctx) == REDIS_ERR:
        return plain_failure(m, m.ctx.errstr, errno if m.ctx.err == REDIS_ERR_IO else 0)
    return NULL


cdef const char *_resend(NativeEngine self, int i, Redo *redo) noexcept nogil:
    """Sends an abandoned command's EVAL (late_reply's), whose reply will be dropped too."""
    cdef Master *m = &self.masters[i]
    cdef const char *failure = _put(self, i, redo.command, redo.length)
    free_redo(redo)
    if failure == NULL:
        m.sent += 1
        m.stale += 1
    return failure


cdef const char *_tls_send(NativeEngine self, int i, const char *data,
                           size_t length) noexcept with gil:
    cdef Master *m = &self.masters[i]
    try:
        channel = self._channels[i]
        if length:
            done = channel.write(PyBytes_FromStringAndSize(data, length))
        else:
            done = channel.flush()
    except BaseException as exc:
        return _tls_failed(self, m, exc)
    m.want_write = not done
    return NULL


cdef const char *_tls_read(NativeEngine self, int i) noexcept with gil:
    cdef Master *m = &self.masters[i]
    cdef bytes data
    try:
        data = self._channels[i].read()
    except BaseException as exc:
        return _tls_failed(self, m, exc)
    if data and redisReaderFeed(m.ctx.reader, PyBytes_AS_STRING(data),
                                PyBytes_GET_SIZE(data)) == REDIS_ERR:
        return b"out of memory"
    return NULL


cdef int _tls_step(NativeEngine self, int i) noexcept with gil:
    """One step of a TLS master's handshake, on a confirmed TCP connection (its channel is
    made at the first): 1 once it is over, 0 while it goes on, -1 failed (see tls_error)."""
    cdef Master *m = &self.masters[i]
    try:
        if not m.has_channel:
            spec = self.specs[i]
            # (no host name in a Sentinel group's spec: the address its sentinels named)
            host = spec.host if spec.host is not None else self._addresses[i].decode()
            self._channels[i] = _tls.TLSChannel.on_fd(spec.tls, hl_context_fd(m.ctx), host)
            m.has_channel = True
        channel = self._channels[i]
        done = channel.handshake()
        m.tls_wants_write = channel.wants_write
    except BaseException as exc:
        _tls_failed(self, m, exc)
        return -1
    return 1 if done else 0


cdef const char *_tls_failed(NativeEngine self, Master *m, exc) noexcept:
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


# -- a master failed in this round --------------------------------------------------------------

cdef void _local_failure(NativeEngine self, int i, const char *reason) noexcept nogil:
    """Master i's connect failed for want of this process's resources: its votes say so; no
    reconnect backoff starts (see hiredlock/_engines/connect.py)."""
    cdef char detail[MAX_LOCAL_DETAIL]
    snprintf(detail, sizeof(detail), b"%s%s", local_prefix, reason)
    _vote_master(self, i, CONN_ERROR, detail)
    self.masters[i].slot_head = self.masters[i].slot_tail
    self.masters[i].failed = True
    drop(&self.masters[i])


cdef void _fail_master(NativeEngine self, int i, uint8_t code, const char *detail,
                       int64_t now) noexcept nogil:
    """(round.py: Round.fail) Master i gets `code` on every key it has not answered, and its
    connection goes."""
    cdef const char *reason = detail
    if reason == NULL:
        reason = b"failure"
    _vote_master(self, i, code, detail)
    self.masters[i].slot_head = self.masters[i].slot_tail
    self.masters[i].failed = True
    fail(&self.masters[i], reason, now)
