# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# A cluster place's links: the router's assignment of a round's keys, and MOVED/ASK followed.
#
# Only with a router (hiredlock/_engines/routing.py's Router; NativeEngine.routed): a Redis Cluster
# place's nodes are links of their own, each voting in its place's column. Before a round, _assign
# asks the router once which link carries which keys; in the round, a node's MOVED or ASK reply
# sends the key's command on to the link the router names (_redirect). The mirror of the same
# steps in hiredlock/_engines/round.py. Included by engine.pyx; its C functions are declared in
# engine.pxd.

# -- before the round: which link carries which keys -------------------------------------------

cdef int _assign(NativeEngine self, Command *cmd, tuple items, bint columns) except -1:
    """Asks the router, once before the round, which link carries which keys (routing.py:
    Router.assign; a key is a script item's first argument): each link's carry list, and the
    link owning each (key, place) vote. Every vote must have exactly one."""
    cdef int n_items = cmd.n_items
    cdef int i, j, k, c, cell, previous
    cdef Master *m
    keys = items if columns else [row[0] for row in items]
    plan = tuple(self.router.assign(keys))
    if len(plan) != self.n:
        raise ValueError("router.assign must give one entry per link")
    for cell in range(n_items * self.n_cols):
        self.owner[cell] = -1
    for i in range(self.n):
        m = &self.masters[i]
        c = m.column
        share = plan[i]
        if share is None:
            m.n_carry = -1
            for k in range(n_items):
                if self.owner[k * self.n_cols + c] != -1:
                    raise ValueError("router.assign gave a key to two links of one place")
                self.owner[k * self.n_cols + c] = i
            continue
        previous = -1
        j = 0
        for index in share:
            k = index
            if not previous < k < n_items:
                raise ValueError("router.assign must give each link ascending key indexes")
            if self.owner[k * self.n_cols + c] != -1:
                raise ValueError("router.assign gave a key to two links of one place")
            self.owner[k * self.n_cols + c] = i
            m.carry[j] = k
            previous = k
            j += 1
        m.n_carry = j
    for cell in range(n_items * self.n_cols):
        if self.owner[cell] == -1:
            raise ValueError("router.assign left a key without a link in some place")
    return 0


# -- a key's command on a link of its own, and a redirection followed ---------------------------

cdef const char *_append_item(NativeEngine self, int i, Command *cmd, int k, bint asking,
                              bint as_eval) noexcept nogil:
    """Queues item k's command alone on link i (a cluster node), after ASKING when `asking`;
    NULL, or why not."""
    cdef Master *m = &self.masters[i]
    cdef const char *failure
    cdef size_t start = cmd.item_end[k - 1] if k > 0 else 0
    if not _room(m, 2):
        return b"out of memory"
    if asking:
        failure = _put(self, i, ASKING_COMMAND, ASKING_LENGTH)
        if failure != NULL:
            return failure
        m.slots[m.slot_tail] = -1 - k  # its reply is dropped (see Master.slots)
        m.slot_seq[m.slot_tail] = m.sent
        m.slot_tail += 1
        m.sent += 1
    if as_eval:
        return _append_eval(self, i, cmd, k)
    failure = _put(self, i, cmd.batch + start, cmd.item_end[k] - start)
    if failure != NULL:
        return failure
    m.slots[m.slot_tail] = k
    m.slot_seq[m.slot_tail] = m.sent
    m.slot_tail += 1
    m.sent += 1
    return NULL


cdef bint _room(Master *m, int more) noexcept nogil:
    """Makes room for `more` reply slots on m (a cluster node may be sent redirected keys on
    top of its own); False when out of memory."""
    cdef int cap = m.slot_cap
    cdef int *slots
    cdef unsigned long long *seq
    if m.slot_tail + more <= cap:
        return True
    while m.slot_tail + more > cap:
        cap = 2 * cap + 2
    slots = <int *>realloc(m.slots, cap * sizeof(int))
    if slots == NULL:
        return False
    m.slots = slots
    seq = <unsigned long long *>realloc(m.slot_seq, cap * sizeof(unsigned long long))
    if seq == NULL:
        return False
    m.slot_seq = seq
    m.slot_cap = cap
    return True


cdef bint _redirect(NativeEngine self, Command *cmd, int k, int i, const char *text,
                    int64_t now) noexcept nogil:
    """A cluster node's MOVED or ASK reply to key k's command on link i: the command goes to
    the link the router names (routing.py: Router.redirect), in this round, if that link is
    connected and the key has not been sent on too often; else the key votes ERROR with the
    reply's text. True when it was sent on."""
    cdef Master *m = &self.masters[i]
    cdef Master *target
    cdef int cell = k * self.n_cols + m.column
    cdef bint asking = False
    cdef bint as_eval
    cdef int j
    cdef const char *failure
    if self.codes[cell] != PENDING:
        return False  # voted already (its ASKING was refused)
    if self.redirects[k] >= MAX_REDIRECTS:
        _vote(self, k, i, ERROR, text)
        return False
    j = _ask_router(self, i, text, &asking)
    if j < 0 or j >= self.n or self.masters[j].column != m.column:
        _vote(self, k, i, ERROR, text)
        return False
    target = &self.masters[j]
    if target.failed or target.ctx == NULL or target.state != READY:
        if target.ctx == NULL:
            target.warm = True  # (the next round opens it, for the redirects that follow)
        _vote(self, k, i, ERROR, text)
        return False
    self.redirects[k] += 1
    self.owner[cell] = j
    as_eval = cmd.script_bit != 0 and not (target.scripts_known & cmd.script_bit)
    failure = _append_item(self, j, cmd, k, asking, as_eval)
    if failure != NULL:
        _fail_master(self, j, CONN_ERROR, failure, now)
        return False
    if as_eval:
        target.scripts_known |= cmd.script_bit
    if target.idle:  # not in this round until now: waited for, with the round's deadline
        target.idle = False
        target.waited = True
        target.cold = False
    target.unqueued = False
    target.want_write = True
    _write(self, j, now)
    return True


cdef int _ask_router(NativeEngine self, int i, const char *text, bint *asking) noexcept with gil:
    """router.redirect(i, text): the link to send the command to, or -1 (none, or the router
    failed: anything but an Exception is raised once the round is over, as in _signalled)."""
    try:
        target = self.router.redirect(i, text.decode("utf-8", "replace"))
        if target is None:
            return -1
        j, ask = target
        asking[0] = bool(ask)
        return j
    except BaseException as exc:
        if not isinstance(exc, Exception) and self.pending_exc is None:
            self.pending_exc = exc
        return -1
