"""A TCP echo server on 127.0.0.1:PORT (argv[1]), one thread per connection;
it echoes until the client's end of file, then closes."""

import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(1024)
def serve(c):
    with c:
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            c.sendall(b)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
