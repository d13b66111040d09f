#!/usr/bin/env python3
"""Holds N slowloris connections against a sockperf-format server: each announces a 256 KiB message, then sends
one more byte every INTERVAL seconds and never completes it. Connections the server drops are opened again.
Source addresses rotate over 127.1.0.0/16 (SPREAD connections per address) unless SPREAD is 0 (all from one address,
127.0.0.2). Prints 'open N' lines every second to stdout; runs until killed.

    python3 bench/slowloris.py HOST PORT N [INTERVAL=5] [SPREAD=40]
"""
import errno, os, selectors, socket, struct, sys, time

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
interval = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
spread = int(sys.argv[5]) if len(sys.argv) > 5 else 40
header = struct.pack(">QHI", 1, 3, 256 * 1024)
sel = selectors.DefaultSelector()
conns = {}  # fd -> [socket, next_send, index]
opened = dropped = 0


def source(i):
    if spread == 0:
        return ("127.0.0.2", 0)
    k = i // spread
    return ("127.1.%d.%d" % (k // 250, k % 250 + 1), 0)


def open_one(i):
    global opened
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.bind(source(i))
        s.connect_ex((host, port))
    except OSError:
        s.close()
        return
    conns[s.fileno()] = [s, time.monotonic(), i, False]
    sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ)
    opened += 1


for i in range(n):
    open_one(i)
last = 0
while True:
    now = time.monotonic()
    for key, ev in sel.select(timeout=0.2):
        c = conns.get(key.fd)
        if c is None:
            continue
        s = c[0]
        if ev & selectors.EVENT_READ:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # dropped by the server: open another
                sel.unregister(s); del conns[key.fd]; s.close(); dropped += 1
                open_one(c[2])
                continue
        if ev & selectors.EVENT_WRITE and not c[3]:
            try:
                s.send(header)
                c[3] = True
                sel.modify(s, selectors.EVENT_READ)
            except OSError:
                sel.unregister(s); del conns[key.fd]; s.close(); dropped += 1
                open_one(c[2])
    for fd, c in list(conns.items()):
        if c[3] and now >= c[1] + interval:
            c[1] = now
            try:
                c[0].send(b"x")
            except OSError:
                pass
    if now - last >= 1:
        last = now
        print("open %d opened %d dropped %d" % (len(conns), opened, dropped), flush=True)
