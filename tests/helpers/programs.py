"""Small programs a test runs in a pod, on a real cluster and in the emulator alike: a web server
that answers with its ``$WHO`` (on every address, and privately on 127.0.0.1:8001), and a fetch;
and one a ``gpu`` test runs on a real GPU."""

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

# argv: "compute" (multiplies matrices until stdin closes) or "hold" (memory only), then the bytes
# of GPU memory to hold; prints "ready" once both are under way, or "skip: why" without torch/CUDA
GPU_WORKER = """
import sys, threading
try:
    import torch
    if not torch.cuda.is_available():
        raise ImportError("CUDA not available to torch")
except ImportError as exc:
    print("skip:", exc, flush=True)
    sys.exit(0)
held = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
def work():
    global a
    while True:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
if sys.argv[1] == "compute":
    threading.Thread(target=work, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""
