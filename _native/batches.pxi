# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# A batched script's commands (hiredlock/_core/scripts.py's BATCHED): their arguments, and their
# replies turned into each name's vote.
#
# The mirror of hiredlock/_engines/script_commands.py's batch_rows and of the batched round's
# replies in _engines/round.py (_count_batched) and _engines/votes.py (count_batch). A round of a
# batched script (Command.unit > 1) has one command per `unit` names; a name sent on its own (to
# a master that refused a batch: Master.unbatched) is command -1 - name, its own script as EVAL.
# Included by engine.pyx; its C functions are declared in engine.pxd.

# -- the commands -----------------------------------------------------------------------------

cdef int _unit_argv(NativeEngine self, Command *cmd, int u, bint as_eval) noexcept nogil:
    """Lays out a batched script's command u (see _scripts.BATCHED) in the engine's argv arrays:
    the head, numkeys, the keys of its names, their count of keys each, their other arguments;
    returns its argument count."""
    cdef int argc = 0
    cdef int j, k
    cdef int first = u * cmd.unit
    cdef int last = first + cmd.unit
    cdef const char **argv = self.argv_ptr
    cdef size_t *argvlen = self.argv_len
    cdef const char **head = &cmd.unit_head[0]
    cdef size_t *head_len = &cmd.unit_head_len[0]
    if as_eval:
        head = &cmd.unit_eval_head[0]
        head_len = &cmd.unit_eval_head_len[0]
    if last > cmd.n_items:
        last = cmd.n_items
    for j in range(cmd.n_unit_head):
        argv[argc] = head[j]
        argvlen[argc] = head_len[j]
        argc += 1
    argv[argc] = self.unit_numkeys
    argvlen[argc] = <size_t>snprintf(self.unit_numkeys, sizeof(self.unit_numkeys), b"%d",
                                     (last - first) * cmd.item_keys)
    argc += 1
    for k in range(first, last):
        for j in range(cmd.item_keys):
            argv[argc] = cmd.args[k * cmd.n_args + j]
            argvlen[argc] = cmd.args_len[k * cmd.n_args + j]
            argc += 1
    argv[argc] = cmd.per_key
    argvlen[argc] = cmd.per_key_len
    argc += 1
    for k in range(first, last):
        for j in range(cmd.item_keys, cmd.n_args):
            argv[argc] = cmd.args[k * cmd.n_args + j]
            argvlen[argc] = cmd.args_len[k * cmd.n_args + j]
            argc += 1
    return argc


cdef inline int _command_argv(NativeEngine self, Command *cmd, int c, bint as_eval) noexcept nogil:
    """Lays out command c (an item's, or a batched script's; in a batched round, -1 - k: item
    k's own) in the engine's argv arrays."""
    if cmd.unit == 1:
        return _argv(self, cmd, c, as_eval)
    if c < 0:
        return _argv(self, cmd, -1 - c, as_eval)
    return _unit_argv(self, cmd, c, as_eval)


# -- the replies ------------------------------------------------------------------------------

cdef void _take_batched(NativeEngine self, Command *cmd, int k, int i, redisReply *reply,
                        int64_t now) noexcept nogil:
    """The reply to a batched round's command k (its NOSCRIPT is _drain's, as any script's):
    CROSSSLOT, or each of its names' votes."""
    cdef Master *m = &self.masters[i]
    cdef const char *refused = NULL
    cdef int j
    if reply.type != REDIS_REPLY_ERROR or strncmp(reply.str, b"CROSSSLOT", 9) != 0:
        _count_batch(self, cmd, k, i, reply)
        return
    # A cluster-mode server: none of the command's names ran. Each goes on its own, now and in
    # the later rounds.
    m.unbatched = True
    for j in range(k * cmd.unit, min((k + 1) * cmd.unit, cmd.n_items)):
        refused = _append_eval(self, i, cmd, -1 - j)
        if refused != NULL:
            _fail_master(self, i, CONN_ERROR, refused, now)
            return
    m.want_write = True
    _write(self, i, now)


cdef void _count_batch(NativeEngine self, Command *cmd, int u, int i,
                       redisReply *reply) noexcept nogil:
    """A batched script's reply (see _scripts.BATCHED) to command u: an array of the replies of
    its names, each counted as its own; an error reply is each name's vote."""
    cdef int first = u * cmd.unit
    cdef int count = cmd.n_items - first
    cdef int j
    if count > cmd.unit:
        count = cmd.unit
    if reply.type == REDIS_REPLY_ARRAY and reply.elements == <size_t>count:
        for j in range(count):
            _count(self, cmd, first + j, i, reply.element[j])
        return
    for j in range(count):
        if reply.type == REDIS_REPLY_ERROR:
            _count(self, cmd, first + j, i, reply)
        else:
            _vote(self, first + j, i, ERROR, b"unexpected reply to the batched script")
