"""Counts the user-space instructions of `cycles` acquire+release cycles of one library, under
`valgrind --tool=callgrind --instr-atstart=no` (run by bench/test_instructions.py).

    count_instructions.py LIB PORT[,PORT...] CYCLES [TLS_CA]

With TLS_CA, the ports are TLS ports whose certificates that CA file signed (hiredlock and
redis-py only).

The warm-up (imports, connections, script caches) runs uninstrumented; cref_instrument() (in
bench/build/libcref.so) switches counting on for the measured cycles only and dumps them.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from libs import CRefLib, open_cycle


def main() -> None:
    lib, ports, cycles = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], int(sys.argv[3])
    tls_ca = sys.argv[4] if len(sys.argv) > 4 else None
    c = CRefLib.load()
    c.cref_instrument.restype = c.cref_instrument.restype  # int
    cycler = open_cycle(lib, ports, f"bench:instructions:{lib}:{len(ports)}", tls_ca)
    try:
        cycler.run(max(50, cycles // 5))
        if not c.cref_instrument(1):
            raise SystemExit("libcref.so was built without valgrind/callgrind.h")
        cycler.run(cycles)
        c.cref_instrument(0)
    finally:
        cycler.close()
    print(f"failures={len(cycler.failures)}")


if __name__ == "__main__":
    main()
