#!/usr/bin/python3
"""free_port.py [K] — prints a TCP port P of 127.0.0.1 such that P .. P+K-1
(K = 1 by default) are free now, drawn below the kernel's ephemeral range
(ip_local_port_range, where connect() takes its source ports).

Why not bind(0): that returns an ephemeral port, and between this pick and
the test's server listening on it, any outgoing connection on the machine
(a concurrent test's UCX endpoints open many) or another test's bind(0) can
take it; the job then fails for a reason that is not the test's. Below the
ephemeral range only another explicit pick can collide, and it is drawn at
random from ~20,000 ports."""
import random
import socket
import sys

k = int(sys.argv[1]) if len(sys.argv) > 1 else 1
lo = 32768
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    pass


def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


if lo - k > 11000:
    for _ in range(1000):
        p = random.randrange(10000, lo - k)
        if all(free(p + i) for i in range(k)):
            print(p)
            sys.exit(0)
# A kernel whose ephemeral range starts low: the kernel's own pick.
while True:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    if all(free(p + i) for i in range(k)):
        print(p)
        sys.exit(0)
