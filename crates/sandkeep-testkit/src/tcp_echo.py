"""A TCP echo server on 127.0.0.1:PORT (argv[1]; argv[2] names another
address, such as ::1), one thread per connection; it echoes until the
client's end of file, then closes."""

import socket, sys, threading
host = sys.argv[2] if len(sys.argv) > 2 else '127.0.0.1'
s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, int(sys.argv[1])))
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
