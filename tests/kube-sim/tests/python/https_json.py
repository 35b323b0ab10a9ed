"""What the webhooks here share, on the Python standard library only: a
JSON answer, and a threading HTTPS server on a free local port with the
certificate and key given as the first two arguments, printing the port
and serving until killed."""
import http.server
import json
import ssl
import sys


def reply(handler, document):
    """Answers `handler`'s request with `document` as JSON (200)."""
    body = json.dumps(document).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve(handler_class):
    """Serves `handler_class` over TLS (sys.argv[1] certificate, sys.argv[2]
    key) on 127.0.0.1 and a free port, which it prints first."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()
