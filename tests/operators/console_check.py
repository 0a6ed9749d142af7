#!/usr/bin/env python3
"""Drives the web console in headless Chromium over the DevTools protocol
(--remote-debugging-pipe: no WebSocket, no packages beyond Python's own).

  console_check.py CHROMIUM BASE_URL RUN_ID STEP[,STEP...] CANCEL_ID SCREENSHOT

Checks that the run page of RUN_ID shows each STEP in its journal, that the
runs list shows RUN_ID, takes a screenshot of the run page, and presses
Cancel on CANCEL_ID's page until the page says CANCELLED. Prints what it
saw; exits non-zero with the reason on the first failure.
"""
import base64
import json
import os
import select
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium):
        self.profile = tempfile.mkdtemp(prefix="perdure-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        def fds():
            # Through high numbers first: either pipe end may be 3 or 4.
            os.dup2(to_child_r, 100)
            os.dup2(from_child_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--remote-debugging-pipe",
             "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--window-size=1400,1000",
             "--user-data-dir=" + self.profile, "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4, to_child_r, from_child_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def send(self, method, params=None, session=True):
        if os.environ.get("CONSOLE_CHECK_TRACE"):
            print(f"{time.time():.3f} -> {method}", file=sys.stderr, flush=True)
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_child, json.dumps(message).encode() + b"\0")
        deadline = time.time() + 30
        while time.time() < deadline:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            ready, _, _ = select.select([self.from_child], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buffer += chunk
        raise RuntimeError(f"{method}: no reply in 30 s")

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, False)
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True},
                             False)
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.goto(url)

    def goto(self, url):
        self.send("Page.navigate", {"url": url})

    def eval(self, expression):
        result = self.send("Runtime.evaluate",
                           {"expression": expression, "returnByValue": True,
                            "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, what, timeout=20):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = self.eval(expression)
                if last:
                    return last
            except RuntimeError as e:
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what} (last: {last!r})")

    def screenshot(self, path):
        shot = self.send("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        subprocess.run(["rm", "-rf", self.profile])


def main():
    chromium, base, run_id, steps, cancel_id, screenshot = sys.argv[1:7]
    browser = Browser(chromium)
    try:
        browser.open(f"{base}/#/runs")
        browser.wait_for(
            f"document.querySelector('tr[data-run=\"{run_id}\"]') !== null",
            f"the runs list to show {run_id}")
        print(f"runs list shows {run_id}")
        browser.goto(f"{base}/#/run/{run_id}")
        journal = browser.wait_for(
            "document.getElementById('run-id') && "
            f"document.getElementById('run-id').textContent === '{run_id}' && "
            "document.getElementById('journal') && "
            "document.getElementById('journal').innerText",
            f"the run page of {run_id}")
        for step in steps.split(","):
            if step not in journal:
                raise RuntimeError(f"step {step!r} not in the journal: {journal!r}")
        print(f"run page of {run_id} shows steps {steps}")
        time.sleep(0.3)
        browser.screenshot(screenshot)
        print(f"screenshot {screenshot}")
        browser.goto(f"{base}/#/run/{cancel_id}")
        browser.wait_for("document.getElementById('cancel') !== null",
                         f"the Cancel button of {cancel_id}")
        browser.eval("document.getElementById('cancel').click()")
        browser.wait_for(
            "document.querySelector('h1 .status') && "
            "document.querySelector('h1 .status').textContent === 'CANCELLED'",
            f"{cancel_id} to show CANCELLED")
        print(f"cancelled {cancel_id} from its page")
    finally:
        browser.close()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
