"""The console in a real browser: Debian's chromium, driven by Selenium through Debian's
chromedriver (nothing is downloaded). Every page, the live update, add / edit / forget,
and the security rules as a browser meets them. Screenshots go to the run's temporary
folder."""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import RunningConsole, Served
from support.sync import wait_until

from oryxmem.client import Client

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    if os.environ.get("CI"):
        raise RuntimeError("CI needs chromium and chromium-driver (.ci/run installs them)")
    pytest.skip(
        "no chromium and chromedriver here (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    os.environ["SE_AVOID_STATS"] = "true"  # Selenium Manager: no statistics, no downloads
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        # a name another site controls, rebound to this machine (DNS rebinding)
        "--host-resolver-rules=MAP rebind.test 127.0.0.1",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def signed_in(browser: WebDriver, running: RunningConsole) -> RunningConsole:
    browser.get(running.url)
    assert "token=" not in browser.current_url  # it left the URL (and the history)
    return running


def client(served: Served) -> Client:
    return Client(Path(served.env["ORYXMEM_SOCKET"]), 30.0)


def wait(browser: WebDriver, condition: object, timeout: float = 15) -> None:
    """Wait for `condition`; an element read while the page replaces it is read again."""
    waiting = WebDriverWait(browser, timeout, ignored_exceptions=(StaleElementReferenceException,))
    waiting.until(lambda _: condition())  # type: ignore[operator]


def row_texts(browser: WebDriver, table: str) -> list[str]:
    """The rows' text, read at once (console.js may put new rows in place meanwhile)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(row => row.innerText)"
    return list(browser.execute_script(script, f"#{table} tbody tr"))


def no_alert(browser: WebDriver) -> bool:
    try:
        _ = browser.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_every_page_shows_what_it_should(
    browser: WebDriver, signed_in: RunningConsole, served: Served, shots: Path
) -> None:
    with client(served) as memory:
        session = memory.create_session("coder")["id"]
        memory.append_message(session, "user", "Which tea do I like?")
        memory.append_message(session, "assistant", "You like green tea.")
        # Rounds are a derived index the daemon's indexer takes in off the request: the
        # episodes page is looked at once the round is in it.
        wait_until(lambda: memory.search_episodes("coder", "tea")["episodes"] != [])
    base = signed_in.base
    pages = {
        "agents": ("/", "#agents", "coder"),
        "agent": ("/agent?name=coder", "#core", "The user's name is Ada."),
        "search": ("/agent?name=coder&q=name", "#hits", "Ada"),
        "sees": ("/sees?name=coder&q=tea", "#budget", "memory"),
        "sessions": ("/sessions?name=coder", "#sessions", session[:8]),
        "episodes": ("/sessions?name=coder&q=tea", "#episodes", "green tea"),
        "session": (f"/session?id={session}", "#messages", "Which tea do I like?"),
        "history": ("/history", "#history", "coder"),
        "health": ("/health", "#indexes", "vectors"),
    }
    for name, (path, selector, text) in pages.items():
        browser.get(base + path)
        shown = browser.find_element(By.CSS_SELECTOR, selector).text
        assert text in shown, (name, shown)
        browser.save_screenshot(str(shots / f"{name}.png"))
        assert (shots / f"{name}.png").stat().st_size > 1000
    browser.get(base + "/sees?name=coder&q=tea")
    assert "The user's name is Ada." in browser.find_element(By.ID, "memory-block").text
    meters = browser.find_elements(By.CSS_SELECTOR, "#budget meter")
    assert len(meters) >= 4  # a bar per part


def test_memory_text_stays_text_in_the_browser(
    browser: WebDriver, signed_in: RunningConsole
) -> None:
    browser.get(signed_in.base + "/agent?name=coder")
    assert no_alert(browser)
    count = browser.execute_script
    assert count("return document.images.length") == 0
    assert count("return document.scripts.length") == 1  # the console's own
    assert count("return document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
    texts = " ".join(row_texts(browser, "archival"))
    assert "<script>alert(1)</script>" in texts and "<img src=x onerror=alert(2)>" in texts
    assert "\\u202egnp.exe" in texts and "\u202e" not in texts
    assert "\\x1b]0;owned\\x07" in texts
    assert browser.title == "coder · oryxmem"  # the title sequence retitled nothing
    assert no_alert(browser)


def test_a_save_from_elsewhere_shows_on_an_open_page_without_a_reload(
    browser: WebDriver, signed_in: RunningConsole, served: Served
) -> None:
    browser.get(signed_in.base + "/agent?name=coder")
    browser.execute_script("window.stillThisPage = 42")
    with client(served) as memory:
        memory.save("coder", "Saved over the socket while the page was open.")
    wait(
        browser, lambda: any("while the page was open" in t for t in row_texts(browser, "archival"))
    )
    path = served.workspace.memory_path("coder")  # and an editor's save of the file
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "- [2026-12-01 08:00:00] Typed into the file in an editor.\n")
    wait(browser, lambda: any("in an editor" in t for t in row_texts(browser, "archival")))
    assert browser.execute_script("return window.stillThisPage") == 42  # never reloaded


def test_add_edit_and_forget_through_the_page(
    browser: WebDriver, signed_in: RunningConsole, served: Served
) -> None:
    path = served.workspace.memory_path("coder")
    browser.get(signed_in.base + "/agent?name=coder")
    browser.find_element(By.NAME, "content").send_keys("Prefers answers in French.")
    Select(browser.find_element(By.NAME, "scope")).select_by_value("core")
    browser.find_element(By.CSS_SELECTOR, "form.add button").click()
    wait(browser, lambda: browser.find_element(By.ID, "notice").text == "Saved.")
    assert any("Prefers answers in French." in t for t in row_texts(browser, "core"))
    assert "Prefers answers in French." in path.read_text(encoding="utf-8")

    row = browser.find_element(By.XPATH, "//table[@id='core']//tr[contains(., 'French')]")
    row.find_element(By.LINK_TEXT, "Edit").click()
    wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "form.edit"))  # the edit page
    box = browser.find_element(By.CSS_SELECTOR, "form.edit [name=content]")
    assert box.get_attribute("value") == "Prefers answers in French."
    box.clear()
    box.send_keys("Prefers answers in Norwegian.")
    browser.find_element(By.CSS_SELECTOR, "form.edit button").click()
    wait(browser, lambda: browser.find_element(By.ID, "notice").text == "Edited.")
    text = path.read_text(encoding="utf-8")
    assert "Norwegian" in text and "French" not in text

    def forget_button() -> object:
        row = browser.find_element(By.XPATH, "//table[@id='core']//tr[contains(., 'Norwegian')]")
        return row.find_element(By.XPATH, ".//button[text()='Forget']")

    forget_button().click()  # asked first; "no" keeps it
    browser.switch_to.alert.dismiss()
    assert "Norwegian" in path.read_text(encoding="utf-8")
    forget_button().click()
    browser.switch_to.alert.accept()
    wait(browser, lambda: browser.find_element(By.ID, "notice").text == "Forgotten.")
    assert not any("Norwegian" in t for t in row_texts(browser, "core"))
    assert "Norwegian" not in path.read_text(encoding="utf-8")
    with client(served) as memory:
        events = memory.history("coder", 5)
    assert {(e["op"], e["source"]) for e in events[:3]} >= {("remove", "console")}


def test_an_edit_of_an_entry_changed_meanwhile_overwrites_nothing(
    browser: WebDriver, signed_in: RunningConsole, served: Served
) -> None:
    with client(served) as memory:
        saved = memory.save("coder", "Works from Lisbon.", "core")["entry"]
        browser.get(f"{signed_in.base}/agent/edit?name=coder&id={saved['id']}")
        memory.edit("coder", saved["id"], "Works from Porto.")  # someone else, meanwhile
    box = browser.find_element(By.NAME, "content")
    box.clear()
    box.send_keys("Works from Faro.")
    browser.find_element(By.CSS_SELECTOR, "form.edit button").click()
    wait(browser, lambda: "Nothing was overwritten" in browser.find_element(By.ID, "conflict").text)
    text = served.workspace.memory_path("coder").read_text(encoding="utf-8")
    assert "Porto" in text and "Faro" not in text


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Another site's page: a form that posts to the console by itself."""

    target = ""

    def do_GET(self) -> None:
        page = (
            "<!doctype html><title>cute cats</title>"
            f'<form id="f" method="post" action="{self.target}/agent/add">'
            '<input name="name" value="coder"><input name="csrf" value="guessed">'
            '<input name="content" value="Planted by another site."></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        pass


def test_a_form_another_site_posts_stores_nothing(
    browser: WebDriver, signed_in: RunningConsole, served: Served
) -> None:
    _Hostile.target = signed_in.base
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://localhost:{server.server_address[1]}/")
        wait(browser, lambda: browser.current_url.startswith(signed_in.base))
        wait(browser, lambda: "must" in browser.page_source or "sign" in browser.page_source)
    finally:
        server.shutdown()
    assert "Planted" not in served.workspace.memory_path("coder").read_text(encoding="utf-8")


def test_a_name_rebound_to_this_machine_gets_no_page(
    browser: WebDriver, signed_in: RunningConsole
) -> None:
    browser.get(f"http://rebind.test:{signed_in.port}/agent?name=coder")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "answers only at" in body and "Ada" not in body
