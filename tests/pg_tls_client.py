#!/usr/bin/env python3
"""A PostgreSQL client over TLS for tests/capture_tls.rs: binds its source port first and prints it, waits for a
line on stdin (the capture is running), then connects to 127.0.0.1:PGPORT, sends SSLRequest, does the TLS
handshake (optionally writing a key log and limiting the TLS version), starts up as user postgres on database
test, runs N simple queries "SELECT <i>", terminates and prints the queries it sent, one a line.

usage: pg_tls_client.py PGPORT N [--keylog FILE] [--tls12 CIPHERS]
"""
import socket
import ssl
import struct
import sys


def msg(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body


def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise SystemExit("server closed the connection")
        b += c
    return b


def until_ready(s):
    while True:
        kind = read_exact(s, 1)
        (length,) = struct.unpack("!I", read_exact(s, 4))
        body = read_exact(s, length - 4)
        if kind == b"E":
            raise SystemExit("server error: %r" % body)
        if kind == b"Z":
            return


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    args = sys.argv[3:]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if "--keylog" in args:
        ctx.keylog_filename = args[args.index("--keylog") + 1]
    if "--tls12" in args:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(args[args.index("--tls12") + 1])
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.bind(("127.0.0.1", 0))
    print(raw.getsockname()[1], flush=True)
    sys.stdin.readline()
    raw.connect(("127.0.0.1", port))
    raw.sendall(struct.pack("!II", 8, 80877103))
    if read_exact(raw, 1) != b"S":
        raise SystemExit("the server refused TLS")
    s = ctx.wrap_socket(raw)
    version, cipher = s.version(), s.cipher()[0]
    params = b"user\0postgres\0database\0test\0\0"
    s.sendall(struct.pack("!II", len(params) + 8, 196608) + params)
    until_ready(s)
    sent = []
    for i in range(n):
        q = "SELECT %d" % (i + 1)
        s.sendall(msg(b"Q", q.encode() + b"\0"))
        until_ready(s)
        sent.append(q)
    s.sendall(msg(b"X", b""))
    try:
        s.unwrap()
    except (ssl.SSLError, OSError):
        pass
    s.close()
    print(version, cipher, flush=True)
    for q in sent:
        print(q)


if __name__ == "__main__":
    main()
