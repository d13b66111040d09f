#!/usr/bin/env python3
"""Opens N TCP connections to HOST:PORT and holds them idle (sends nothing), from source addresses rotating over
127.1.0.0/16, SPREAD connections per address. Prints 'open N closed M' every second; runs until killed.

    python3 bench/idle_conns.py HOST PORT N [SPREAD=40]
"""
import socket, sys, time

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spread = int(sys.argv[4]) if len(sys.argv) > 4 else 40
socks = []
for i in range(n):
    k = i // spread
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.1.%d.%d" % (k // 250, k % 250 + 1), 0))
    s.setblocking(False)
    s.connect_ex((host, port))
    socks.append(s)
    if i % 500 == 499:
        time.sleep(0.05)  # let the proxy accept
while True:
    time.sleep(1)
    closed = 0
    for s in socks:
        try:
            if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print("open %d closed %d" % (len(socks) - closed, closed), flush=True)
