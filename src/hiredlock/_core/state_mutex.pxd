# StateMutex as an extension type, when Cython compiles state_mutex.py (see hiredlock/_compiled.py):
# its `lock` is a C mutex (cython.pymutex), so that `with state._mutex.lock:` in lock_state.py and
# lock_steps.py (whose .pxd types _mutex as a StateMutex) takes and gives it in C.

cimport cython


cdef class StateMutex:
    cdef cython.pymutex lock
