# new_token as a C function, when Cython compiles tokens.py (see hiredlock/_compiled.py):
# lock_steps.pxd cimports it, so that taking a token on every acquire's path is a C call.

cpdef bytes new_token()
