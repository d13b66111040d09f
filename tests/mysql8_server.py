#!/usr/bin/env python3
"""The server side of MySQL 8's authentication, for tests/db.rs (MySQL 8 is not packaged on Debian).

Plays the documented client/server protocol (handshake v10, HandshakeResponse41, AuthSwitchRequest,
AuthMoreData) with real cryptography:

  caching_sha2_password  checks the SHA-256 scramble against its cache; a user not cached yet gets
                         "perform full authentication" (0x01 0x04), then either the password in clear
                         inside TLS or, without TLS, a public-key request (0x02) answered with the server's
                         RSA key (0x01 + PEM) and the password encrypted with RSA-OAEP (SHA-1) after being
                         XORed with the scramble; success puts the user in the cache, so the next
                         connection gets fast authentication (0x01 0x03).
  sha256_password        the same RSA exchange, the request byte being 0x01 (or the password inside TLS).
  mysql_native_password  SHA-1 scramble, used as the greeting's plugin before an auth switch.

Usage: mysql8_server.py --password PW [--user U] [--mode MODE] [--tls CERT KEY] [--key-bits N]
Modes: caching (default), sha256, switch-caching, switch-sha256, switch-unknown, require-tls,
       junk-key. Prints "PORT <n>" once listening, then one line per login:
       "AUTH user=<u> plugin=<p> path=<fast|full-rsa|full-tls|rsa-pinned|...> result=<ok|denied>".
Answers COM_PING, COM_QUERY (SELECT 1, the recursive-CTE fetch roundtrip sends, SET) and COM_QUIT. Exits
when its standard input closes or after 10 minutes, whichever comes first.
"""

import argparse
import hashlib
import os
import re
import socket
import ssl
import struct
import sys
import threading

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

PROTOCOL_41 = 0x200
SSL = 0x800
TRANSACTIONS = 0x2000
SECURE_CONNECTION = 0x8000
MULTI_RESULTS = 0x20000
PLUGIN_AUTH = 0x80000
PLUGIN_AUTH_LENENC = 0x200000
CONNECT_WITH_DB = 0x8
LONG_PASSWORD = 0x1

OK = bytes([0, 0, 0, 2, 0, 0, 0])
LOCK = threading.Lock()
CACHE = {}  # user -> SHA256(SHA256(password)), filled by successful full authentications


def log(line):
    with LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.seq = 0

    def read_exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.sock.recv(n - len(b))
            if not chunk:
                raise EOFError("client closed")
            b += chunk
        return b

    def read(self):
        h = self.read_exact(4)
        n = h[0] | h[1] << 8 | h[2] << 16
        self.seq = (h[3] + 1) & 0xFF
        return self.read_exact(n)

    def write(self, payload):
        self.sock.sendall(struct.pack("<I", len(payload))[:3] + bytes([self.seq]) + payload)
        self.seq = (self.seq + 1) & 0xFF

    def err(self, code, state, message):
        self.write(b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + message.encode())


def lenenc(n):
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def read_lenenc(b, i):
    f = b[i]
    if f < 251:
        return f, i + 1
    if f == 0xFC:
        return struct.unpack_from("<H", b, i + 1)[0], i + 3
    if f == 0xFD:
        return int.from_bytes(b[i + 1 : i + 4], "little"), i + 4
    return struct.unpack_from("<Q", b, i + 1)[0], i + 9


def sha256(b):
    return hashlib.sha256(b).digest()


def sha1(b):
    return hashlib.sha1(b).digest()


def xor(a, b):
    return bytes(x ^ y for x, y in zip(a, b))


class Server:
    def __init__(self, args):
        self.args = args
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=args.key_bits)
        self.pem = self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.tls = None
        if args.tls:
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(args.tls[0], args.tls[1])

    def decrypt_password(self, ciphertext, scramble):
        """RSA-OAEP (SHA-1) decryption, then XOR with the scramble: the password, or None."""
        try:
            plain = self.key.decrypt(
                ciphertext,
                padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None),
            )
        except ValueError:
            return None
        s = scramble[:20]
        clear = bytes(b ^ s[i % len(s)] for i, b in enumerate(plain))
        if not clear.endswith(b"\0"):
            return None
        return clear[:-1]

    def public_key_packet(self):
        if self.args.mode == "junk-key":
            return b"\x01" + b"this is not a key\0"
        return b"\x01" + self.pem

    def full_password(self, c, request_byte, first, scramble, secure):
        """Reads the password of a full authentication; `first` is a packet already read (or None).
        Returns (password or None, path)."""
        pkt = first if first is not None else c.read()
        if secure:
            return (pkt[:-1] if pkt.endswith(b"\0") else None), "full-tls"
        if pkt == bytes([request_byte]):
            c.write(self.public_key_packet())
            try:
                ciphertext = c.read()
            except EOFError:
                return None, "key-sent-client-closed"
            return self.decrypt_password(ciphertext, scramble), "full-rsa"
        if len(pkt) == self.args.key_bits // 8:
            return self.decrypt_password(pkt, scramble), "rsa-pinned"
        return None, "no-password-sent"

    def caching_sha2(self, c, user, auth, scramble, secure):
        """Returns (ok, path) after the whole exchange that follows the scramble response `auth`."""
        want = self.args.password.encode()
        if not auth:
            return not want, "empty"
        cached = CACHE.get(user)
        if cached is not None:
            # Fast path: XOR(auth, SHA256(stored + scramble)) must hash to the stored value.
            candidate = xor(auth, sha256(cached + scramble[:20]))
            if sha256(candidate) == cached:
                c.write(b"\x01\x03")
                return True, "fast"
            return False, "fast"
        c.write(b"\x01\x04")
        got, path = self.full_password(c, 0x02, None, scramble, secure)
        ok = got == want
        if ok:
            CACHE[user] = sha256(sha256(want))
        return ok, path

    def sha256_password(self, c, auth, scramble, secure):
        want = self.args.password.encode()
        if auth in (b"", b"\0"):
            return not want, "empty"
        got, path = self.full_password(c, 0x01, auth, scramble, secure)
        return got == want, path

    def serve(self, sock):
        sock.settimeout(60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Conn(sock)
        scramble = os.urandom(20).translate(bytes(range(1, 256)) + b"\x01")  # no NUL in the scramble
        mode = self.args.mode
        plugin = {
            "sha256": "sha256_password",
            "switch-caching": "mysql_native_password",
            "switch-sha256": "mysql_native_password",
            "switch-unknown": "mysql_native_password",
        }.get(mode, "caching_sha2_password")
        caps = (
            LONG_PASSWORD
            | CONNECT_WITH_DB
            | PROTOCOL_41
            | TRANSACTIONS
            | SECURE_CONNECTION
            | MULTI_RESULTS
            | PLUGIN_AUTH
            | PLUGIN_AUTH_LENENC
        )
        if self.tls:
            caps |= SSL
        g = b"\x0a" + b"8.0.36-scripted\0" + struct.pack("<I", 7) + scramble[:8] + b"\0"
        g += struct.pack("<H", caps & 0xFFFF) + bytes([255]) + struct.pack("<H", 2)
        g += struct.pack("<H", caps >> 16) + bytes([21]) + b"\0" * 10 + scramble[8:] + b"\0"
        g += plugin.encode() + b"\0"
        c.write(g)
        resp = c.read()
        client_caps = struct.unpack_from("<I", resp, 0)[0]
        secure = False
        if client_caps & SSL and len(resp) == 32:
            if not self.tls:
                return
            c.sock = self.tls.wrap_socket(c.sock, server_side=True)
            secure = True
            resp = c.read()
        i = 32
        end = resp.index(b"\0", i)
        user = resp[i:end].decode()
        i = end + 1
        if client_caps & PLUGIN_AUTH_LENENC:
            n, i = read_lenenc(resp, i)
        else:
            n, i = resp[i], i + 1
        auth = resp[i : i + n]
        i += n
        if client_caps & CONNECT_WITH_DB and i < len(resp):
            i = resp.index(b"\0", i) + 1
        client_plugin = resp[i : resp.index(b"\0", i)].decode() if i < len(resp) else ""
        if mode == "require-tls" and not secure:
            c.err(
                3159,
                "HY000",
                "Connections using insecure transport are prohibited while --require_secure_transport=ON.",
            )
            log(f"AUTH user={user} plugin={plugin} path=insecure result=refused")
            return
        if user != self.args.user:
            c.err(1045, "28000", f"Access denied for user '{user}'@'localhost' (using password: YES)")
            log(f"AUTH user={user} plugin={plugin} path=unknown-user result=denied")
            return
        if mode.startswith("switch-"):
            # The greeting offered mysql_native_password; the account uses another plugin.
            if client_plugin != "mysql_native_password":
                raise ValueError(f"client answered the greeting with {client_plugin!r}")
            plugin = {
                "switch-caching": "caching_sha2_password",
                "switch-sha256": "sha256_password",
                "switch-unknown": "authentication_kerberos_client",
            }[mode]
            scramble = os.urandom(20).translate(bytes(range(1, 256)) + b"\x01")
            c.write(b"\xfe" + plugin.encode() + b"\0" + scramble + b"\0")
            if mode == "switch-unknown":
                try:
                    c.read()
                    log(f"AUTH user={user} plugin={plugin} path=switch result=answered")
                except EOFError:
                    log(f"AUTH user={user} plugin={plugin} path=switch result=client-closed")
                return
            auth = c.read()
        elif client_plugin != plugin:
            raise ValueError(f"client answered {plugin} with {client_plugin!r}")
        if plugin == "caching_sha2_password":
            ok, path = self.caching_sha2(c, user, auth, scramble, secure)
        else:
            ok, path = self.sha256_password(c, auth, scramble, secure)
        log(f"AUTH user={user} plugin={plugin} path={path} result={'ok' if ok else 'denied'}")
        if not ok:
            c.err(1045, "28000", f"Access denied for user '{user}'@'localhost' (using password: YES)")
            return
        c.write(OK)
        self.commands(c)

    def commands(self, c):
        coldef = b"\x03def\0\0\0\x011\0\x0c\x3f\0\x01\0\0\0\x08\x81\0\0\0\0"
        eof = b"\xfe\0\0\x02\0"
        while True:
            cmd = c.read()
            if not cmd or cmd[0] == 0x01:
                return
            if cmd[0] == 0x0E:
                c.write(OK)
            elif cmd[0] == 0x03:
                sql = cmd[1:].decode(errors="replace")
                m = re.search(r"n < (\d+)\) SELECT REPEAT\('x', (\d+)\)", sql)
                if sql.upper().startswith("SET "):
                    c.write(OK)
                    continue
                rows, width = (int(m.group(1)), int(m.group(2))) if m else (1, 0)
                c.write(b"\x01")
                c.write(coldef)
                c.write(eof)
                for _ in range(rows):
                    value = b"x" * width if m else b"1"
                    c.write(lenenc(len(value)) + value)
                c.write(eof)
            else:
                c.err(1047, "08S01", "Unknown command")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--password", required=True)
    p.add_argument("--user", default="app")
    p.add_argument(
        "--mode",
        default="caching",
        choices=[
            "caching",
            "sha256",
            "switch-caching",
            "switch-sha256",
            "switch-unknown",
            "require-tls",
            "junk-key",
        ],
    )
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--write-public-key", metavar="FILE", help="also write the server's public key (PEM)")
    args = p.parse_args()
    server = Server(args)
    if args.write_public_key:
        with open(args.write_public_key, "wb") as f:
            f.write(server.pem)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    log(f"PORT {ls.getsockname()[1]}")

    def watch_stdin():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Timer(600, lambda: os._exit(0)).start()

    def handle(sock):
        try:
            server.serve(sock)
        except (EOFError, OSError, ValueError, IndexError, struct.error) as e:
            log(f"CONN error {type(e).__name__}: {e}")
        finally:
            sock.close()

    while True:
        s, _ = ls.accept()
        threading.Thread(target=handle, args=(s,), daemon=True).start()


if __name__ == "__main__":
    main()
