"""The approvals page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by .ci/run) driven by Selenium, on the API served by uvicorn on a free loopback port."""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest
import uvicorn

from sealflow.server import tokens
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(rt, known):
    """The API with its /ui pages on ``rt``, served by uvicorn on a free loopback port: its base URL."""
    yield from serving(rt, ServerSettings(rate=0, work=False))


def serving(rt, settings: ServerSettings, port: int | None = None):
    port = port or free_port()
    config = uvicorn.Config(create_app(settings, rt), host="127.0.0.1", port=port, log_level="warning",
                            lifespan="off")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, name="ui-test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not served.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    served.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser(tmp_path):
    yield from open_browser(tmp_path)


def open_browser(tmp_path):
    """Headless Chromium driven by ChromeDriver (a generator: quit when resumed)."""
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium/chromedriver (apt-get install -y chromium chromium-driver; .ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.implicitly_wait(10)  # find_element waits for the page a click led to
    try:
        yield driver
    finally:
        driver.quit()


def token(rt, principal: str) -> str:
    return tokens.create(rt.store, principal, "acme", rt.clock.now(), actor="user:root")[0]


def sign_in(browser, server: str, text: str) -> None:
    browser.get(server + "/ui/signin")
    browser.find_element(By.ID, "token").send_keys(text)
    browser.find_element(By.ID, "signin").click()
    arrive(browser, server + "/ui/approvals")


def arrive(browser, url: str) -> None:
    WebDriverWait(browser, 15).until(EC.url_to_be(url), message=f"did not arrive at {url}")


def waiting_run(rt, plan) -> str:
    run_id = rt.submit(plan, {"amount": 5}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "waiting"
    return run_id


def test_an_approver_approves_in_the_browser_and_the_run_completes(server, browser, rt, known, notes):
    # Given a run of alice's waiting at its approval gate, and bob signed in through the page
    run_id = waiting_run(rt, known)
    sign_in(browser, server, token(rt, "user:bob"))
    gate = browser.find_element(By.ID, f"gate-{run_id}-ask")
    assert '"amount": 5' in gate.find_element(By.CLASS_NAME, "payload").text
    assert gate.find_element(By.CLASS_NAME, "initiator").text == "user:alice"
    assert gate.find_element(By.CLASS_NAME, "hash").text == rt.approvals_waiting("user:bob", "acme")[0]["show_hash"]
    # When bob approves with a comment
    gate.find_element(By.TAG_NAME, "textarea").send_keys("looks right")
    gate.find_element(By.CLASS_NAME, "approve").click()
    arrive(browser, server + "/ui/approvals?notice=approved")
    # Then the page says so, nothing waits for him any more, and the run completes
    assert browser.find_element(By.ID, "notice").text == "Approved."
    assert browser.find_elements(By.ID, "none")
    assert rt.drive(run_id).state == "completed" and notes == ["approved"]
    browser.find_element(By.CSS_SELECTOR, "header form button").click()  # sign out
    arrive(browser, server + "/ui/signin")
    sign_in(browser, server, token(rt, "user:ida"))  # an auditor reads runs and their trails
    browser.get(f"{server}/ui/runs/{run_id}")
    assert browser.find_element(By.ID, "state").text == "completed"
    assert "user:bob" in browser.find_element(By.ID, "audit").text



def test_a_form_post_without_the_csrf_token_is_refused_in_the_browser(server, browser, rt, known, notes):
    # Given bob signed in, looking at a waiting gate
    run_id = waiting_run(rt, known)
    sign_in(browser, server, token(rt, "user:bob"))
    gate = browser.find_element(By.ID, f"gate-{run_id}-ask")
    # When the form is posted without its CSRF token (removed through the driver: the page runs no script)
    browser.execute_script("arguments[0].remove()", gate.find_element(By.NAME, "csrf_token"))
    gate.find_element(By.CLASS_NAME, "approve").click()
    # Then the server refuses it and the run still waits
    assert "CSRF token is missing or wrong" in browser.find_element(By.ID, "error").text
    assert rt.status(run_id).run.state == "waiting" and notes == []


def test_a_cross_site_form_post_carries_no_session_and_decides_nothing(server, browser, rt, known, tmp_path, notes):
    # Given bob signed in, and a page of another site that posts an approval to the server
    run_id = waiting_run(rt, known)
    sign_in(browser, server, token(rt, "user:bob"))
    show_hash = rt.approvals_waiting("user:bob", "acme")[0]["show_hash"]
    evil = tmp_path / "evil.html"
    evil.write_text(f'''<form method="post" action="{server}/ui/approvals/{run_id}/ask">
      <input name="decision" value="approve"><input name="payload_hash" value="{show_hash}">
      <input name="csrf_token" value="guessed"><button id="go" type="submit">win a prize</button></form>''')
    # When bob's browser submits it
    browser.get(evil.as_uri())
    browser.find_element(By.ID, "go").click()
    # Then the strict session cookie is not sent: the post is sent to sign in, and nothing is decided
    arrive(browser, server + "/ui/signin")
    assert rt.status(run_id).run.state == "waiting" and notes == []


@pytest.fixture
def oidc_server(rt, known, keys, jwks):
    """The pages with the OIDC login flow, against a provider on another site (``localhost``, while the
    pages are on ``127.0.0.1``): a real cross-site redirect for the browser's cookies."""
    from oidc_provider import Provider

    from sealflow.server.oidc import OidcSettings
    from sealflow.server.oidc_login import OidcLoginSettings

    port = free_port()
    with Provider(keys[0], client_id="sealflow-ui", host="localhost") as provider:
        settings = ServerSettings(rate=0, work=False, oidc=OidcSettings(provider.url, "sealflow-api", str(jwks)),
                                  oidc_login=OidcLoginSettings("sealflow-ui",
                                                               f"http://127.0.0.1:{port}/ui/oidc/callback"))
        yield from serving(rt, settings, port)


def test_a_person_signs_in_with_the_identity_provider_in_the_browser(oidc_server, browser, rt, known, notes):
    # Given a run waiting for a manager, and the sign-in page offering the identity provider
    run_id = waiting_run(rt, known)
    browser.get(oidc_server + "/ui/signin")
    # When bob follows it (the provider signs him in at once and sends the browser back)
    browser.find_element(By.ID, "oidc-signin").click()
    # Then he arrives at his approvals, signed in as the ID token's subject, and sees the gate
    arrive(browser, oidc_server + "/ui/approvals")
    assert browser.find_element(By.ID, "who").text == "user:bob (acme)"
    assert browser.find_element(By.ID, f"gate-{run_id}-ask")
