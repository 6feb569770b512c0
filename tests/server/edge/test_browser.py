"""A real browser against a default `hearth serve` (#30 item 3): a web page the user visits must not make the model
generate, and a DNS-rebound name must not read the API. Debian's headless Chromium (tests/run.sh installs it);
its host-resolver rule stands in for the attacker's DNS: `evil.test` resolves to 127.0.0.1, as a rebound name
does after its first answer."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time

import httpx
import pytest

from tests.server.conftest import free_port, start_server, stop_server

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

ATTACK = """<!doctype html><html><body><script>
const body = JSON.stringify({messages: [{role: "user", content: "Write a long story about a dragon."}],
                             max_tokens: 512, ignore_eos: true});  // seconds of work, if it were done
async function go() {
  let said = "sent";
  try {  // a "simple" request: no preflight, the page cannot read the answer, but the server would generate
    await fetch("http://127.0.0.1:%(api)d/v1/chat/completions",
                {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body});
  } catch (e) { said = "error " + e; }
  document.body.setAttribute("data-simple", said);
  document.body.setAttribute("data-done", "yes");
}
go();
</script></body></html>"""


def browse(url: str, budget_ms: int = 5000) -> str:
    """The page's DOM after it ran, as headless Chromium leaves it."""
    proc = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--host-resolver-rules=MAP evil.test 127.0.0.1", f"--virtual-time-budget={budget_ms}",
                           "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, base = start_server(env={"HEARTH_HOME": str(tmp_path_factory.mktemp("browser_home"))})
    yield base
    stop_server(proc)


@pytest.fixture
def attack_page(server):
    api_port = int(server.rsplit(":", 1)[1].split("/")[0])
    page = (ATTACK % {"api": api_port}).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_args):
            pass

    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}/"
    httpd.shutdown()


def busy(base: str) -> bool:
    return httpx.get(base.replace("/v1", "/health"), timeout=10).json().get("busy")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (tests/run.sh installs Debian's)")
def test_a_web_page_on_another_port_cannot_make_the_model_generate(server, attack_page):
    dom = browse(attack_page)
    assert 'data-done="yes"' in dom and 'data-simple="sent"' in dom, dom[-500:]  # the browser did send it
    # The server refused it (415, not JSON) before any engine work: the engine is idle at once and stays so.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert not busy(server), "a web page's text/plain POST made the model generate"
        time.sleep(0.1)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (tests/run.sh installs Debian's)")
def test_a_dns_rebound_name_reads_nothing(server):
    port = int(server.rsplit(":", 1)[1].split("/")[0])
    # The page's origin is evil.test:PORT, now resolving to this machine: the browser sends that Host.
    dom = browse(f"http://evil.test:{port}/v1/models")
    assert "SmolLM2" not in dom, "a rebound name read the model list"
    text = dom[dom.index("{"):dom.rindex("}") + 1] if "{" in dom else dom
    error = json.loads(text)["error"]
    assert "evil.test" in error["message"] and error["code"] == "host_not_allowed", error
    # The loopback names still work, from the same browser.
    assert "SmolLM2" in browse(f"http://127.0.0.1:{port}/v1/models")
