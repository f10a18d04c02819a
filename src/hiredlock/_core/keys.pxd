# NameKeys as an extension type, when Cython compiles keys.py (see hiredlock/_compiled.py): a lock
# object's set-up reads its name's key and release channel (lock_state.pxd), once per lock object,
# in C. The fields are NameKeys.__slots__ (tests/test_compiled.py checks that both say the same).

cdef class NameKeys:
    cdef public bytes _head
    cdef public bytes _tail
    cdef public bytes channel
    cdef public bytes key
    cdef public tuple keys
