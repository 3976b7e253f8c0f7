#!/usr/bin/python3
"""bench/soak/faulty.py — clients that misbehave, for bench/soak.sh.

One process runs one KIND of misbehaviour in rounds until the STOP file
exists, and prints one JSON line per case it tried: {"kind", "case",
"outcome", "secs"}. The outcome is what the server did about it (a status
line, a close code, "closed", "reset", or "still open" when it did nothing
within the round's bound); soak.sh counts them. Python's standard library
only (Debian's /usr/bin/python3), so nothing here shares code with harkd or
with the hark CLI.

Kinds:
  vanish     a Vosk WebSocket stream that sends real-time speech, then drops
             the connection mid-utterance (half of the time with a RST)
  noread     clients that never read a reply: a real-time WebSocket stream,
             and HTTP infers answered with 3 MiB each (one per connection;
             pipelined on one with --pipeline); the receive buffer is tiny,
             so the server's writes stall (--send-timeout-secs)
  slowloris  connections that dribble a byte a second: an HTTP request head,
             an HTTP body (its head whole), and the gRPC port's HTTP/2 preface
  oversize   messages over the limits: an HTTP body declared too large, one
             sent too large (chunked), a WebSocket message one byte over
             --ws-max-message-bytes, a gRPC message declared over
             --grpc-max-message-bytes
"""
import argparse
import base64
import errno
import json
import os
import random
import select
import socket
import struct
import sys
import time
import wave

A = None  # the parsed arguments
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # tcp_info.tcpi_state (linux/tcp_states.h)


def stopped():
    return os.path.exists(A.stop)


def report(kind, case, outcome, t0):
    print(json.dumps({"kind": kind, "case": case, "outcome": outcome,
                      "secs": round(time.monotonic() - t0, 2)}), flush=True)


def connect(port, rcvbuf=None, timeout=10):
    s = socket.socket()
    if rcvbuf:  # before connect, so the window is small from the start
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect((A.host, port))
    return s


def read_head(s, limit=65536):
    """The server's reply head (status line and headers), or what came
    before the connection closed."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def status_of(data):
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    return line[9:12] if line.startswith("HTTP/1.") else ("closed" if not data else "garbage")


def rst_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


# ---- WebSocket (RFC 6455), the client side -------------------------------

def ws_open(path="/v2/models/asr/stream", rcvbuf=None):
    s = connect(A.port, rcvbuf)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {A.host}:{A.port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = read_head(s)
    if status_of(head) != "101":
        s.close()
        return None, status_of(head)
    return s, "101"


def ws_frame(opcode, payload):
    """A masked frame; the mask key is random, the masking done a word at
    a time (a 1 MiB frame in a few milliseconds)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    key = os.urandom(4)
    reps = key * (n // 4 + 1)
    masked = (int.from_bytes(payload, "little") ^ int.from_bytes(reps[:n], "little")).to_bytes(n, "little")
    return head + key + masked


def ws_read_close(s, deadline):
    """Reads frames until the server's close frame: its code (or the way the
    connection ended)."""
    buf = b""
    while time.monotonic() < deadline and not stopped():
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            return "reset"
        if not chunk:
            return "closed"
        buf += chunk
        while len(buf) >= 2:
            n, off = buf[1] & 0x7F, 2
            if n == 126:
                n, off = struct.unpack(">H", buf[2:4])[0], 4
            elif n == 127:
                n, off = struct.unpack(">Q", buf[2:10])[0], 10
            if len(buf) < off + n:
                break
            opcode, payload, buf = buf[0] & 0x0F, buf[off:off + n], buf[off + n:]
            if opcode == 8:
                return "close %d" % struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else "close"
    return "still open"


def speech():
    """(name, PCM bytes) of a random LibriVox file."""
    path = random.choice(A.files)
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return os.path.basename(path), w.readframes(w.getnframes()), w.getframerate()


def vanish():
    t0 = time.monotonic()
    name, pcm, rate = speech()
    chunk = rate * 2 // 10  # 100 ms
    # Somewhere inside the speech: past its first word, before its end.
    stop_at = random.uniform(1.0, max(1.5, len(pcm) / (2 * rate) - 0.5))
    s, st = ws_open()
    if not s:
        return report("vanish", "ws", "refused " + st, t0)
    s.sendall(ws_frame(1, json.dumps({"config": {"sample_rate": rate}}).encode()))
    sent, start = 0, time.monotonic()
    while sent < len(pcm) and time.monotonic() - start < stop_at:
        s.sendall(ws_frame(2, pcm[sent:sent + chunk]))
        sent += chunk
        time.sleep(max(0, start + sent / (2 * rate) - time.monotonic()))
    how = random.choice(("fin", "rst"))
    rst_close(s) if how == "rst" else s.close()
    report("vanish", "ws-" + how, "vanished after %.1f s of %s" % (sent / (2 * rate), name), t0)


def send_until_cut(s, data_source, bound):
    """Sends what data_source yields (never reading) until the server cuts
    the connection or `bound` seconds pass: the outcome."""
    t0 = time.monotonic()
    s.settimeout(0.5)
    pending = b""
    while time.monotonic() - t0 < bound and not stopped():
        if not pending:
            pending = next(data_source)
            if pending is None:  # the source is done: so is the case
                return "open to the end"
        try:
            n = s.send(pending)
            pending = pending[n:]
        except socket.timeout:
            continue  # the server reads nothing more either: wait for its cut
        except (BrokenPipeError, ConnectionResetError) as e:
            return "reset" if isinstance(e, ConnectionResetError) else "closed"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e))
    return "stopped" if stopped() else "still open"


def noread():
    t0 = time.monotonic()
    # WebSocket: a real-time stream whose replies are never read, 5 s of
    # it, then its eof, then gone. (Its replies are a few dozen bytes a chunk: the
    # kernel's buffers hold minutes of them, so this one is about a stream
    # the server cannot talk to, not about the send timeout.)
    s, st = ws_open(rcvbuf=4096)
    if not s:
        report("noread", "ws", "refused " + st, t0)
    else:
        name, pcm, rate = speech()
        chunk = rate * 2 // 10
        start = time.monotonic()

        def frames():
            yield ws_frame(1, json.dumps({"config": {"sample_rate": rate}}).encode())
            sent = 0
            while time.monotonic() - start < 5:
                time.sleep(max(0, start + sent * 0.1 - time.monotonic()))
                off = (sent * chunk) % len(pcm)
                yield ws_frame(2, pcm[off:off + chunk])
                sent += 1
            yield ws_frame(1, b'{"eof": 1}')
            time.sleep(2)
            yield None
        outcome = send_until_cut(s, frames(), A.bound)
        report("noread", "ws", outcome, t0)
        rst_close(s)
    if stopped():
        return
    # HTTP: infers on identity answered with 3/4 of --http-max-input-size
    # each, more than the socket buffers hold, never read.
    body = json.dumps({"inputs": [{"name": "INPUT_BYTES", "shape": [1, 1], "datatype": "BYTES",
                                   "data": ["x" * (A.http_max * 3 // 4)]}]}).encode()
    req = (f"POST /v2/models/identity/infer HTTP/1.1\r\nHost: {A.host}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    if A.pipeline:
        # Pipelined on one connection (--pipeline): off by default, as
        # harkd mishandles pipelined POSTs (bench/RESULTS.md, 2026-11-24).
        t0 = time.monotonic()
        s = connect(A.port, rcvbuf=4096)

        def requests():
            while True:
                yield req
        report("noread", "http-pipelined", send_until_cut(s, requests(), A.bound), t0)
        rst_close(s)
        return
    # One request on each of a few connections, so the server has a reply
    # it cannot write on each.
    t0 = time.monotonic()
    socks = [connect(A.port, rcvbuf=4096) for _ in range(A.connections)]
    for s in socks:
        s.sendall(req)
    for s in socks:  # the server cuts each; its FIN waits behind the
        # unread reply, so the socket's TCP state tells (not a read); a
        # FIN queued behind a reply the server could not send never comes:
        # hark_limit_hits_total{limit="send_timeout"} counts those cuts
        outcome = "stopped" if stopped() else "no FIN or RST seen"
        while not stopped() and time.monotonic() - t0 < A.bound:
            state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            if state in (TCP_CLOSE_WAIT, TCP_CLOSE):
                outcome = "closed" if state == TCP_CLOSE_WAIT else "reset"
                break
            time.sleep(0.25)
        report("noread", "http", outcome, t0)
        rst_close(s)


def dribble(port, head, per_conn, step=1.0):
    """per_conn connections send `head` a byte every `step` s; each ends when
    the server answers or closes. Returns [outcome] per connection."""
    socks = [connect(port) for _ in range(per_conn)]
    sent = [0] * per_conn
    out = [None] * per_conn
    t0 = time.monotonic()
    next_at = t0
    while any(o is None for o in out) and time.monotonic() - t0 < A.bound and not stopped():
        now = time.monotonic()
        if now >= next_at:
            next_at += step
            for i, s in enumerate(socks):
                if out[i] is None and sent[i] < len(head):
                    try:
                        s.send(head[sent[i]:sent[i] + 1])
                        sent[i] += 1
                    except OSError:
                        out[i] = "closed mid-send"
        live = [s for i, s in enumerate(socks) if out[i] is None]
        ready, _, _ = select.select(live, [], [], max(0, min(0.2, next_at - time.monotonic())))
        for s in ready:
            i = socks.index(s)
            try:
                data = s.recv(4096)
            except OSError:
                data = None
            if data is None:
                out[i] = "reset"
            elif not data:
                out[i] = "closed"
            elif port == A.grpc_port:
                pass  # nghttp2 speaks first (SETTINGS, maybe GOAWAY): wait for the close
            else:
                out[i] = "HTTP " + status_of(data)
    for i, s in enumerate(socks):
        if out[i] is None:
            out[i] = "stopped" if stopped() else "still open"
        s.close()
    return out, time.monotonic() - t0


def slowloris():
    n = A.connections
    head = (f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: {A.host}\r\n"
            "Content-Type: application/json\r\nX-Padding: " + "a" * 200 + "\r\n\r\n").encode()
    cases = [
        ("http-head", A.port, head),
        ("http-body", A.port, None),
        ("grpc-preface", A.grpc_port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 200),
    ]
    for case, port, data in cases:
        if stopped():
            return
        t0 = time.monotonic()
        if case == "http-body":  # the head whole at once, then the body a byte a second
            socks_out = []
            for _ in range(n):
                s = connect(port)
                s.sendall(f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: {A.host}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n".encode())
                socks_out.append(s)
            outs, _ = dribble_body(socks_out, b"{" + b" " * 4094 + b"}")
        else:
            outs, _ = dribble(port, data, n)
        for o in outs:
            report("slowloris", case, o, t0)


def dribble_body(socks, body):
    out = [None] * len(socks)
    t0 = time.monotonic()
    sent = 0
    while any(o is None for o in out) and time.monotonic() - t0 < A.bound and not stopped():
        for i, s in enumerate(socks):
            if out[i] is None:
                try:
                    s.send(body[sent:sent + 1])
                except OSError:
                    out[i] = "closed mid-send"
        sent += 1
        live = [s for i, s in enumerate(socks) if out[i] is None]
        ready, _, _ = select.select(live, [], [], 1.0)
        for s in ready:
            i = socks.index(s)
            try:
                data = s.recv(4096)
                out[i] = ("HTTP " + status_of(data)) if data else "closed"
            except OSError:
                out[i] = "reset"
    for i, s in enumerate(socks):
        out[i] = out[i] or ("stopped" if stopped() else "still open")
        s.close()
    return out, time.monotonic() - t0


def h2_frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A literal header field without indexing, new name (RFC 7541 6.2.2);
    both strings short, plain (no Huffman)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def oversize():
    # HTTP: a body declared over --http-max-input-size, none of it sent.
    t0 = time.monotonic()
    s = connect(A.port)
    s.sendall((f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: {A.host}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {A.http_max + 1}\r\n\r\n").encode())
    report("oversize", "http-declared", "HTTP " + status_of(read_head(s)), t0)
    s.close()
    # HTTP: a chunked body that goes over it as it is sent.
    t0 = time.monotonic()
    s = connect(A.port)
    s.sendall((f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: {A.host}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    block = b" " * 65536
    chunk = b"%x\r\n" % len(block) + block + b"\r\n"
    outcome = None
    try:
        for _ in range(A.http_max // len(block) + 2):
            s.sendall(chunk)
    except OSError:
        pass  # it stopped reading, having answered: read what it said
    try:
        outcome = "HTTP " + status_of(read_head(s))
    except OSError as e:
        outcome = "reset" if isinstance(e, ConnectionResetError) else str(e)
    report("oversize", "http-chunked", outcome, t0)
    s.close()
    # WebSocket: one binary message a byte over --ws-max-message-bytes.
    t0 = time.monotonic()
    s, st = ws_open()
    if not s:
        report("oversize", "ws", "refused " + st, t0)
    else:
        s.sendall(ws_frame(1, b'{"config": {"sample_rate": 16000}}'))
        try:
            s.sendall(ws_frame(2, b"\x00" * (A.ws_max + 1)))
            outcome = ws_read_close(s, time.monotonic() + A.bound)
        except OSError as e:
            outcome = "reset" if isinstance(e, ConnectionResetError) else "closed mid-send"
        report("oversize", "ws", outcome, t0)
        s.close()
    # gRPC: a ModelInfer message whose length prefix is over
    # --grpc-max-message-bytes, with the first 16 KiB of it.
    t0 = time.monotonic()
    s = connect(A.grpc_port)
    headers = (b"\x83\x86"  # :method POST, :scheme http (static table)
               + b"\x04" + bytes([len(b"/inference.GRPCInferenceService/ModelInfer")])
               + b"/inference.GRPCInferenceService/ModelInfer"  # :path, indexed name
               + b"\x01" + bytes([len(A.host)]) + A.host.encode()  # :authority
               + hpack_literal(b"content-type", b"application/grpc") + hpack_literal(b"te", b"trailers"))
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
              + h2_frame(1, 0x4, 1, headers)
              + h2_frame(0, 0, 1, b"\x00" + struct.pack(">I", A.grpc_max + 1) + b"\x00" * 16384))
    outcome, buf, deadline = "still open", b"", time.monotonic() + A.bound
    while time.monotonic() < deadline and outcome == "still open":
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            outcome = "reset"
            break
        if not data:
            outcome = "closed"
            break
        buf += data
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            ftype, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + n], buf[9 + n:]
            if ftype == 4 and not flags & 1:
                s.sendall(h2_frame(4, 1, 0, b""))  # SETTINGS ACK
            elif ftype == 1 and stream == 1 and flags & 1:
                outcome = "trailers"  # grpc-status came (HPACK-coded: not decoded here)
            elif ftype == 3 and stream == 1:
                outcome = "rst_stream %d" % int.from_bytes(payload[:4], "big")
            elif ftype == 7:
                outcome = "goaway %d" % int.from_bytes(payload[4:8], "big")
    report("oversize", "grpc", outcome, t0)
    s.close()


def main():
    global A
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=("vanish", "noread", "slowloris", "oversize"))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True, help="harkd's HTTP port")
    p.add_argument("--grpc-port", type=int, required=True)
    p.add_argument("--stop", required=True, help="stop once this file exists")
    p.add_argument("--audio-dir", default="/usr/share/pocketsphinx/test/data/librivox")
    p.add_argument("--http-max", type=int, default=67108864, help="harkd's --http-max-input-size")
    p.add_argument("--ws-max", type=int, default=1048576, help="harkd's --ws-max-message-bytes")
    p.add_argument("--grpc-max", type=int, default=67108864, help="harkd's --grpc-max-message-bytes")
    p.add_argument("--bound", type=float, default=40, help="seconds a case waits for the server")
    p.add_argument("--connections", type=int, default=4, help="slowloris connections per case")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    p.add_argument("--pipeline", action="store_true", help="noread: pipeline HTTP requests on one connection")
    A = p.parse_args()
    A.files = sorted(os.path.join(A.audio_dir, f) for f in os.listdir(A.audio_dir) if f.endswith(".wav"))
    run = globals()[A.kind]
    while not stopped():
        try:
            run()
        except OSError as e:  # the server refused the connection, or cut it first: say so, go on
            report(A.kind, "error", "%s: %s" % (type(e).__name__, e), time.monotonic())  # secs: 0
        time.sleep(A.pause)


if __name__ == "__main__":
    sys.exit(main())
