"""The web page in a real browser: Debian's chromium, headless, driven by Selenium through
chromium-driver, types a sentence, presses Translate and reads the translation, which must be
the offline translator's."""

import dataclasses
import os
import shutil

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="needs chromium and chromium-driver (apt)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from serving_helpers import running_server  # noqa: E402
from test_serving import translator  # noqa: E402, F401  (a fixture)
from transformer_mt.storage.model_dir import save_model  # noqa: E402


def browser(user_data_dir):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={user_data_dir}",
                "--window-size=1000,700"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))


def test_type_translate_and_read_the_translation(translator, tmp_path):  # noqa: F811
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    sentence = "small girl sees a big ball !"
    with running_server(tmp_path / "model") as (base, _server):
        driver = browser(tmp_path / "chromium")
        try:
            driver.get(base + "/")
            driver.find_element(By.ID, "source").send_keys(sentence)
            driver.find_element(By.ID, "translate").click()
            WebDriverWait(driver, 30).until(
                expected_conditions.text_to_be_present_in_element((By.ID, "status"), " ms"))
            beam4 = dataclasses.replace(translator.decode_cfg, beam_size=4)  # the page's
            expected = translator.translate_ids([translator.encode_source(sentence, 0)], beam4)
            assert driver.find_element(By.ID, "output").text == expected[0][0].text
            assert "line(s) in" in driver.find_element(By.ID, "status").text
            assert "parameters" in driver.find_element(By.ID, "model").text  # /v1/models
            path = os.environ.get("TRANSFORMER_MT_SCREENSHOT", str(tmp_path / "page.png"))
            assert driver.save_screenshot(path)
        finally:
            driver.quit()
