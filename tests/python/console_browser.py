"""Drives the console in Debian's headless Chromium (selenium with chromium-driver) the way a
responder would: from an alarm and from a finding to the request and its evidence span, by
clicks and by keyboard. Prints what it saw as one JSON document (tests/it/console.rs asserts
it) and saves a screenshot of each page under OUT_DIR.

    console_browser.py BASE_URL OUT_DIR
"""

import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains

base, out_dir = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)

options = webdriver.ChromeOptions()
options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
            "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
    options.add_argument(arg)
service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
driver = webdriver.Chrome(options=options, service=service)
driver.set_page_load_timeout(30)

seen = {"doms": {}}


def visit(name, url=None):
    """Loads url (if given), keeps the DOM and a screenshot under name."""
    if url is not None:
        driver.get(base + url)
    seen["doms"][name] = driver.execute_script("return document.documentElement.outerHTML")
    driver.save_screenshot(os.path.join(out_dir, name + ".png"))


def focused():
    """The focused element as tag, text or name, and href (page-relative)."""
    e = driver.switch_to.active_element
    href = e.get_attribute("href") or ""
    return {
        "tag": e.tag_name,
        "text": (e.text or e.get_attribute("name") or "").strip(),
        "href": href.replace(base, ""),
    }


try:
    # From an alarm: the model_turns limit of the turn loop, clicked through.
    visit("alarms", "/ui/alarms?rule=model_turns")
    row = driver.find_element(By.XPATH, "//tr[td/span[normalize-space()='limit']]")
    row.find_element(By.CSS_SELECTOR, "a[href^='/ui/requests/']").click()
    seen["alarm_to"] = driver.current_url.replace(base, "")
    seen["alarm_h1"] = driver.find_element(By.TAG_NAME, "h1").text
    seen["alarm_model_turns"] = driver.find_element(
        By.XPATH, "//dt[normalize-space()='Model turns']/following-sibling::dd[1]").text
    seen["alarm_rows"] = [r.text for r in driver.find_elements(
        By.XPATH, "//h2[@id='alarms']/following-sibling::table[1]/tbody/tr")]
    visit("request")

    # From a finding: its evidence span, marked in the request's tree.
    visit("findings", "/ui/findings?rule=write_without_allow")
    driver.find_element(By.CSS_SELECTOR, "td a[href*='#span-']").click()
    seen["finding_to"] = driver.current_url.replace(base, "")
    span = driver.current_url.split("#span-")[1]
    li = driver.find_element(By.ID, "span-" + span)
    seen["evidence_class"] = li.get_attribute("class")
    seen["evidence_line"] = li.find_element(By.TAG_NAME, "summary").text
    # Open the span by keyboard: its columns show.
    summary = li.find_element(By.TAG_NAME, "summary")
    driver.execute_script("arguments[0].focus()", summary)
    ActionChains(driver).send_keys(Keys.ENTER).perform()
    seen["evidence_open"] = li.find_element(By.TAG_NAME, "details").get_attribute("open") is not None
    seen["evidence_columns"] = [dt.text for dt in li.find_elements(By.CSS_SELECTOR, "details > dl > dt")]
    visit("evidence")

    # Keyboard: the first Tab reaches the skip link, Enter moves focus to the content, and
    # the navigation follows in order.
    driver.get(base + "/ui/")
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    seen["tab_first"] = focused()
    ActionChains(driver).send_keys(Keys.ENTER).perform()
    seen["after_skip"] = driver.switch_to.active_element.get_attribute("id")
    driver.get(base + "/ui/")
    order = []
    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    for _ in range(8):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        order.append(focused())
    seen["tab_order"] = order
    # Search by keyboard: type a request id into the header's field and press Enter.
    field = driver.find_element(By.ID, "q")
    field.send_keys(sys.argv[3] if len(sys.argv) > 3 else "", Keys.ENTER)
    seen["search_to"] = driver.current_url.replace(base, "")
    visit("requests", "/ui/")
    visit("budgets", "/ui/budgets")
    visit("search", "/ui/search")
    for name, url in json.loads(os.environ.get("CONSOLE_PAGES", "{}")).items():
        visit(name, url)
finally:
    driver.quit()

print(json.dumps(seen))
