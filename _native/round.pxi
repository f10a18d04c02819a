# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# One round: started, fed events, the stop rule, the votes and the results.
#
# The mirror of hiredlock/_engines/round.py's Round, its Votes and run_blocking: commands queued
# and written, events (writable, readable, a deadline), the stop rules (wanted, stop, extend,
# account), the votes, the masters' report to the policy and the results. _run is the sync driver
# (poll() with the GIL released); round_events.pxi's NativeRound feeds the same steps from an event
# loop. Included by engine.pyx; its C functions are declared in engine.pxd.

# -- one round -------------------------------------------------------------------------------

cdef object _round(NativeEngine self, Kind kind, tuple head, tuple eval_head, tuple items,
                   tuple tokens, tuple tail, double timeout_ms, bint wait_all,
                   bint honour_backoff, bint want_values, bint acquires,
                   uint32_t script_bit, tuple batching=None, int item_keys=0):
    """One round: run here with the GIL released (its results), or when beginning, started and
    handed back to be fed by a driver (a NativeRound). items: a tuple of rows (one tuple of
    arguments per item), or with tokens (SET), the keys: item k's arguments are items[k],
    tokens[k]. batching: a batched script's (its bit, EVALSHA head and EVAL head, without the
    count; script_bit is then its bit), item_keys the keys in each row."""
    cdef bint columns = tokens is not None
    cdef int n_items = len(items)
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
        rnd.keep = (head, eval_head, items, tokens, tail, batching)
        rnd.ended = True  # until it is handed out
        rnd.results = []
        cmd = &rnd.cmd
    if n_items == 0:
        if begin:
            return rnd
        return []
    n_args = 2 if columns else len(items[0])
    if not 0 < n_args <= MAX_ARGS:
        raise ValueError(f"a command takes 1 to {MAX_ARGS} arguments per item")
    self._grow(n_items)
    memset(cmd, 0, <size_t>(<char *>&cmd.item_keys - <char *>cmd))  # (see Command)
    cmd.kind = kind
    cmd.n_items = n_items
    cmd.unit = 1
    cmd.n_units = n_items
    if batching is not None:
        if not 0 < item_keys <= n_args:
            raise ValueError("a script's keys are some of its arguments")
        cmd.unit = BATCH_ITEMS
        cmd.n_units = (n_items + BATCH_ITEMS - 1) // BATCH_ITEMS
        cmd.item_keys = item_keys
        cmd.per_key_len = snprintf(cmd.per_key, sizeof(cmd.per_key), b"%d", item_keys)
        cmd.n_unit_head = _parts(batching[1], cmd.unit_head, cmd.unit_head_len)
        _parts(batching[2], cmd.unit_eval_head, cmd.unit_eval_head_len)
    cmd.want_values = want_values
    cmd.acquires = acquires
    cmd.script_bit = script_bit
    cmd.n_head = _parts(head, cmd.head, cmd.head_len)
    _parts(eval_head, cmd.eval_head, cmd.eval_head_len)
    cmd.n_tail = _parts(tail, cmd.tail, cmd.tail_len)
    cmd.n_args = n_args
    cmd.args = self.args
    cmd.args_len = self.args_len
    cmd.item_end = self.item_end
    try:
        # `items` (and `tokens`) keep every bytes object alive while the GIL is released.
        for k in range(n_items):
            if not columns:
                row = items[k]
                if len(row) != n_args:
                    raise ValueError("every item must have the same number of arguments")
                if type(row) is not tuple:
                    row = tuple(row)
            for j in range(n_args):
                # (set_nx makes its keys and tokens tuples)
                if columns:
                    value = items[k] if j == 0 else tokens[k]
                else:
                    value = (<tuple>row)[j]
                if type(value) is not bytes:
                    raise TypeError("command arguments must be bytes")
                cmd.args[k * n_args + j] = PyBytes_AS_STRING(value)
                cmd.args_len[k * n_args + j] = PyBytes_GET_SIZE(value)
        _format_batch(self, cmd)
        if self.routed:
            _assign(self, cmd, items, columns)
        self.busy = True
        if begin:
            if self.generation != fork_generation:
                _forget_inherited(self)
            # Host names are looked up here, synchronously, bounded by the round's timeout.
            if not _start(self, cmd, <int64_t>(timeout_ms * 1e6), wait_all, honour_backoff):
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
                _forget_inherited(self)
            _run(self, cmd, <int64_t>(timeout_ms * 1e6), wait_all, honour_backoff)
            end = now_ns()
        if self.pending_exc is not None:
            # A signal handler raised (or a lookup was interrupted): the round has ended
            # and accounted for every reply it is still owed, so the exception may go.
            exc = self.pending_exc
            self.pending_exc = None
            raise exc
        return _results(self, cmd, self.c_t0, end)
    finally:
        if rnd is None or rnd.ended:  # a round handed out keeps the engine until it ends
            self.busy = False
            _clear_details(self, n_items)


cdef inline void _clear_details(NativeEngine self, int n_items) noexcept nogil:
    cdef int i
    if not self.c_details:
        return
    self.c_details = False
    for i in range(n_items * self.n_cols):
        free(self.details[i])
        self.details[i] = NULL


cdef list _results(NativeEngine self, Command *cmd, int64_t t0, int64_t end):
    cdef int k, i
    cdef uint8_t *row
    cdef list out = []
    cdef dict details
    cdef int n_cols = self.n_cols
    for k in range(cmd.n_items):
        row = self.codes + k * n_cols
        details = None
        for i in range(n_cols):
            if row[i] == PENDING:
                row[i] = SKIPPED if self.decided_at[k] else TIMEOUT
            if self.details[k * n_cols + i] != NULL:
                if details is None:
                    details = {}
                details[i] = self.details[k * n_cols + i].decode("utf-8", "replace")
        out.append((
            PyBytes_FromStringAndSize(<char *>row, n_cols),
            (self.decided_at[k] if self.decided_at[k] else end) - t0,
            details,
            tuple([self.values[k * n_cols + i] for i in range(n_cols)])
            if cmd.want_values else None,
        ))
    return out


cdef void _run(NativeEngine self, Command *cmd, int64_t timeout_ns, bint wait_all,
               bint honour_backoff) noexcept nogil:
    """The sync driver: a whole round, polling with the GIL released. The event-fed round
    (NativeRound) is the same steps, with its waiting done by an event loop."""
    cdef int k, nfds, rc
    cdef bint last_look
    cdef int64_t remaining, wait, now, next_check
    if not _start(self, cmd, timeout_ns, wait_all, honour_backoff):
        return  # interrupted before anything was written: nothing is owed
    next_check = self.c_t0 + SIGNAL_SLICE_NS
    while True:
        nfds = _wanted(self)
        if _stop(self, nfds):
            break
        now = now_ns()
        if now >= next_check:
            if _signalled(self):
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
            if _signalled(self):
                break
            next_check = now_ns() + SIGNAL_SLICE_NS
            continue
        for k in range(nfds):
            if self.fds[k].revents:
                _service(self, self.fd_master[k], self.fds[k].revents, cmd)
        if last_look and not _extend(self):
            break
    # Every way out of the loop above comes here, a signal handler's exception included.
    _account(self, cmd)


# The steps of a round, shared by the sync driver (_run) and the event-fed round.

cdef inline bint _start(NativeEngine self, Command *cmd, int64_t timeout_ns, bint wait_all,
                        bint honour_backoff) noexcept nogil:
    """Starts a round: takes in what arrived since the last one, looks up host names, queues
    every command on every master and writes what the sockets take. False when a lookup was
    interrupted (the exception is in pending_exc): nothing was written, nothing is owed."""
    cdef int i
    cdef int64_t t0
    cdef Master *m
    memset(self.codes, PENDING, <size_t>cmd.n_items * self.n_cols)
    memset(self.oks, 0, cmd.n_items * sizeof(int))
    memset(self.fails, 0, cmd.n_items * sizeof(int))
    memset(self.decided_at, 0, cmd.n_items * sizeof(int64_t))
    if cmd.want_values:
        memset(self.values, 0, <size_t>cmd.n_items * self.n_cols * sizeof(long long))
    if self.routed:
        memset(self.redirects, 0, cmd.n_items)
    self.c_n_items = cmd.n_items
    self.c_undecided = cmd.n_items
    self.c_timeout_ns = timeout_ns
    self.c_wait_all = wait_all
    self.c_best_effort = wait_all and honour_backoff  # (contract: best effort)
    self.c_extended = False
    if self.c_skipping:
        self.c_skipping = False
        for i in range(self.n):
            self.masters[i].skip = False

    # Take in what arrived since the last round: late replies, and closed connections.
    if self.in_round:
        for i in range(self.n):
            drop(&self.masters[i])
    _refresh(self)
    # The policy is asked only when a mask may not be 0; host names are looked up now, before
    # the round's clock starts, and only when some named master is about to connect.
    if (((self.p_next_follow != NEVER and now_ns() >= self.p_next_follow)
            or (honour_backoff and self.p_down))
            and not _policy_before(self, honour_backoff, cmd.kind == KIND_SET)):
        self.c_t0 = now_ns()
        return False
    if self.n_named and _lookup_due(self) and not _resolve(self, timeout_ns):
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
        # (contract: keeps up)
        m.waited = not m.lagging and m.state != CONNECTING
        m.slot_head = 0
        m.slot_tail = 0
        m.idle = m.n_carry == 0  # (only with a router: a cluster node without keys this round)
        if m.idle and m.warm and m.ctx == NULL:
            # a redirect named it while it had no connection: opened now, for the next ones
            # (routing.py's round.py twin: Master.warm)
            m.warm = False
            m.idle = False
        if not m.idle:
            _prepare(self, i, cmd, t0)
    return True


# -- the stop rules (contract: wanted, stop, extend, account; the rules are written there) -----

cdef inline int _wanted(NativeEngine self) noexcept nogil:
    """(contract: wanted) Fills fds (and fd_master) with what the round waits for on each
    socket, returns how many, and sets c_owed / c_owed_waited for _stop."""
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
            if m.idle:
                continue
            events = connect_events(m)
            owes = True
        elif m.slot_head != m.slot_tail:
            events = POLLIN | POLLOUT if m.want_write else POLLIN
            owes = True
        elif m.want_write:
            events = POLLIN | POLLOUT  # (contract: rule 2)
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


cdef inline bint _stop(NativeEngine self, int nfds) noexcept nogil:
    """(contract: stop) Whether the round is over, given what _wanted() just found."""
    if not self.c_owed:
        return True
    if self.c_undecided == 0 or self.c_best_effort:
        return not self.c_wait_all or not self.c_owed_waited
    return self.c_extended and not _cold_can_decide(self)


cdef inline bint _extend(NativeEngine self) noexcept nogil:
    """(contract: extend) After the look at D: whether the round goes on to C."""
    if (not self.c_extended and not self.c_best_effort
            and self.c_cold_deadline > self.c_deadline):
        self.c_extended = True
        return True
    return False


cdef inline void _account(NativeEngine self, Command *cmd) noexcept nogil:
    """(contract: account) Ends a round: what is still owed is read and dropped by a later
    round, or the connection goes; the masters' reports go to the policy."""
    cdef int i
    cdef Master *m
    cdef bint troubled = False
    cdef int64_t now = now_ns()
    for i in range(self.n):
        m = &self.masters[i]
        if m.ctx != NULL:
            if m.state == CONNECTING and now >= m.connect_deadline and not m.idle:
                _explain_pending(self, i, connect_timed_out(m))
                fail(m, connect_timed_out(m), now)
            elif m.slot_tail > m.slot_head:
                m.stale += m.slot_tail - m.slot_head
                if now >= (self.c_cold_deadline if m.cold else self.c_deadline):
                    m.report |= REPORT_LAGGED
                if cmd.kind == KIND_SCRIPT and not cmd.acquires:
                    _owe_evals(self, m, cmd)  # (a late acquire never runs: Script.acquires)
            if m.stale > MAX_STALE:
                drop(m)
        if m.report:
            troubled = True
    self.in_round = False
    if troubled:
        _settle(self)


cdef bint _signalled(NativeEngine self) noexcept with gil:
    """Runs Python's signal handlers; True when one raised (the exception is kept for the
    caller of the round, which raises it once the round is accounted for)."""
    try:
        PyErr_CheckSignals()
    except BaseException as exc:
        self.pending_exc = exc
        return True
    return False


cdef bint _cold_can_decide(NativeEngine self) noexcept nogil:
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
                    and self.codes[k * self.n_cols + m.column] == PENDING
                    and (not self.routed or self.owner[k * self.n_cols + m.column] == i)):
                possible += 1
        if possible >= self.quorum:
            return True
    return False


# -- queueing the round's commands on each master (_Round.queue) -----------------------------

cdef void _prepare(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil:
    cdef Master *m = &self.masters[i]
    if m.state == CONNECTING and now >= m.connect_deadline:
        _fail_master(self, i, CONN_ERROR, connect_timed_out(m), now)
        return
    if m.ctx == NULL:
        if m.skip:  # (master_policy: honour_backoff)
            _vote_master(self, i, CONN_ERROR, m.skip_why)
            m.failed = True
            return
        if not _connect(self, i, now):
            return
    if m.state == READY:
        _queue_round(self, i, cmd, now)
    # else: commands are queued once the connect completes, if it does within this round; a
    # connection still connecting when the round ends has nothing queued, so nothing stale
    # can reach the master later.


cdef void _queue_round(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil:
    """Queues the handshake (on a new connection) and every command of the round; writes."""
    cdef Master *m = &self.masters[i]
    cdef int k
    m.unqueued = False
    # A script not sent on this connection yet goes as EVAL (see Master.scripts_known);
    # a script the engine does not track (more than 32) relies on the NOSCRIPT fallback.
    cdef bint as_eval = cmd.script_bit != 0 and not (m.scripts_known & cmd.script_bit)
    cdef const char *failure
    # a batched round on a master that takes no batch (see Master.unbatched): each name's own
    # script, as EVAL (command -1 - k)
    cdef bint one_by_one = cmd.unit > 1 and m.unbatched
    if m.n_carry >= 0:
        # a cluster node: only the keys of its slots, in the order the router gave
        for k in range(m.n_carry):
            failure = _append_item(self, i, cmd, m.carry[k], False, as_eval)
            if failure != NULL:
                _fail_master(self, i, CONN_ERROR, failure, now)
                return
        if as_eval and m.n_carry > 0:
            m.scripts_known |= cmd.script_bit
        m.want_write = True
        _write(self, i, now)
        return
    if as_eval or one_by_one:
        for k in range(cmd.n_items if one_by_one else cmd.n_units):
            failure = _append_eval(self, i, cmd, -1 - k if one_by_one else k)
            if failure != NULL:
                _fail_master(self, i, CONN_ERROR, failure, now)
                return
        if not one_by_one:
            m.scripts_known |= cmd.script_bit
    else:
        if m.slot_tail + cmd.n_units > m.slot_cap:
            _fail_master(self, i, CONN_ERROR, b"out of memory", now)
            return
        if m.tls:
            failure = _put(self, i, cmd.batch, cmd.item_end[cmd.n_units - 1])
            if failure != NULL:
                _fail_master(self, i, CONN_ERROR, failure, now)
        elif m.ctx.obuf != NULL and m.ctx.obuf[0] == 0:
            # Nothing queued before it (no login, no owed EVAL): the batch goes out straight
            # from the engine's buffer, without a copy into libhiredis's.
            _send_batch(self, i, cmd, now)
        elif redisAppendFormattedCommand(
                m.ctx, cmd.batch, cmd.item_end[cmd.n_units - 1]) == REDIS_ERR:
            _fail_master(self, i, CONN_ERROR, b"out of memory", now)
        else:
            m.want_write = True
            _write(self, i, now)
        if m.failed:
            return
        for k in range(cmd.n_units):
            m.slots[m.slot_tail] = k
            m.slot_seq[m.slot_tail] = m.sent
            m.slot_tail += 1
            m.sent += 1
        return
    m.want_write = True
    _write(self, i, now)


cdef void _send_batch(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil:
    """Sends the round's batch on an idle connection; what the socket does not take now is
    queued in libhiredis's output buffer, written when the socket is writable."""
    cdef Master *m = &self.masters[i]
    cdef size_t total = cmd.item_end[cmd.n_units - 1]
    cdef long sent = hl_send(hl_context_fd(m.ctx), cmd.batch, total)
    cdef int error
    if sent < 0:
        error = hl_send_error()
        _fail_master(self, i, CONN_ERROR, plain_failure(m, hl_error_text(error), error), now)
    elif <size_t>sent < total:
        if redisAppendFormattedCommand(m.ctx, cmd.batch + sent, total - sent) == REDIS_ERR:
            _fail_master(self, i, CONN_ERROR, b"out of memory", now)
        else:
            m.want_write = True
    else:
        m.want_write = False


cdef const char *_append_eval(NativeEngine self, int i, Command *cmd, int k) noexcept nogil:
    """Queues command k's script as EVAL (with its source) on master i; NULL, or why not."""
    cdef Master *m = &self.masters[i]
    cdef int argc, length
    cdef char *formatted = NULL
    cdef const char *failure
    if not _room(m, 1):
        return b"out of memory"
    argc = _command_argv(self, cmd, k, True)
    length = format_command(&formatted, argc, self.argv_ptr, self.argv_len)
    if length < 0:
        return b"out of memory"
    failure = _put(self, i, formatted, length)
    free(formatted)
    if failure != NULL:
        return failure
    m.slots[m.slot_tail] = k
    m.slot_seq[m.slot_tail] = m.sent
    m.slot_tail += 1
    m.sent += 1
    return NULL


cdef void _owe_evals(NativeEngine self, Master *m, Command *cmd) noexcept nogil:
    """The round ends before these script replies came: keep each one's EVAL, in case the
    late reply is NOSCRIPT (a flushed script cache), so the script still runs there."""
    cdef int j, argc, length
    cdef char *formatted
    cdef Redo *redo
    for j in range(m.slot_head, m.slot_tail):
        if m.slots[j] < 0 and cmd.unit == 1:
            continue  # an ASKING
        argc = _command_argv(self, cmd, m.slots[j], True)
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


# -- an event on a master's socket: connected, writable, readable ---------------------------

cdef void _service(NativeEngine self, int i, int revents, Command *cmd) noexcept nogil:
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
                _fail_master(self, i, CONN_ERROR, hl_error_text(err), now)
                return
        if m.tls:
            err = _tls_step(self, i)
            if err < 0:
                _fail_master(self, i, CONN_ERROR, m.tls_error, now)
                return
            if err == 0:
                return  # the handshake goes on
            m.want_write = m.tls_wants_write
        m.state = READY
        m.report |= REPORT_UP
        # (contract: new) up in this round: its login and first commands have the bound C
        m.cold = True
        m.waited = True
        failure = _handshake(self, i)
        if failure != NULL:
            _fail_master(self, i, CONN_ERROR, failure, now)
            return
        _queue_round(self, i, cmd, now)
        return
    if revents & POLLOUT:
        _write(self, i, now)
        if m.failed:
            return
    if revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL):
        failure = _fill(self, i)
        if failure != NULL:
            _fail_master(self, i, CONN_ERROR, failure, now)
            return
        _drain(self, i, cmd, now)


cdef void _drain(NativeEngine self, int i, Command *cmd, int64_t now) noexcept nogil:
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
            _fail_master(self, i, ERROR, refused, now)
            return
        if raw == NULL:
            return
        reply = <redisReply *>raw
        m.received += 1
        if m.handshake > 0:
            m.handshake -= 1
            if reply.type == REDIS_REPLY_ERROR:
                _fail_master(self, i, ERROR, reply.str, now)
                hl_free_reply(raw)
                return
        elif m.stale > 0:
            redo = late_reply(m, reply)
            if redo != NULL:
                refused = _resend(self, i, redo)
                if refused != NULL:
                    _fail_master(self, i, CONN_ERROR, refused, now)
                else:
                    _write(self, i, now)
        elif m.slot_head < m.slot_tail:
            k = m.slots[m.slot_head]
            m.slot_head += 1
            if k < 0:
                if cmd.unit > 1:
                    # a batched round's key -1 - k, sent on its own (as EVAL: see batches.pxi)
                    _count(self, cmd, -1 - k, i, reply)
                elif reply.type == REDIS_REPLY_ERROR:
                    # the ASKING before key -1 - k's command (a cluster node): its vote
                    _vote(self, -1 - k, i, ERROR, reply.str)
            elif (cmd.kind == KIND_SCRIPT and reply.type == REDIS_REPLY_ERROR
                    and strncmp(reply.str, b"NOSCRIPT", 8) == 0):
                # NOSCRIPT (a SCRIPT FLUSH): its EVAL goes now, and its reply is waited for
                m.scripts_known &= ~cmd.script_bit
                refused = _append_eval(self, i, cmd, k)
                if refused != NULL:
                    _fail_master(self, i, CONN_ERROR, refused, now)
                else:
                    m.want_write = True
                    _write(self, i, now)
            elif (self.routed and reply.type == REDIS_REPLY_ERROR
                    and (strncmp(reply.str, b"MOVED ", 6) == 0
                         or strncmp(reply.str, b"ASK ", 4) == 0)):
                _redirect(self, cmd, k, i, reply.str, now)
            else:
                if cmd.kind == KIND_SCRIPT and reply.type != REDIS_REPLY_ERROR:
                    m.scripts_known |= cmd.script_bit
                if cmd.unit == 1:
                    _count(self, cmd, k, i, reply)
                else:
                    _take_batched(self, cmd, k, i, reply, now)
        hl_free_reply(raw)
        if m.failed:
            return


# -- the votes (_Votes) ------------------------------------------------------------------------

cdef void _count(NativeEngine self, Command *cmd, int k, int i, redisReply *reply) noexcept nogil:
    if reply.type == REDIS_REPLY_ERROR:
        _vote(self, k, i, ERROR, reply.str)
        if strncmp(reply.str, b"READONLY", 8) == 0:
            self.masters[i].report |= REPORT_READONLY  # (master_policy: READONLY)
    elif cmd.kind == KIND_SET:
        if (reply.type == REDIS_REPLY_STATUS and reply.len == 2
                and strncmp(reply.str, b"OK", 2) == 0):
            _vote(self, k, i, OK, NULL)
        elif reply.type == REDIS_REPLY_NIL:
            _vote(self, k, i, TAKEN, NULL)
        else:
            _vote(self, k, i, ERROR, b"unexpected reply to SET")
    elif reply.type == REDIS_REPLY_INTEGER:
        if cmd.want_values:
            self.values[k * self.n_cols + self.masters[i].column] = reply.integer
        _vote(self, k, i, OK if reply.integer > 0 else TAKEN, NULL)
    elif reply.type == REDIS_REPLY_NIL:
        _vote(self, k, i, TAKEN, NULL)
    else:
        _vote(self, k, i, ERROR, b"unexpected reply to the script")


cdef void _vote(NativeEngine self, int k, int i, uint8_t code, const char *detail) noexcept nogil:
    cdef int cell = k * self.n_cols + self.masters[i].column
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
            self.oks[k] >= self.quorum or self.fails[k] > self.n_cols - self.quorum):
        self.decided_at[k] = now_ns()
        self.c_undecided -= 1


cdef void _explain_pending(NativeEngine self, int i, const char *detail) noexcept nogil:
    """Gives master i's pending votes on undecided keys (they end as TIMEOUT) a reason."""
    cdef int k, cell
    for k in range(self.c_n_items):
        cell = k * self.n_cols + self.masters[i].column
        if (self.codes[cell] == PENDING and self.decided_at[k] == 0
                and self.details[cell] == NULL
                and (not self.routed or self.owner[cell] == i)):
            self.details[cell] = <char *>malloc(strlen(detail) + 1)
            if self.details[cell] != NULL:
                self.c_details = True
                memcpy(self.details[cell], detail, strlen(detail) + 1)


cdef void _vote_master(NativeEngine self, int i, uint8_t code, const char *detail) noexcept nogil:
    cdef int k
    cdef int c = self.masters[i].column
    for k in range(self.c_n_items):
        # (with a router, only the keys link i carries: see _assign and _redirect)
        if not self.routed or self.owner[k * self.n_cols + c] == i:
            _vote(self, k, i, code, detail)
