"""A websocket echo server on 127.0.0.1:PORT (argv[1]): RFC 6455's handshake,
then every data frame back, unmasked, until a close frame. Small on purpose
(frames up to 64 KiB)."""

import base64, hashlib, socket, sys, threading
GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(64)
def serve(c):
    f = c.makefile('rb')
    key = ''
    while True:
        line = f.readline().decode()
        if line in ('\r\n', ''):
            break
        k, _, v = line.partition(':')
        if k.strip().lower() == 'sec-websocket-key':
            key = v.strip()
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    c.sendall(('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n'
               'Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n' % accept).encode())
    while True:
        h = f.read(2)
        if len(h) < 2:
            break
        op, n = h[0] & 15, h[1] & 127
        if n == 126:
            n = int.from_bytes(f.read(2), 'big')
        mask = f.read(4) if h[1] & 128 else b''
        data = f.read(n)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        if op == 8:
            break
        size = bytes([len(data)]) if len(data) < 126 else bytes([126]) + len(data).to_bytes(2, 'big')
        c.sendall(bytes([0x80 | op]) + size + data)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
