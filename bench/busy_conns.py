#!/usr/bin/env python3
"""Many busy TCP connections, each a 64 B ping-pong once per second, for bench/proxy.sh.

    python3 bench/busy_conns.py echo PORT            # an epoll echo server on 127.0.0.1:PORT; runs until killed
    python3 bench/busy_conns.py client HOST PORT N SECONDS
        # opens N connections (from source addresses rotating over 127.2.0.0/16), then for SECONDS sends 64 B on
        # each once per second (spread evenly over the second) and times the echo; prints one JSON line:
        # {"conns": open connections, "sent": n, "answered": n, "errors": n, "p50_us": .., "p99_us": ..}
"""
import json, select, socket, sys, time

MSG = b"x" * 64


def echo(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(4096)
    ls.setblocking(False)
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    conns = {}
    while True:
        for fd, ev in ep.poll():
            if fd == ls.fileno():
                while True:
                    try:
                        c, _ = ls.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conns[c.fileno()] = c
                    ep.register(c.fileno(), select.EPOLLIN)
                continue
            c = conns[fd]
            try:
                data = c.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                ep.unregister(fd)
                del conns[fd]
                c.close()
                continue
            try:
                c.send(data)
            except OSError:
                pass


def client(host, port, n, secs):
    socks = []
    for i in range(n):
        k = i // 40
        s = socket.socket()
        s.bind(("127.2.%d.%d" % (k // 250, k % 250 + 1), 0))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect((host, port))
        s.setblocking(False)
        socks.append(s)
    ep = select.epoll()
    by_fd = {}
    for i, s in enumerate(socks):
        ep.register(s.fileno(), select.EPOLLIN)
        by_fd[s.fileno()] = i
    sent_at = [None] * n
    got = [0] * n
    rtts = []
    sent = answered = errors = 0
    time.sleep(1)
    t0 = time.monotonic()
    end = t0 + secs
    nxt = 0  # next connection to send on; connection i sends at t0 + (i + k n) / n
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = min(int((now - t0) * n) + 1, int(secs * n))
        while nxt < due:
            i = nxt % n
            nxt += 1
            if sent_at[i] is not None:
                continue  # the previous one is still out: skip this second
            try:
                socks[i].send(MSG)
                sent_at[i] = time.monotonic()
                got[i] = 0
                sent += 1
            except OSError:
                errors += 1
        for fd, ev in ep.poll(0.002):
            i = by_fd[fd]
            try:
                data = socks[i].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                errors += 1
                ep.unregister(fd)
                continue
            got[i] += len(data)
            if got[i] >= len(MSG) and sent_at[i] is not None:
                rtts.append(time.monotonic() - sent_at[i])
                sent_at[i] = None
                answered += 1
    rtts.sort()
    q = lambda p: round(rtts[min(len(rtts) - 1, int(p * len(rtts)))] * 1e6, 1) if rtts else None
    print(json.dumps({"conns": n, "sent": sent, "answered": answered, "errors": errors,
                      "p50_us": q(0.5), "p99_us": q(0.99)}), flush=True)


if sys.argv[1] == "echo":
    echo(int(sys.argv[2]))
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
