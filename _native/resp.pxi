# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# RESP in C: the commands for the masters, and the guard on their replies.
#
# The mirror of hiredlock/_engines/resp.py (the python engine's): pack_command's layout in C, the
# batch of one round's commands, and the guard on what a master sends back before libhiredis builds
# a reply of it (Reader's max_bytes and the reply types it refuses). Included by engine.pyx; its C
# functions are declared in engine.pxd.

cdef inline size_t format_int(char *buffer, long long value) noexcept nogil:
    return <size_t>snprintf(buffer, 24, b"%lld", value)


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
    # (most numbers of a lock's commands are lengths of one or two digits: no loop for those)
    if value < 10:
        out[0] = <char>(48 + value)
        return out + 1
    if value < 100:
        out[0] = <char>(48 + value // 10)
        out[1] = <char>(48 + value % 10)
        return out + 2
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


# -- one round's commands, formatted once for every master ---------------------------------

SET_HEAD = (b"SET",)
NUMKEYS = tuple(str(count).encode() for count in range(10))


cdef int _argv(NativeEngine self, Command *cmd, int k, bint as_eval) noexcept nogil:
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


cdef int _format_batch(NativeEngine self, Command *cmd) except -1:
    """Formats every command (EVALSHA for scripts) into the engine's batch buffer."""
    cdef size_t need = 0
    cdef char *out
    cdef char *grown
    cdef int k
    cdef int argc = 0
    for k in range(cmd.n_units):
        argc = _command_argv(self, cmd, k, False)
        need += command_size(argc, self.argv_len)
    if need > self.batch_cap:
        grown = <char *>realloc(self.batch, need)
        if grown == NULL:
            raise MemoryError()
        self.batch = grown
        self.batch_cap = need
    out = self.batch
    for k in range(cmd.n_units):
        if cmd.n_units > 1:  # (one command: the count above left its arguments laid out)
            argc = _command_argv(self, cmd, k, False)
        out = put_command(out, argc, self.argv_ptr, self.argv_len)
        cmd.item_end[k] = <size_t>(out - self.batch)
    cmd.batch = self.batch
    return 0


# -- the guard on replies: what a lock command may get, before libhiredis allocates for it ------

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
    if count == 0 or count <= <unsigned long long>BATCH_ITEMS:  # (a batched script's reply)
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
