"""The console in a real browser (headless Chromium from the machine's packages, driven by selenium): log in
through the link `/console` sends on Telegram, find an item and read its score's parts, edit MEMORY.md and
see the next reply's prompt use it, read why a reply said what it said, forget an item, open the graph, find an
entity it does not draw and draw its neighbourhood, change a setting; a screenshot of each page (and of one at a
phone's 390 px) goes to `test-artifacts/console/`.

One browser for the module; the bot runs on the test's event loop, so every browser call is made from a
thread (a blocking call on the loop would keep the bot from answering the browser)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from bot.console import graph_page
from tests.channels.telegram_harness import OWNER
from tests.console.helpers import login_link, say, start_console_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.rag.helpers import lightrag_responder

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
WAIT_SECONDS = 60  # a loaded machine (the suite on several workers) is slow to render
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(
            "The browser tests need Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
            "scripts/check.sh installs them when run as root, or: apt-get install -y chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    # One process for the browser, its pages, network and drawing: Chromium's usual ten hold about 1.1 GB
    # beside the suite's workers, one holds about 450 MB, and the pages render the same.
    for argument in ("--single-process", "--no-zygote", "--disable-gpu", "--disable-extensions"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


async def off_loop(call: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(call, *args)


async def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Any]) -> Any:
    # An element read while the page it was found on is being replaced (a form sent, the next page loading)
    # is stale: not yet what is waited for, so the condition is checked again.
    wait = WebDriverWait(driver, WAIT_SECONDS, ignored_exceptions=[StaleElementReferenceException])
    return await off_loop(wait.until, condition)


async def open_page(driver: WebDriver, url: str, screenshot: str = "") -> None:
    await off_loop(driver.get, url)
    await wait_for(driver, lambda d: d.execute_script("return document.readyState") == "complete")
    if screenshot:
        await off_loop(driver.save_screenshot, str(ARTIFACTS / screenshot))


def text_of(driver: WebDriver) -> str:
    # Read in one script: an element found first and read after could belong to the page being replaced.
    return str(driver.execute_script("const main = document.querySelector('main'); return main ? main.innerText : '';"))


async def test_the_owner_uses_the_console_in_a_browser(
    browser: WebDriver,
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_openai.set_responder(lightrag_responder)  # the echo, and LightRAG's extraction answered
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        link = await login_link(fake_telegram, OWNER)
        root = link.split("/console/", 1)[0] + "/console"

        # Log in: opening the link signs in and lands on the memory page.
        await off_loop(browser.get, link)
        await wait_for(browser, lambda d: d.current_url.endswith("/console/memory"))
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "memory.png"))
        assert "the bike lock code is 4242." in await off_loop(text_of, browser)

        # Search, and the score of the item found in its parts.
        await open_page(browser, f"{root}/memory?q=bike+lock+code", "search.png")
        row = await off_loop(
            browser.find_element,
            By.XPATH,
            "//table[contains(@class, 'results')]//tr[td[1][.='the bike lock code is 4242.']]",
        )
        # The dense part is 0 until the item's vector is made, off the reply path: either may be shown.
        parts = re.search(
            r"lexical (\d\.\d\d) \+ dense (\d\.\d\d) \+ lifts (\d\.\d\d) = relevance (\d\.\d\d)", row.text
        )
        assert parts, row.text
        lexical, dense, lifts, relevance = (float(part) for part in parts.groups())
        assert lexical > 0 and abs(lexical + dense + lifts - relevance) < 0.02
        assert "recency" in row.text and "salience" in row.text and "confidence" in row.text

        # MEMORY.md edited in the browser, and the next reply's prompt carries it.
        await open_page(browser, f"{root}/long-term")
        editor = await off_loop(browser.find_element, By.ID, "long-term")
        await off_loop(editor.clear)
        await off_loop(editor.send_keys, "My boat is called Nautilus.")
        fit = await off_loop(browser.find_element, By.ID, "long-term-fit")
        assert "tokens of its" in fit.text
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "long-term.png"))
        await off_loop(browser.find_element(By.CSS_SELECTOR, "form.editor button").click)
        await wait_for(browser, lambda d: "Saved MEMORY.md" in text_of(d))
        await say(fake_telegram, OWNER, "What is my boat called?")
        assert "My boat is called Nautilus." in (fake_openai.system_prompts()[-1] or "")

        # Why this reply: the plan, drawn, and the tokens of the last turn.
        # The turn's trace is kept just after its reply reached the chat: reloaded until it shows.
        async def why_shows_the_question() -> str:
            while True:
                await open_page(browser, f"{root}/why")
                shown = await off_loop(text_of, browser)
                if "What is my boat called?" in shown:
                    return shown
                await asyncio.sleep(0.1)

        why = await asyncio.wait_for(why_shows_the_question(), WAIT_SECONDS)
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "why.png"))
        assert "What is my boat called?" in why and "Prompt plan" in why and "MEMORY.md" in why
        assert await off_loop(browser.find_elements, By.CSS_SELECTOR, "table.plan svg.bar")

        # Forget the item from its card.
        await open_page(browser, f"{root}/memory")
        card = await off_loop(
            browser.find_element, By.XPATH, "//article[p[@class='content'][.='the bike lock code is 4242.']]"
        )
        await off_loop(card.find_element(By.CSS_SELECTOR, "form.danger button").click)
        await wait_for(browser, lambda d: "Forgotten: the bike lock code is 4242." in text_of(d))
        config = (await bot.app.config_store.current()).memory
        assert await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1) == []

        # The graph LightRAG extracted from an exchange: drawn, searched, a node selected.
        await say(fake_telegram, OWNER, "Ann sails her boat Nautilus on weekends.")
        for _ in range(500):
            if (await bot.app.rag.store.counts())["queued"]:
                break
            await asyncio.sleep(0.01)
        assert await bot.app.rag.flush_all() >= 1
        await open_page(browser, f"{root}/graph")
        await wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle[data-id='Nautilus']"))
        search = await off_loop(browser.find_element, By.ID, "graph-search")
        await off_loop(search.send_keys, "nauti")
        panel = await wait_for(
            browser, lambda d: "Nautilus was mentioned: User: Ann sails" in d.find_element(By.ID, "graph-node").text
        )
        assert panel
        await off_loop(browser.find_element(By.CSS_SELECTOR, "#graph circle[data-id='Ann']").click)
        await wait_for(browser, lambda d: "Ann was mentioned" in d.find_element(By.ID, "graph-node").text)
        shown = await off_loop(lambda: browser.find_element(By.ID, "graph-node").text)
        assert "Ann — Nautilus: Ann and Nautilus came up together" in shown
        assert "User: Ann sails her boat Nautilus on weekends." in shown  # the exchange it came from
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "graph.png"))

        # An entity that is not drawn is found by the search, and choosing it draws its neighbourhood.
        await say(fake_telegram, OWNER, "Ann's cousin Bruno rows with Carla in Porto.")  # Ann - Bruno - Carla - Porto
        for _ in range(500):
            if (await bot.app.rag.store.counts())["queued"]:
                break
            await asyncio.sleep(0.01)
        assert await bot.app.rag.flush_all() >= 1
        monkeypatch.setattr(graph_page, "MAX_NODES", 4)  # Ann, Bruno, Carla and Nautilus, the most connected
        await open_page(browser, f"{root}/graph")
        await wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle[data-id='Carla']"))
        assert not await off_loop(browser.find_elements, By.CSS_SELECTOR, "#graph circle[data-id='Porto']")
        assert "The 4 most connected of" in await off_loop(lambda: browser.find_element(By.ID, "graph-drawn").text)
        search = await off_loop(browser.find_element, By.ID, "graph-search")
        await off_loop(search.send_keys, "port")
        found = await wait_for(
            browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-found button[data-name='Porto']")
        )
        await off_loop(found[0].click)
        await wait_for(
            browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle.centre.selected[data-id='Porto']")
        )
        drawn = {
            c.get_attribute("data-id") for c in await off_loop(browser.find_elements, By.CSS_SELECTOR, "#graph circle")
        }
        assert drawn == {"Porto", "Carla", "Bruno"}  # Ann is three relations away
        shown = await off_loop(lambda: browser.find_element(By.ID, "graph-node").text)
        assert "Porto was mentioned" in shown and "User: Ann's cousin Bruno rows with Carla in Porto." in shown
        note = await off_loop(lambda: browser.find_element(By.ID, "graph-drawn").text)
        assert note == "Porto and the 2 entities within 2 relations of it are drawn."
        assert (await off_loop(lambda: browser.current_url)).endswith("/graph#Porto")
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "graph-neighbourhood.png"))
        await off_loop(search.clear)
        await off_loop(search.send_keys, "Zanzibar")
        await wait_for(
            browser, lambda d: "No entity's name contains “Zanzibar”." in d.find_element(By.ID, "graph-found").text
        )
        await off_loop(browser.find_element(By.ID, "graph-whole").click)  # back to the whole graph
        await wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle[data-id='Nautilus']"))
        assert not await off_loop(browser.find_elements, By.CSS_SELECTOR, "#graph circle[data-id='Porto']")
        await off_loop(search.clear)
        await off_loop(search.send_keys, "bruno" + Keys.ENTER)  # Enter draws the first name found
        await wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle.centre[data-id='Bruno']"))
        await off_loop(browser.back)  # the address named Bruno: Back draws the whole graph again
        await wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph circle[data-id='Nautilus']"))
        assert not await off_loop(browser.find_elements, By.CSS_SELECTOR, "#graph circle.centre")

        # A setting: a refused value is named and nothing written; a good one is written and in force.
        await open_page(browser, f"{root}/settings")
        field = await off_loop(browser.find_element, By.ID, "memory.recentDays")
        await off_loop(field.clear)
        await off_loop(field.send_keys, "seven")
        await off_loop(browser.find_element(By.CSS_SELECTOR, "form.settings > button").click)
        await wait_for(browser, lambda d: "Nothing was written" in text_of(d))
        assert "memory.recentDays" in await off_loop(
            lambda: browser.find_element(By.CSS_SELECTOR, ".setting.refused").text
        )
        field = await off_loop(browser.find_element, By.ID, "memory.recentDays")
        await off_loop(field.clear)
        await off_loop(field.send_keys, "3")
        await off_loop(browser.find_element(By.CSS_SELECTOR, "form.settings > button").click)
        await wait_for(browser, lambda d: "Saved: memory.recentDays = 3" in text_of(d))
        await off_loop(browser.save_screenshot, str(ARTIFACTS / "settings.png"))
        assert (await bot.app.config_store.current()).memory.recent_days == 3
        written = json.loads((workspace_dir / "preferences" / "runtime-config.json").read_text())
        assert written["memory"]["recentDays"] == 3

        await open_page(browser, f"{root}/health", "health.png")
        assert "messages in" in await off_loop(text_of, browser)
        await open_page(browser, f"{root}/notes", "notes.png")
        assert "User: What is my boat called?" in await off_loop(text_of, browser)

        # On a phone's width every page fits without sideways scrolling (wide tables scroll in their box).
        await off_loop(browser.set_window_size, 390, 844)
        for name in ("memory", "long-term", "notes", "why", "graph", "settings", "health"):
            await open_page(browser, f"{root}/{name}", f"{name}-390px.png")
            width = await off_loop(browser.execute_script, "return document.documentElement.scrollWidth")
            assert width <= 390, (name, width)
    finally:
        await off_loop(browser.set_window_size, 1280, 900)
        await bot.stop()
