# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# NativeRound: the round fed by an event loop (hiredlock/aio/_rounds.py drives it).
#
# The mirror of the section "what a driver calls" of hiredlock/_engines/python_engine.py's _Round:
# the same C steps as the sync driver (round.pxi), run with the GIL held. Included by engine.pyx;
# NativeRound's fields are declared in engine.pxd.

@cython.final
cdef class NativeRound:
    """One round of a NativeEngine, fed by a driver (an event loop) instead of waited for in C:
    the contract's Round (see _engines/contract.py for what each call means).

    Every step runs the engine's own C steps (those of its GIL-released loop) with the GIL held.
    The round holds its engine (busy) from begin_* until end() or break_off().
    """

    def fds_wanted(self):
        cdef NativeEngine e = self.engine
        cdef int k, nfds, events
        cdef dict wanted = {}
        if self.ended or self.over:
            return wanted
        nfds = _wanted(e)
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
        return _stop(e, _wanted(e))

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
        nfds = _wanted(e)
        for k in range(nfds):
            if e.fds[k].fd == fd:
                _service(e, e.fd_master[k], revents, &self.cmd)
                break
        self._closed(True)

    def on_deadline(self, long long now_ns):
        cdef NativeEngine e = self.engine
        cdef int k, nfds
        if self.ended or self.over or now_ns < self.next_deadline_ns:
            return
        # One more look without waiting: replies already here count (see _run).
        nfds = _wanted(e)
        if nfds and hl_poll(e.fds, nfds, 0) > 0:
            for k in range(nfds):
                if e.fds[k].revents:
                    _service(e, e.fd_master[k], e.fds[k].revents, &self.cmd)
        if not _extend(e):
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
                _account(e, &self.cmd)
            end = now_ns()
            for i in range(e.n):
                e.masters[i].defer_free = False
            self._closed(not broken)
            self.results = _results(e, &self.cmd, e.c_t0, end)
        finally:
            for i in range(e.n):
                e.masters[i].defer_free = False
                bury(&e.masters[i])
            _clear_details(e, self.cmd.n_items)
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
                free_context(ctx)
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
        _clear_details(e, self.cmd.n_items)
        e.busy = False
