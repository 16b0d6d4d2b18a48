#!/usr/bin/env python3
"""Headless-Chromium check of the live dashboard (issue 10 part 2).

Starts `edgemu run` on a two-host loopback cluster with control addresses and a token,
opens http://CONTROL/ in headless Chromium driven over the DevTools protocol
(a tiny websocket client, standard library only), and checks, as a user would:

  1. live values appear (run time and a link's achieved rate) and change, and
     a link direction carried by the other host shows up (read from its address);
  2. typing the token and pressing "kill" on link wan/ab (a real mouse click
     at the button's position) shows the link down and the link.kill event;
  3. /metrics answers while the page is open, shows the kill, counts the
     command, and `promtool check metrics` accepts it (where installed).

Saves a screenshot (PNG) and exits 0 on success, 1 with the reason otherwise.

usage: scripts/dashboard-check.py EDGEMU_BINARY OUT_DIR [--chromium PATH]
"""

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

TOKEN = "dashboard-check-token"
TOKEN_VAR = "EDGEMU_DASHBOARD_CHECK_TOKEN"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_toml(results, ports):
    # Two hosts: the page is opened on `edge`; `downlink`'s a->b direction is
    # carried by `cloud`, so the page must read it from cloud's address.
    return f"""
[run]
name = "dashcheck"
duration = "90s"
seed = 7
results = "{results}"
token_env = "{TOKEN_VAR}"
sample = "250ms"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{ports[0]}"
control = "127.0.0.1:{ports[1]}"

[[hosts]]
name = "cloud"
listen = "127.0.0.1:{ports[2]}"
control = "127.0.0.1:{ports[3]}"

[[actors]]
name = "camera"
host = "edge"
kind = "constant"
to = "server"
via = "wan"
rate = "6Mbps"
size = "1200B"

[[actors]]
name = "phone"
host = "edge"
kind = "bursty"
to = "server"
via = "radio"
burst = 8
size = "1000B"
interval = "20ms"

[[actors]]
name = "server"
host = "cloud"
kind = "sink"

[[actors]]
name = "cdn"
host = "cloud"
kind = "constant"
to = "viewer"
via = "downlink"
rate = "3Mbps"
size = "1400B"

[[actors]]
name = "viewer"
host = "edge"
kind = "sink"

[[links]]
name = "wan"
a = "camera"
b = "server"
rate = "10Mbps"
delay = "10ms"
loss = {{ model = "ge", eps_g = 0.001, eps_b = 0.5, p_gb = 0.02, p_bg = 0.1 }}

[[links]]
name = "radio"
a = "phone"
b = "server"
rate = "20Mbps"
delay = "4ms"
jitter = "1ms"

[[links]]
name = "downlink"
a = "cdn"
b = "viewer"
rate = "5Mbps"
delay = "15ms"
"""


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol (text frames)."""

    def __init__(self, url, timeout=30):
        assert url.startswith("ws://"), url
        hostport, _, path = url[len("ws://"):].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port or 80)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("devtools websocket closed during the handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise RuntimeError(f"devtools websocket handshake failed: {status!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text):
        data = text.encode()
        header = bytearray([0x81])
        n = len(data)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        header += mask
        self.sock.sendall(bytes(header) + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("devtools websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            if b1 & 0x80:
                mask = self._read(4)
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read(n)))
            else:
                payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise RuntimeError("devtools websocket closed by chromium")
            if opcode in (0x9, 0xA):
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()


class Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {expression}: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def wait(self, what, expression, timeout=30.0):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = self.eval(expression)
            if v:
                return v
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def click(self, selector):
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2, disabled: e.disabled}; })()"
        )
        if not box:
            raise AssertionError(f"no element {selector} to click")
        if box["disabled"]:
            raise AssertionError(f"{selector} is disabled")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"], button="left", clickCount=1)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_http(url, what, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            return http_get(url)
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{what} ({url}) never answered")


def find_chromium(given):
    for c in [given, "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]:
        if c and shutil.which(c):
            return shutil.which(c)
    raise SystemExit("dashboard check: no chromium found (Debian package `chromium`)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("edgemu")
    ap.add_argument("out_dir")
    ap.add_argument("--chromium")
    ap.add_argument("--screenshot-name", default="dashboard.png")
    ap.add_argument("--before-kill", type=float, default=0.0, help="seconds of history to let build up before pressing kill")
    ap.add_argument("--after-kill", type=float, default=2.5, help="seconds to wait after the kill before the screenshot")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    chromium = find_chromium(args.chromium)
    work = tempfile.mkdtemp(prefix="edgemu-dashcheck-")
    ports = [free_port() for _ in range(4)]
    control_port, devtools_port = ports[1], free_port()
    cfg = os.path.join(work, "cluster.toml")
    with open(cfg, "w") as f:
        f.write(cluster_toml(os.path.join(work, "results"), ports))
    env = dict(os.environ, **{TOKEN_VAR: TOKEN})
    log = open(os.path.join(args.out_dir, "dashboard-check-edgemu.log"), "w")
    procs = []
    try:
        edgemu = subprocess.Popen([args.edgemu, "run", "-c", cfg, "--quiet"], env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(edgemu)
        base = f"http://127.0.0.1:{control_port}"
        status, page = wait_http(base + "/", "the dashboard")
        assert status == 200 and "uPlot" in page, "GET / is not the dashboard page"
        assert TOKEN not in page, "the page carries the token"

        chrome = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={os.path.join(work, 'chrome')}",
             f"--remote-debugging-port={devtools_port}", "--window-size=1400,1500", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(args.out_dir, "dashboard-check-chromium.log"), "w"),
        )
        procs.append(chrome)
        _, targets = wait_http(f"http://127.0.0.1:{devtools_port}/json/list", "chromium's devtools")
        ws_url = next(t["webSocketDebuggerUrl"] for t in json.loads(targets) if t.get("type") == "page")
        page = Page(ws_url)
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1400, height=1500, deviceScaleFactor=1, mobile=False)
        page.call("Page.navigate", url=base + "/")

        # 1. Live values appear and change.
        row = '#links tr[data-link="wan/ab"]'
        page.wait("the link table", f"!!document.querySelector('{row} .achieved')")
        page.wait("an achieved rate", f"/b\\/s/.test(document.querySelector('{row} .achieved').textContent)")
        t1 = float(page.eval("document.querySelector('#run-time').textContent"))
        d1 = page.eval(f"document.querySelector('{row} .delivered').textContent")
        page.wait(
            "the run time and delivered count to change",
            f"parseFloat(document.querySelector('#run-time').textContent) > {t1} && "
            f"document.querySelector('{row} .delivered').textContent !== {json.dumps(d1)}",
        )
        assert page.eval(f"document.querySelector('{row} .state').textContent") == "up", "wan/ab is not up"
        # A direction another host carries, read from that host's address.
        remote = '#links tr[data-link="downlink/ab"]'
        page.wait("downlink/ab from host cloud", f"(document.querySelector('{remote} .host') || {{}}).textContent === 'cloud'")
        t2 = page.eval("document.querySelector('#run-time').textContent")
        d2 = page.eval(f"document.querySelector('{row} .delivered').textContent")
        print(f"dashboard check: live values change (run time {t1:.1f} s -> {t2} s, delivered {d1} -> {d2})")

        time.sleep(args.before_kill)
        # 2. Kill with the token: the link shows down and the event appears.
        page.eval(f"document.querySelector('#token').value = {json.dumps(TOKEN)}")
        page.click(f'{row} button.kill')
        page.wait("wan/ab to show down", f"document.querySelector('{row} .state').textContent === 'down'")
        page.wait("the link.kill event", "!!document.querySelector('#events li[data-kind=\"link.kill\"]')")
        page.wait("the topology to draw wan down", "!!document.querySelector('#topology line.down[data-link=\"wan\"]')")
        print("dashboard check: kill pressed -> wan/ab down, link.kill event shown")
        time.sleep(args.after_kill)  # a few chart points after the kill for the screenshot
        shot = os.path.join(args.out_dir, args.screenshot_name)
        page.screenshot(shot)
        print(f"dashboard check: screenshot {shot}")

        # 3. /metrics during the same run.
        status, text = http_get(base + "/metrics")
        assert status == 200 and 'edgemu_link_up{host="edge",link="wan",dir="ab"} 0' in text, "/metrics does not show wan/ab down"
        assert 'command="link.kill",result="ok"' in text, "/metrics did not count the kill"
        with open(os.path.join(args.out_dir, "metrics.txt"), "w") as f:
            f.write(text)
        if shutil.which("promtool"):
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            assert lint.returncode == 0, f"promtool check metrics: {lint.stdout}{lint.stderr}"
            print("dashboard check: promtool check metrics accepts the scrape")
        elif os.environ.get("CI") == "true":
            raise AssertionError("promtool is not installed (Debian package prometheus)")
        print("dashboard check: passed")
        return 0
    except (AssertionError, RuntimeError, OSError, StopIteration, ValueError) as e:
        print(f"dashboard check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
