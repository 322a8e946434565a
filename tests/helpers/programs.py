"""Small programs a test runs in a pod, on a real cluster and in the emulator alike: a web server
that answers with its ``$WHO`` (on every address, and privately on 127.0.0.1:8001), and a fetch."""

NETWORK_SERVER = """
import http.server, os, threading
def serve(addr, body):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(body.encode())
        def log_message(self, *a): pass
    http.server.HTTPServer(addr, H).serve_forever()
threading.Thread(target=serve, args=(('127.0.0.1', 8001), 'private-' + os.environ['WHO']), daemon=True).start()
serve(('', 8000), os.environ['WHO'])
"""
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
